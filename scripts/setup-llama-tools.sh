#!/usr/bin/env bash
# Builds llama.cpp's reference tools -- llama-quantize, llama-perplexity,
# llama-bench, llama-completion -- in the build tree of
# scripts/setup-llama-server.sh (same sources, same cmake flags), so libllama
# and ggml are compiled once and only the small tool programs are added.
# Once and idempotently: a finished build leaves .cache/llama-server/.tools-done
# and the next call only prints the bin directory.
#
#   scripts/setup-llama-tools.sh      # prints the directory holding the tools
#   JOBS=1 scripts/setup-llama-tools.sh
set -euo pipefail
cd "$(dirname "$0")/.."

OUT=.cache/llama-server
BIN_DIR=$OUT/build/bin
TOOLS=(llama-quantize llama-perplexity llama-bench llama-completion)
JOBS=${JOBS:-2}

all_built() {
  [ -f "$OUT/.tools-done" ] || return 1
  for t in "${TOOLS[@]}"; do [ -x "$BIN_DIR/$t" ] || return 1; done
}

if all_built; then
  echo "$BIN_DIR"
  exit 0
fi
# Configures the tree (and builds llama-server) if that has not happened yet.
scripts/setup-llama-server.sh >/dev/null

# The same lock as setup-llama-server.sh: one build in the tree at a time.
exec 9>"$OUT/.lock"
flock 9
if all_built; then
  echo "$BIN_DIR"
  exit 0
fi
echo "setup-llama-tools: building ${TOOLS[*]} into $BIN_DIR" >&2
cmake --build "$OUT/build" --target "${TOOLS[@]}" -j "$JOBS" >"$OUT/tools-build.log" 2>&1 ||
  { tail -n 30 "$OUT/tools-build.log" >&2; exit 1; }
touch "$OUT/.tools-done"
echo "$BIN_DIR"
