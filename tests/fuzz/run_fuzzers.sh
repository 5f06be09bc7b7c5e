#!/usr/bin/env bash
# Runs every libFuzzer target of a KVFORK_FUZZ build for SECONDS each, JOBS
# at a time, on seeds made from the test data (make_seeds.py) plus the corpus
# earlier runs grew (kept in BUILD/fuzz/corpus). Prints a table (executions,
# exec/s, corpus, result), writes BUILD/fuzz/results.json, and fails if any
# target crashed, leaked, hit a sanitizer report or timed out; the input that
# did it is under BUILD/fuzz/artifacts/<target>/.
#
#   tests/fuzz/run_fuzzers.sh build/asan 60 2
#
# A crash becomes a regression test: fix the bug, then copy the artifact to
# tests/data/fuzz/<target>/ (fuzz_regression_test replays it in the unit tier).
set -euo pipefail
cd "$(dirname "$0")/../.."
BUILD=${1:?usage: run_fuzzers.sh BUILD_DIR SECONDS [JOBS]}
SECONDS_EACH=${2:?usage: run_fuzzers.sh BUILD_DIR SECONDS [JOBS]}
JOBS=${3:-$(nproc)}
TARGETS=(safetensors model_config tokenizer_load encode_decode chat_template request_body gguf http_request sampling)
OUT=$BUILD/fuzz

python3 tests/fuzz/make_seeds.py --kvfork "$BUILD/src/cli/kvfork" --out "$OUT/seeds" >/dev/null
rm -rf "$OUT/logs" "$OUT/artifacts" "$OUT/tmp"
mkdir -p "$OUT/logs"
export KVFORK_CACHE_DIR=${KVFORK_CACHE_DIR:-$PWD/.cache}
# Leaks are reported per input by libFuzzer; UBSan reports abort.
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}

run_one() {
  local t=$1
  mkdir -p "$OUT/corpus/$t" "$OUT/artifacts/$t" "$OUT/tmp/$t"
  # Scratch files (fuzz_util.cc: $TMPDIR/kvfork-fuzz-PID) live in the build
  # dir, so a target that crashes before its atexit cleanup leaves nothing in
  # /tmp; the next run removes them.
  export TMPDIR=$OUT/tmp/$t
  # -timeout: one input taking 30 s is a hang (the slowest seed takes < 1 s,
  # leaving room for a loaded machine);
  # -rss_limit_mb: a request or file that makes us allocate GiBs is a bug.
  "$BUILD/tests/fuzz/fuzz_$t" -max_total_time="$SECONDS_EACH" -timeout=30 -rss_limit_mb=2560 \
    -print_final_stats=1 -artifact_prefix="$OUT/artifacts/$t/" \
    "$OUT/corpus/$t" "$OUT/seeds/$t" >"$OUT/logs/$t.log" 2>&1
  echo $? >"$OUT/logs/$t.rc"
}
export -f run_one
export BUILD OUT SECONDS_EACH
printf '%s\n' "${TARGETS[@]}" | xargs -P "$JOBS" -I{} bash -c 'run_one {}'

failed=0
printf '%-16s %12s %9s %8s  %s\n' target executions exec/s corpus result
json="{\"seconds_each\": $SECONDS_EACH, \"targets\": ["
sep=""
for t in "${TARGETS[@]}"; do
  log=$OUT/logs/$t.log
  rc=$(cat "$OUT/logs/$t.rc")
  execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -n 1)
  rate=$(sed -n 's/^stat::average_exec_per_sec: *//p' "$log" | tail -n 1)
  corpus=$(find "$OUT/corpus/$t" -type f | wc -l)
  result=ok
  if [ "$rc" != 0 ]; then
    result="FAILED (rc $rc): $(ls "$OUT/artifacts/$t" | head -n 1)"
    failed=1
  fi
  printf '%-16s %12s %9s %8s  %s\n' "$t" "${execs:-?}" "${rate:-?}" "$corpus" "$result"
  json+="$sep{\"target\": \"$t\", \"executions\": ${execs:-0}, \"exec_per_sec\": ${rate:-0}, \"corpus\": $corpus, \"rc\": $rc}"
  sep=", "
done
echo "$json]}" >"$OUT/results.json"
if [ "$failed" != 0 ]; then
  for t in "${TARGETS[@]}"; do
    if [ "$(cat "$OUT/logs/$t.rc")" != 0 ]; then
      echo "---- $t ($OUT/logs/$t.log) ----"
      grep -E 'ERROR|SUMMARY|Check failed|CHECK|==[0-9]+==' "$OUT/logs/$t.log" | head -n 20 || true
    fi
  done
  exit 1
fi
