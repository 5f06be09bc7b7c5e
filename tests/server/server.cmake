# Server tests. Unit: schema parsing, response/SSE/metrics formatting, auth
# (no server). e2e: the real `kvfork serve` on a loopback port with a tiny
# random model, driven by the official openai npm client (node --test).
kvfork_test(server_unit_test
  SOURCES schema_test.cc writer_test.cc http_parser_test.cc http_connection_test.cc http_router_test.cc access_log_test.cc
          cache_control_test.cc
  LABELS unit LIBS kvfork_server)

find_program(KVFORK_NODE node)
if(KVFORK_NODE)
  kvfork_script_test(server_e2e_test
    COMMAND ${KVFORK_NODE} --test --test-concurrency=1
            ${PROJECT_SOURCE_DIR}/tools/node/tests/server_api.test.mjs
            ${PROJECT_SOURCE_DIR}/tools/node/tests/server_hostile.test.mjs
            ${PROJECT_SOURCE_DIR}/tools/node/tests/server_load.test.mjs
            ${PROJECT_SOURCE_DIR}/tools/node/tests/server_transport.test.mjs
    LABELS e2e TIMEOUT 600)
endif()
