# `kvfork generate` / `bench model` on a .gguf exported from a make-model
# directory: the same greedy text as the directory (qwen3, llama; f32, bf16).
find_program(KVFORK_SYSTEM_PYTHON python3 PATHS /usr/bin NO_DEFAULT_PATH)
if(KVFORK_SYSTEM_PYTHON)
  kvfork_script_test(gguf_cli_test
    COMMAND ${KVFORK_SYSTEM_PYTHON} ${PROJECT_SOURCE_DIR}/tests/cli/gguf_cli_test.py
    LABELS e2e TIMEOUT 600)
endif()
