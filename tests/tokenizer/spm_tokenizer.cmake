# The SentencePiece tokenizer of GGUF files (tokenizer/spm_model.h,
# spm_tokenizer.h): its rules on small vocabularies, the word-by-word merge
# against a plain whole-text merge loop on llama.cpp's Llama 2 and Phi-3
# vocab files, round trips, errors, and a Gemma 3 GGUF carrying one.
kvfork_test(spm_tokenizer_test
  SOURCES spm_tokenizer_test.cc
  LABELS unit LIBS kvfork_engine kvfork_model kvfork_tokenizer)
