# Tokenizer tests against references we did not write: llama.cpp's vectors and
# goldens from @lenml/tokenizers (tools/tokenizer/make_goldens.mjs).
kvfork_test(tokenizer_llama_cpp_vectors_test
  SOURCES llama_cpp_vectors_test.cc
  LABELS unit LIBS kvfork_tokenizer)
kvfork_test(tokenizer_goldens_test
  SOURCES goldens_test.cc
  LABELS unit LIBS kvfork_tokenizer)
kvfork_test(tokenizer_test
  SOURCES tokenizer_test.cc
  LABELS unit LIBS kvfork_tokenizer)
