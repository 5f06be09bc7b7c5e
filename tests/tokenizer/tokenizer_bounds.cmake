# What bounds the cost of one encode: the bytes-per-token bound a server
# checks before tokenizing (against every code point under each normalizer,
# and adversarial texts on the real tokenizers), and the thread-local scratch
# buffers giving their memory back after a large text.
kvfork_test(tokenizer_bounds_test
  SOURCES tokenizer_bounds_test.cc
  LABELS unit LIBS kvfork_tokenizer)
