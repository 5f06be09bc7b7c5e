# The committed trained model: greedy continuations byte-identical to stored goldens on
# every ISA level the CPU has (tests/model/trained_model_golden_test.py).
find_program(KVFORK_SYSTEM_PYTHON python3 PATHS /usr/bin NO_DEFAULT_PATH)
if(KVFORK_SYSTEM_PYTHON)
  kvfork_script_test(trained_model_golden_test
    COMMAND ${KVFORK_SYSTEM_PYTHON} ${PROJECT_SOURCE_DIR}/tests/model/trained_model_golden_test.py
    LABELS model TIMEOUT 600)
endif()
