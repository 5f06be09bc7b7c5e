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
            ${PROJECT_SOURCE_DIR}/tools/node/tests/reliability_util.test.mjs
            ${PROJECT_SOURCE_DIR}/tools/node/tests/reliability_faults.test.mjs
    LABELS e2e TIMEOUT 600)
endif()

# LD_PRELOAD logger of every path the server opens (the security test checks
# that request input never opens one).
add_library(kvfork_open_log_preload SHARED open_log_preload.cc)
target_link_libraries(kvfork_open_log_preload PRIVATE ${CMAKE_DL_LIBS})
set_target_properties(kvfork_open_log_preload PROPERTIES PREFIX "")
# Never instrumented: a sanitizer build's runtime must not be pulled in ahead
# of the server's own by LD_PRELOAD.
target_compile_options(kvfork_open_log_preload PRIVATE -fno-sanitize=all)
target_link_options(kvfork_open_log_preload PRIVATE -fno-sanitize=all)
if(KVFORK_NODE)
  kvfork_script_test(server_security_test
    COMMAND ${CMAKE_COMMAND} -E env KVFORK_OPEN_LOG_LIB=$<TARGET_FILE:kvfork_open_log_preload>
            ${KVFORK_NODE} --test --test-concurrency=1
            ${PROJECT_SOURCE_DIR}/tools/node/tests/reliability_security.test.mjs
    LABELS e2e TIMEOUT 600)
endif()

# The soak's 60-second version (`make soak` runs it for 10 minutes): 64
# streaming clients, a pool that forces eviction and preemption; no 5xx,
# well-formed streams, no leak (blocks, KV check, RSS).
if(KVFORK_NODE)
  kvfork_script_test(server_soak_test
    COMMAND ${KVFORK_NODE} ${PROJECT_SOURCE_DIR}/tools/node/tests/reliability_soak.mjs
            --seconds 60 --clients 64 --out ${PROJECT_BINARY_DIR}/soak/soak-60s.json
    LABELS e2e TIMEOUT 300)
endif()

# One request never takes the server down (issue 21): edge sampling values,
# a model with NaN weights, SIGHUP / SIGUSR1 mid-stream.
if(KVFORK_NODE)
  kvfork_script_test(server_robust_test
    COMMAND ${KVFORK_NODE} --test --test-concurrency=1
            ${PROJECT_SOURCE_DIR}/tools/node/tests/reliability_robust.test.mjs
    LABELS e2e TIMEOUT 300)
endif()
