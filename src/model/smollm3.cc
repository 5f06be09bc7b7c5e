// SmolLM3ForCausalLM, GGUF "smollm3": Llama's decoder where some layers apply
// no RoPE (config.json no_rope_layers, 0 = none; by default every fourth
// layer). ModelConfig::layer_uses_rope carries the pattern and the decoder
// skips the rotation there. llama.cpp's converter treats it as llama (Q/K
// rows permuted for interleaved RoPE, in every layer) and llama.cpp hard-codes
// the pattern as "layer il has RoPE iff (il + 1) % 4 != 0", so export-gguf
// refuses any other pattern and the GGUF loader sets that one.
#include "model/arch.h"

namespace kvfork {

const ArchSpec& SmolLM3Arch() {
  static const ArchSpec spec = {
      Architecture::kSmolLM3, "SmolLM3ForCausalLM",        "smollm3",
      /*default_head_dim=*/0, /*gguf_rope_permuted=*/true, nullptr,   nullptr};
  return spec;
}

std::vector<bool> SmolLM3GgufRopeLayers(int64_t num_layers) {
  std::vector<bool> uses(static_cast<size_t>(num_layers));
  for (int64_t l = 0; l < num_layers; ++l) uses[l] = (l + 1) % kSmolLM3GgufNoRopeStep != 0;
  return uses;
}

}  // namespace kvfork
