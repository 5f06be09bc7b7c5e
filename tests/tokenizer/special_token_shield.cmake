# Special-token strings in chat content stay text (--special-tokens-in-content
# text): Encode with plain ranges against a tokenizer with no added tokens,
# and the shield's markers through the real Qwen3 template.
kvfork_test(special_token_shield_test
  SOURCES special_token_shield_test.cc
  LABELS unit LIBS kvfork_tokenizer)
