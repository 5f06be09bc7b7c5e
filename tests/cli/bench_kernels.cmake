# Smoke test of `kvfork bench kernels --quick`: every MatMul and attention row
# in the table and the JSON, flag errors. ~15 s (the 2 GiB bandwidth read and
# the rotating weight and KV copies dominate).
find_program(KVFORK_SYSTEM_PYTHON python3 PATHS /usr/bin NO_DEFAULT_PATH)
if(KVFORK_SYSTEM_PYTHON)
  kvfork_script_test(bench_kernels_smoke_test
    COMMAND ${KVFORK_SYSTEM_PYTHON} ${PROJECT_SOURCE_DIR}/tests/cli/bench_kernels_smoke_test.py
    LABELS e2e TIMEOUT 600)
endif()
