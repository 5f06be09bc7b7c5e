# `kvfork perplexity` against the server's prompt logprobs on tiny Qwen3 and
# Llama 3 models (tests/cli/perplexity_test.py); llama.cpp's llama-perplexity
# on the same file is the peer tier's (tests/peer).
find_program(KVFORK_SYSTEM_PYTHON python3 PATHS /usr/bin NO_DEFAULT_PATH)
if(KVFORK_SYSTEM_PYTHON)
  kvfork_script_test(perplexity_test
    COMMAND ${KVFORK_SYSTEM_PYTHON} ${PROJECT_SOURCE_DIR}/tests/cli/perplexity_test.py
    LABELS e2e TIMEOUT 300)
endif()
