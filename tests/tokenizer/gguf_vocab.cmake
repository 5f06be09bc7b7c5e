# The tokenizer of GGUF files (tokenizer/gguf_vocab.h, engine/model_tokenizer.h)
# against llama.cpp's vocab files and test vectors, and against the same
# model's Hugging Face directory after `export-gguf`.
kvfork_test(tokenizer_gguf_test
  SOURCES gguf_vocab_test.cc gguf_vs_hf_test.cc
  LABELS unit LIBS kvfork_engine kvfork_model kvfork_tokenizer)
