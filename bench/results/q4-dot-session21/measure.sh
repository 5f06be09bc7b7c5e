#!/bin/bash
# old = main c6a651e (q4 on the f32-FMA kernel); new = q4dot 3bb674d (q4 on vdpbf16ps);
# pf = new + bf16 decode prefetch split (next block's K rows in S, V rows in P·V's first pass)
R=/work/wt/q4dot/bench/results/q4-dot-session21
cd /work/wt/q4dot
declare -A K=([old]=/tmp/q4dot_old/kvfork [new]=/tmp/q4dot_new/kvfork [pf]=/tmp/q4dot_pf/kvfork)
stamp() { echo "== $* $(date -u +%H:%M:%S) load $(cut -d' ' -f1 /proc/loadavg)"; }
for r in 1 2 3; do
  if [ $r = 2 ]; then order="pf new old"; else order="old new pf"; fi
  for b in $order; do stamp "H round $r $b"; /tmp/q4dot_h/h_$b bf16 q4 q4r int8; done
done > $R/harness.log 2>&1
for r in 1 2; do
  if [ $r = 2 ]; then order="pf new old"; else order="old new pf"; fi
  for b in $order; do stamp "A round $r $b"; ${K[$b]} bench kernels --attention-only --threads 2 --json $R/attn_${b}_$r.json; done
done > $R/attn.log 2>&1
for r in 1 2; do
  if [ $r = 2 ]; then runs="pf:bf16 old:q4 new:q4r new:q4 new:bf16"; else runs="new:bf16 new:q4 new:q4r old:q4 pf:bf16"; fi
  for x in $runs; do b=${x%%:*}; d=${x##*:}; stamp "M round $r $b $d"
    ${K[$b]} bench model --model /tmp/M8 --threads 2 --prompt-tokens 8192 --decode-tokens 32 --prefill-runs 1 --kv-dtype $d --json $R/model_${b}_${d}_$r.json 2>&1 | grep -E "read bandwidth|prefill|decode"
  done
done > $R/model.log 2>&1
echo finished >> $R/model.log
