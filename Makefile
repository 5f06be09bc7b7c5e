# The two commands a new user runs (README.md):
#   make run    install deps, build, make the default model, start kvfork on it
#   make test   install deps, build, run every test tier
PRESET ?= release
BUILD_DIR := build/$(PRESET)
KVFORK := $(BUILD_DIR)/src/cli/kvfork
DEFAULT_MODEL := models/default
JOBS ?= $(shell nproc)

.PHONY: all deps build run test test-unit model bench-serve clean

all: build

deps:
	@scripts/install-deps.sh

build: deps
	@cmake --preset $(PRESET) >/dev/null
	@cmake --build --preset $(PRESET) -j $(JOBS)

# A qwen3-architecture model of about 50M parameters on the real Qwen3
# tokenizer, with deterministic random weights (no weights can be downloaded).
$(DEFAULT_MODEL)/config.json:
	@$(MAKE) --no-print-directory build
	$(KVFORK) make-model --arch qwen3 --shape default-50m --seed 1 \
	  --tokenizer .cache/npm/tokenizer-qwen3/package/models --out $(DEFAULT_MODEL)

model: build $(DEFAULT_MODEL)/config.json

PORT ?= 8080

run: model
	@echo "kvfork: serving $(DEFAULT_MODEL) on http://127.0.0.1:$(PORT) -- try:"
	@echo "  curl -s http://127.0.0.1:$(PORT)/v1/chat/completions -H 'Content-Type: application/json' \\"
	@echo "    -d '{\"messages\":[{\"role\":\"user\",\"content\":\"Hello\"}],\"max_tokens\":32}'"
	$(KVFORK) serve --model $(DEFAULT_MODEL) --port $(PORT)

test: build
	ctest --test-dir $(BUILD_DIR) --output-on-failure -j $(JOBS)

test-unit: build
	ctest --test-dir $(BUILD_DIR) --output-on-failure -j $(JOBS) -L unit

# The serving benchmark (issue 7): kvfork configurations and llama.cpp's
# llama-server on the same workloads; writes bench/results/README.md, serve.json
# and charts. Long (tens of minutes on 2 cores); ARGS=--quick for a small run.
SYSTEM_PYTHON ?= /usr/bin/python3
bench-serve: build
	$(SYSTEM_PYTHON) bench/serve/bench_serve.py --kvfork $(KVFORK) $(ARGS)

clean:
	rm -rf build
