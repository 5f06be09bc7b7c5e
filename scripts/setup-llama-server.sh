#!/usr/bin/env bash
# Builds llama.cpp's `llama-server` (the peer of the serving benchmarks) from
# the sources install-deps.sh cloned into .cache/llama.cpp (node-llama-cpp
# 3.22.1's bundle). Once and idempotently: a finished build leaves
# .cache/llama-server/.done and the next call only prints the binary's path.
# Nothing is downloaded: no CURL/OpenSSL, no prebuilt web UI.
#
#   scripts/setup-llama-server.sh      # prints the path of llama-server
#   JOBS=1 scripts/setup-llama-server.sh
set -euo pipefail
cd "$(dirname "$0")/.."

SRC=.cache/llama.cpp
OUT=.cache/llama-server
BIN=$OUT/build/bin/llama-server
JOBS=${JOBS:-2}

if [ -f "$OUT/.done" ] && [ -x "$BIN" ]; then
  echo "$BIN"
  exit 0
fi
if [ ! -f "$SRC/.done" ]; then
  scripts/install-deps.sh >&2
fi
if [ ! -f "$SRC/CMakeLists.txt" ]; then
  echo "setup-llama-server: no llama.cpp sources at $SRC (install-deps.sh clones them from node-llama-cpp)" >&2
  exit 1
fi

mkdir -p "$OUT"
# Two callers at once (a benchmark and a test) build once: the second waits.
exec 9>"$OUT/.lock"
flock 9
if [ -f "$OUT/.done" ] && [ -x "$BIN" ]; then
  echo "$BIN"
  exit 0
fi

launcher=()
if command -v ccache >/dev/null; then
  launcher=(-DCMAKE_C_COMPILER_LAUNCHER=ccache -DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
fi
echo "setup-llama-server: building llama-server into $OUT (several minutes on 2 cores, once)" >&2
cmake -S "$SRC" -B "$OUT/build" -G Ninja "${launcher[@]}" \
  -DCMAKE_BUILD_TYPE=Release -DGGML_NATIVE=ON -DBUILD_SHARED_LIBS=OFF \
  -DLLAMA_CURL=OFF -DLLAMA_OPENSSL=OFF -DLLAMA_BUILD_UI=OFF -DLLAMA_USE_PREBUILT_UI=OFF \
  -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_TOOLS=ON \
  -DLLAMA_BUILD_SERVER=ON -DLLAMA_BUILD_APP=OFF >"$OUT/configure.log" 2>&1 ||
  { tail -n 30 "$OUT/configure.log" >&2; exit 1; }
cmake --build "$OUT/build" --target llama-server -j "$JOBS" >"$OUT/build.log" 2>&1 ||
  { tail -n 30 "$OUT/build.log" >&2; exit 1; }
touch "$OUT/.done"
echo "$BIN"
