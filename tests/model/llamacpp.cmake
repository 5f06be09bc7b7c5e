# GGUF export (unit) and parity with llama.cpp through node-llama-cpp (model).
kvfork_test(gguf_test
  SOURCES llamacpp/gguf_test.cc
  LABELS model LIBS kvfork_model kvfork_kernels kvfork_core)
kvfork_test(llamacpp_parity_test
  SOURCES llamacpp/llamacpp_parity_test.cc
  LABELS model LIBS kvfork_model kvfork_kernels kvfork_core TIMEOUT 900)
