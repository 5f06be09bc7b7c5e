// Phi3ForCausalLM (Phi-3, Phi-3.5, Phi-4-mini), GGUF "phi3": Llama's decoder
// with fused projections (self_attn.qkv_proj [q + 2 kv, hidden] and
// mlp.gate_up_proj [2 * intermediate, hidden], gate first), split at bind
// into the decoder's q/k/v and gate/up as row-range views; NeoX RoPE on the
// first rotary_dim dims of each head (partial_rotary_factor, Phi-4-mini 0.75);
// longrope scaling (short/long factors, original_max_position_embeddings).
// llama.cpp stores the fused tensors as attn_qkv / ffn_up unpermuted and the
// factors as the model-wide rope_factors_short / rope_factors_long tensors.
#include "model/arch.h"

namespace kvfork {

const ArchSpec& Phi3Arch() {
  static const ArchSpec spec = {Architecture::kPhi3,          "Phi3ForCausalLM", "phi3",
                                /*default_head_dim=*/0,
                                /*gguf_rope_permuted=*/false, nullptr,           nullptr,
                                /*fused_projections=*/true};
  return spec;
}

}  // namespace kvfork
