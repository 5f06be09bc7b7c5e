# min_tokens, include_stop_str_in_output and prompt logprobs through the
# official openai client (issue 21, section 5).
find_program(KVFORK_NODE node)
if(KVFORK_NODE)
  kvfork_script_test(server_generation_e2e_test
    COMMAND ${KVFORK_NODE} --test --test-concurrency=1
            ${PROJECT_SOURCE_DIR}/tools/node/tests/server_generation.test.mjs
    LABELS e2e TIMEOUT 300)
endif()

kvfork_test(server_generation_unit_test
  SOURCES generation_schema_test.cc
  LABELS unit LIBS kvfork_server)
