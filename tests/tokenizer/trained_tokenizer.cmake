# The committed trained model's tokenizer: kvfork's ids equal the trainer's own
# encoding (tools/train/bpe.py) on held-out text (tests/tokenizer/trained_tokenizer_test.py).
find_program(KVFORK_SYSTEM_PYTHON python3 PATHS /usr/bin NO_DEFAULT_PATH)
if(KVFORK_SYSTEM_PYTHON)
  kvfork_script_test(trained_tokenizer_test
    COMMAND ${KVFORK_SYSTEM_PYTHON} ${PROJECT_SOURCE_DIR}/tests/tokenizer/trained_tokenizer_test.py
    LABELS unit TIMEOUT 120)
endif()
