# GGUF export (unit) and parity with llama.cpp through node-llama-cpp (model).
kvfork_test(gguf_test
  SOURCES llamacpp/gguf_test.cc
  LABELS model LIBS kvfork_model kvfork_kernels kvfork_core)
kvfork_test(llamacpp_parity_test
  SOURCES llamacpp/llamacpp_parity_test.cc
  LABELS model LIBS kvfork_model kvfork_kernels kvfork_core TIMEOUT 900)
# Files quantized by llama.cpp's llama-quantize bind in place (model tier;
# skipped where llama-quantize is not built).
kvfork_test(gguf_quantized_load_test
  SOURCES llamacpp/gguf_quantized_load_test.cc
  LABELS model LIBS kvfork_model kvfork_kernels kvfork_core)
