kvfork_test(kv_cache_test
  SOURCES kv_cache_test.cc kv_property_test.cc
  LABELS unit LIBS kvfork_kv)
kvfork_test(kv_parity_test
  SOURCES kv_parity_test.cc
  LABELS model LIBS kvfork_kv kvfork_model kvfork_kernels kvfork_core)
# The property test at 1M operations per configuration (~10 s of CPU).
kvfork_script_test(kv_property_slow_test
  COMMAND env KVFORK_KV_PROPERTY_OPS=1000000 $<TARGET_FILE:kv_cache_test> --gtest_filter=*KvProperty*
  LABELS slow)
# The prefix tree snapshot behind GET /v1/cache/tree (issue 29).
kvfork_test(prefix_tree_test
  SOURCES prefix_tree_test.cc
  LABELS unit LIBS kvfork_kv)
