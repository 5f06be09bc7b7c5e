# Smoke test of `kvfork bench model` on a tiny model: fields, the median of
# the timed prefills, repeatable greedy decode, flag errors. A few seconds
# (the bandwidth and peak measurements dominate).
find_program(KVFORK_SYSTEM_PYTHON python3 PATHS /usr/bin NO_DEFAULT_PATH)
if(KVFORK_SYSTEM_PYTHON)
  kvfork_script_test(bench_model_smoke_test
    COMMAND ${KVFORK_SYSTEM_PYTHON} ${PROJECT_SOURCE_DIR}/tests/cli/bench_model_smoke_test.py
    LABELS e2e TIMEOUT 300)
endif()
