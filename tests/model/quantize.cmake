# kvfork quantize: the per-tensor recipe (unit), and byte-for-byte agreement
# with llama.cpp's llama-quantize plus loading by llama.cpp (model; skips
# when scripts/setup-llama-tools.sh has not built the tools).
kvfork_test(quantize_recipe_test
  SOURCES quantize_recipe_test.cc
  LABELS unit LIBS kvfork_model kvfork_kernels kvfork_core)
# One ctest test per llama.cpp comparison (quantize_llamacpp_test.Qwen3TiedEveryMix,
# ...), so ctest -j2 spreads them; the models they share are made once (a lock).
kvfork_test(quantize_llamacpp_test
  SOURCES llamacpp/quantize_llamacpp_test.cc
  LABELS model LIBS kvfork_model kvfork_kernels kvfork_core TIMEOUT 900
  CASES QuantizeVsLlamaCpp.Qwen3TiedEveryMix QuantizeVsLlamaCpp.LlamaUntiedWithFallbackRows
        QuantizeVsLlamaCpp.Qwen3MoeEveryMix QuantizeVsLlamaCpp.GgufInputsGiveTheSameFile
        QuantizeVsLlamaCpp.LlamaCppLoadsAndRunsOurFiles)
