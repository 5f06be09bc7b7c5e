# The fleet simulation (bench/serve/fleet.py --quick): 4 tiny replicas with
# --kv-events behind test routers; system python3 (python3-zmq, -msgpack).
find_program(KVFORK_SYSTEM_PYTHON python3 PATHS /usr/bin NO_DEFAULT_PATH)
if(KVFORK_SYSTEM_PYTHON)
  kvfork_script_test(fleet_sim_smoke_test
    COMMAND ${KVFORK_SYSTEM_PYTHON} ${PROJECT_SOURCE_DIR}/tests/cli/fleet_sim_smoke_test.py
    LABELS e2e TIMEOUT 300)
endif()
# The Dockerfile and the llm-d manifests checked offline: their kvfork
# arguments start a real server; labels, ports, topic and block size agree.
if(KVFORK_SYSTEM_PYTHON)
  kvfork_script_test(deploy_manifest_test
    COMMAND ${KVFORK_SYSTEM_PYTHON} ${PROJECT_SOURCE_DIR}/tests/cli/deploy_manifest_test.py
    LABELS e2e TIMEOUT 300)
endif()
