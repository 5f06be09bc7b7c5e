kvfork_test(kv_cache_test
  SOURCES kv_cache_test.cc kv_property_test.cc
  LABELS unit LIBS kvfork_kv)
