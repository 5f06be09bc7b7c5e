# Smoke test of the serving benchmark's driver (bench/serve): every scenario
# on kvfork with the tiny model, a few seconds. The full benchmark never runs
# here (make bench-serve). Needs the system Python (python3-matplotlib).
find_program(KVFORK_SYSTEM_PYTHON python3 PATHS /usr/bin NO_DEFAULT_PATH)
if(KVFORK_SYSTEM_PYTHON)
  kvfork_script_test(bench_serve_smoke_test
    COMMAND ${KVFORK_SYSTEM_PYTHON} ${PROJECT_SOURCE_DIR}/tests/cli/bench_serve_smoke_test.py
    LABELS e2e TIMEOUT 300)
endif()
