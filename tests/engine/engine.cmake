# Engine tests. Unit: sampler, stop strings, request validation, step budget (seconds).
kvfork_test(engine_unit_test
  SOURCES sampler_test.cc stop_matcher_test.cc request_validation_test.cc step_budget_test.cc
  LABELS unit LIBS kvfork_engine)

# End to end on a tiny random Qwen3 with the real Qwen3 tokenizer.
kvfork_test(engine_test
  SOURCES engine_test.cc
  LABELS model LIBS kvfork_engine kvfork_model kvfork_kv kvfork_tokenizer)
