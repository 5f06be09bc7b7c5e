#!/bin/bash
# One compute thread (the other of the 2 cores was busy with another session's server benchmark):
# bench model at 8k, new bf16 / q4 / q4r and old q4, bf16 first and last.
R=/work/wt/q4dot/bench/results/q4-dot-session21
cd /work/wt/q4dot
declare -A K=([old]=/tmp/q4dot_old/kvfork [new]=/tmp/q4dot_new/kvfork)
stamp() { echo "== $* $(date -u +%H:%M:%S) load $(cut -d' ' -f1 /proc/loadavg)"; }
for x in new:bf16 new:q4 old:q4 new:q4r new:bf16; do b=${x%%:*}; d=${x##*:}; stamp "M1 $b $d"
  ${K[$b]} bench model --model /tmp/M8 --threads 1 --prompt-tokens 8192 --decode-tokens 32 --prefill-runs 1 --kv-dtype $d --json $R/model1t_${b}_${d}.json 2>&1 | grep -E "read bandwidth|prefill|decode"
done > $R/model_1thread.log 2>&1
echo finished >> $R/model_1thread.log
