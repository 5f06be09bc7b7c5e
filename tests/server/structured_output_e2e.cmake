# Structured output through the official openai client: random schemas at
# temperature 1, validated by Python's jsonschema (python3-jsonschema).
find_program(KVFORK_NODE node)
find_program(KVFORK_JSONSCHEMA_PYTHON python3 PATHS /usr/bin NO_DEFAULT_PATH)
if(KVFORK_NODE AND KVFORK_JSONSCHEMA_PYTHON)
  kvfork_script_test(server_structured_output_e2e_test
    COMMAND ${CMAKE_COMMAND} -E env KVFORK_PYTHON=${KVFORK_JSONSCHEMA_PYTHON}
            ${KVFORK_NODE} --test --test-concurrency=1
            ${PROJECT_SOURCE_DIR}/tools/node/tests/structured_output.test.mjs
    LABELS e2e TIMEOUT 300)
endif()
