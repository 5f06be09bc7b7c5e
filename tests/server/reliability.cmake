# Reliability tests of the real `kvfork serve` (docs/reliability.md): fault
# injection, security properties, and a 60-second soak under load. All run
# on loopback against a tiny random Qwen3-shaped model.
# Start/stop of the HTTP server without a model (no sockets leak, no hang).
kvfork_test(server_lifecycle_test
  SOURCES http_server_lifecycle_test.cc
  LABELS unit LIBS kvfork_server TIMEOUT 120)

find_program(KVFORK_NODE node)
if(KVFORK_NODE)
  kvfork_script_test(server_faults_test
    COMMAND ${KVFORK_NODE} --test --test-concurrency=1
            ${PROJECT_SOURCE_DIR}/tools/node/tests/reliability_faults.test.mjs
    LABELS e2e TIMEOUT 600)
endif()

# LD_PRELOAD logger of every path the server opens (the security test checks
# that request input never opens one).
add_library(kvfork_open_log_preload SHARED open_log_preload.cc)
target_link_libraries(kvfork_open_log_preload PRIVATE ${CMAKE_DL_LIBS})
set_target_properties(kvfork_open_log_preload PROPERTIES PREFIX "")
if(KVFORK_NODE)
  kvfork_script_test(server_security_test
    COMMAND ${CMAKE_COMMAND} -E env KVFORK_OPEN_LOG_LIB=$<TARGET_FILE:kvfork_open_log_preload>
            ${KVFORK_NODE} --test --test-concurrency=1
            ${PROJECT_SOURCE_DIR}/tools/node/tests/reliability_security.test.mjs
    LABELS e2e TIMEOUT 600)
endif()
