# min_tokens, include_stop_str_in_output and prompt logprobs (issue 21, 5).
kvfork_test(generation_options_test
  SOURCES generation_options_test.cc
  LABELS unit LIBS kvfork_engine)

# The same end to end on the tiny random Qwen3 with the real tokenizer.
kvfork_test(generation_test
  SOURCES generation_test.cc
  LABELS model LIBS kvfork_engine kvfork_model kvfork_kv kvfork_tokenizer)
