# KV quantization quality (issue 26), with the system Python (numpy):
# - kv_quality_test: `kvfork kv-quality` on a tiny random model: f32 against
#   f32 is exactly 0 KL and 100% top-1; bf16 against f32 matches a numpy
#   recomputation from both runs' logits and `kvfork perplexity`;
# - kv_quality_kivi_test: the KIVI simulation (--kv-dtype kivi4|kivi2) on the
#   trained model: one group per chunk is bitwise bf16, kivi2 > kivi4 > 0 KL,
#   the group size matters, refusals;
# - kv_quality_bench_smoke_test: bench/kv_quality/kv_quality.py on the trained
#   model with a short context (llama.cpp's rows too when llama-perplexity is
#   built); the full study is `make bench-kv-quality`.
find_program(KVFORK_SYSTEM_PYTHON python3 PATHS /usr/bin NO_DEFAULT_PATH)
if(KVFORK_SYSTEM_PYTHON)
  foreach(test kv_quality_test kv_quality_kivi_test kv_quality_bench_smoke_test)
    kvfork_script_test(${test}
      COMMAND ${KVFORK_SYSTEM_PYTHON} ${PROJECT_SOURCE_DIR}/tests/cli/${test}.py
      LABELS model TIMEOUT 300)
  endforeach()
endif()
