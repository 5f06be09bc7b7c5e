#!/bin/sh
# Runs `kvfork bench kernels --attention-only --quick` for several binaries in
# turn, ROUNDS times, into one log (this VM's speed changes minute to minute,
# so only runs alternated like this compare); summarize_rounds.py reads it.
#
#   bench/kernels/alternate_rounds.sh LOG THREADS ROUNDS old=/tmp/kvfork_old new=build/release/src/cli/kvfork
log=$1; threads=$2; rounds=$3; shift 3
json=$(mktemp)
: > "$log"
for i in $(seq 1 "$rounds"); do
  for named in "$@"; do
    echo "== round $i ${named%%=*}" >> "$log"
    "${named#*=}" bench kernels --attention-only --threads "$threads" --quick --json "$json" 2>&1 |
      grep -E "^(prefill|22 after|decode)" >> "$log"
  done
done
rm -f "$json"
