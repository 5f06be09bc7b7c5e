# KV quantization quality (issue 26), with the system Python (numpy):
# - kv_quality_test: `kvfork kv-quality` on a tiny random model: f32 against
#   f32 is exactly 0 KL and 100% top-1; bf16 against f32 matches a numpy
#   recomputation from both runs' logits and `kvfork perplexity`.
find_program(KVFORK_SYSTEM_PYTHON python3 PATHS /usr/bin NO_DEFAULT_PATH)
if(KVFORK_SYSTEM_PYTHON)
  foreach(test kv_quality_test)
    kvfork_script_test(${test}
      COMMAND ${KVFORK_SYSTEM_PYTHON} ${PROJECT_SOURCE_DIR}/tests/cli/${test}.py
      LABELS model TIMEOUT 300)
  endforeach()
endif()
