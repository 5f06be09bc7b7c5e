# GGUF export (unit) and parity with llama.cpp through node-llama-cpp (model).
kvfork_test(gguf_test
  SOURCES llamacpp/gguf_test.cc
  LABELS model LIBS kvfork_model kvfork_kernels kvfork_core)
# One ctest test per case (llamacpp_parity_test.qwen3, ...): each makes its
# own model and runs node-llama-cpp and kvfork on it, so ctest -j2 spreads them.
set(parity_cases)
foreach(c llama llama_rope_scaling qwen3 qwen2 smollm3 phi3 phi3_longrope mistral
          mistral_window_gguf gemma3 qwen3moe qwen3moe_tied qwen3_q8_0 llama_q6_k
          smollm3_q8_0 phi3_longrope_q8_0 phi3_q4_k_m qwen3moe_q4_k_m)
  list(APPEND parity_cases Models/LlamaCppParity.GreedyAndLogitsMatch/${c})
endforeach()
kvfork_test(llamacpp_parity_test
  SOURCES llamacpp/llamacpp_parity_test.cc
  LABELS model LIBS kvfork_model kvfork_kernels kvfork_core TIMEOUT 900
  CASES ${parity_cases})
# Files quantized by llama.cpp's llama-quantize bind in place (model tier;
# skipped where llama-quantize is not built).
kvfork_test(gguf_quantized_load_test
  SOURCES llamacpp/gguf_quantized_load_test.cc
  LABELS model LIBS kvfork_model kvfork_kernels kvfork_core)
