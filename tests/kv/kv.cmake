kvfork_test(kv_cache_test
  SOURCES kv_cache_test.cc kv_property_test.cc
  LABELS unit LIBS kvfork_kv)
kvfork_test(kv_parity_test
  SOURCES kv_parity_test.cc
  LABELS model LIBS kvfork_kv kvfork_model kvfork_kernels kvfork_core)
