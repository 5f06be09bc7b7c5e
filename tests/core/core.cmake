kvfork_test(core_test
  SOURCES status_test.cc bf16_test.cc thread_pool_test.cc cpu_features_test.cc
  LABELS unit LIBS kvfork_core)
