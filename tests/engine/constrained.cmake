# Constrained decoding in the engine on the tiny random Qwen3 with the real
# Qwen3 tokenizer: outputs follow the grammar at temperature 1, with n > 1,
# batched, preempted and with stop strings.
kvfork_test(engine_constrained_test
  SOURCES constrained_test.cc
  LABELS model LIBS kvfork_engine kvfork_model kvfork_kv kvfork_grammar kvfork_tokenizer)
