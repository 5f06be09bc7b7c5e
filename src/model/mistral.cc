// MistralForCausalLM (Mistral 7B, Ministral): Llama's decoder, with an
// optional sliding window over every layer (config.json "sliding_window",
// null = none: Mistral 7B v0.1 has 4096, v0.2 and later null).
//
// GGUF: llama.cpp's converter writes Mistral as general.architecture "llama"
// (LlamaModel, Q and K rows permuted) and does not write the window, so a
// Mistral GGUF is a Llama GGUF here as there: it loads as LlamaArch and runs
// without a window, as llama.cpp runs it. Only the Hugging Face directory
// carries the window.
#include "model/arch.h"

namespace kvfork {

const ArchSpec& MistralArch() {
  static const ArchSpec spec = {Architecture::kMistral,
                                "MistralForCausalLM",
                                "llama",
                                /*default_head_dim=*/0,
                                /*gguf_rope_permuted=*/true,
                                nullptr,
                                nullptr,
                                /*fused_projections=*/false,
                                /*model_type=*/"mistral",
                                /*has_sliding_window=*/true};
  return spec;
}

}  // namespace kvfork
