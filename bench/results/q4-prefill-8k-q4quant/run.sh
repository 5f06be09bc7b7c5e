#!/bin/bash
# Issue 26, q4 / q4r prefill at 8k against bf16 KV: main's binary (OLD: the
# scalar q4 quantizer and rotation) and this branch's (NEW: their SIMD
# copies, the amx ScoresQ4 and SplitBf16 rewrites) alternated in one script,
# even rounds in reverse order, on a cut model of the qwen3-0.6b shape
# (MODEL: `kvfork make-model --arch qwen3 --shape qwen3-0.6b --layers 4
# --seed 1`; per layer the prefill's matmul and attention work is the full
# model's). The process's CPU time (both prefills, the limits probes, the
# decode) is printed too: on a loaded machine it moves less than wall time.
# Usage: run.sh OLD NEW MODEL ROUNDS [FIRST_ROUND] >> run.log
old=$1 new=$2 model=$3 rounds=${4:-2} first=${5:-1}
out=$(dirname "$0")
configs=("old bf16" "new bf16" "old q4" "new q4" "old q4r" "new q4r")
for round in $(seq "$first" "$rounds"); do
  order=("${configs[@]}")
  if [ $((round % 2)) -eq 0 ]; then
    order=()
    for ((i = ${#configs[@]} - 1; i >= 0; i--)); do order+=("${configs[i]}"); done
  fi
  for cfg in "${order[@]}"; do
    set -- $cfg
    bin=$new
    [ "$1" = old ] && bin=$old
    echo "== round $round $1 kv $2 $(date +%T) load $(cut -d' ' -f1-3 /proc/loadavg)"
    /usr/bin/time -f "process cpu user %U s, sys %S s, wall %e s" \
      "$bin" bench model --model "$model" --threads 2 --prompt-tokens 8192 --decode-tokens 4 \
      --prefill-runs 1 --kv-dtype "$2" --json "$out/r${round}-$1-$2.json" 2>&1 |
      grep -E "^(prefill|read bandwidth|process cpu)"
  done
done
