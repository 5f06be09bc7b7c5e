#!/bin/bash
# old = main e29d115 (a softmax step per block), new = ce6c9e5 (per group of 128 keys);
# M8 = kvfork make-model --arch qwen3 --shape qwen3-0.6b --layers 8 --seed 1 --out /tmp/M8
R=/work/main/bench/results/model-8k-session22
declare -A K=([old]=/tmp/s22/kvfork_old [new]=/tmp/s22/kvfork_new)
stamp() { echo "== $* $(date -u +%H:%M:%S) load $(cut -d' ' -f1 /proc/loadavg)"; }
for r in 1 2; do
  if [ $r = 2 ]; then runs="new:q4 old:q4 new:bf16 old:bf16"; else runs="old:bf16 new:bf16 old:q4 new:q4"; fi
  for x in $runs; do b=${x%%:*}; d=${x##*:}; stamp "M round $r $b $d"
    ${K[$b]} bench model --model /tmp/M8 --threads 2 --prompt-tokens 8192 --decode-tokens 32 --prefill-runs 1 --kv-dtype $d --json $R/model_${b}_${d}_$r.json 2>&1 | grep -E "read bandwidth|prefill|decode"
  done
done > $R/model.log 2>&1
echo finished >> $R/model.log
