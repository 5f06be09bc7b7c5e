# Smoke tests of the benchmark programs, with the system Python
# (python3-matplotlib for the serving page's charts). They check that each
# runs, what it prints and writes, and its flag errors, never its numbers:
# - bench_serve: the serving benchmark's driver (bench/serve), every scenario
#   on kvfork with the tiny model; the full benchmark is `make bench-serve`;
# - bench_restart: the restart benchmark (bench/serve/bench_restart.py), every
#   variant on the tiny model and a 256-word conversation;
# - bench_model: `kvfork bench model` on a tiny model (the median of the
#   timed prefills, repeatable greedy decode);
# - bench_kernels: `kvfork bench kernels --quick`, every MatMul and attention
#   row (~15 s: the 2 GiB bandwidth read and the rotating copies dominate),
#   then `--attention-only`.
find_program(KVFORK_SYSTEM_PYTHON python3 PATHS /usr/bin NO_DEFAULT_PATH)
if(KVFORK_SYSTEM_PYTHON)
  foreach(bench serve restart model kernels)
    kvfork_script_test(bench_${bench}_smoke_test
      COMMAND ${KVFORK_SYSTEM_PYTHON} ${PROJECT_SOURCE_DIR}/tests/cli/bench_${bench}_smoke_test.py
      LABELS e2e TIMEOUT 600)
  endforeach()
endif()
