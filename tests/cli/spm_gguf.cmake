# GGUF models with a SentencePiece vocabulary (Gemma 3 with Llama 2's, Phi-3
# with its own) serve with their own tokenizer; /tokenize ids equal
# llama-server's on the same file where llama-server is built.
find_program(KVFORK_SYSTEM_PYTHON python3 PATHS /usr/bin NO_DEFAULT_PATH)
if(KVFORK_SYSTEM_PYTHON)
  kvfork_script_test(spm_gguf_test
    COMMAND ${KVFORK_SYSTEM_PYTHON} ${PROJECT_SOURCE_DIR}/tests/cli/spm_gguf_test.py
    LABELS e2e TIMEOUT 600)
endif()
