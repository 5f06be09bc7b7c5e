# Engine tests. Unit: sampler, stop strings, request validation (seconds).
kvfork_test(engine_unit_test
  SOURCES sampler_test.cc stop_matcher_test.cc request_validation_test.cc
  LABELS unit LIBS kvfork_engine)
