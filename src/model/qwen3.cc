// Qwen3ForCausalLM, GGUF "qwen3": Llama's decoder plus a per-head RMSNorm of
// q and k (self_attn.q_norm / k_norm, weight [head_dim]) before RoPE, and an
// explicit head_dim that need not be hidden_size / num_heads.
#include "kernels/ops.h"
#include "model/arch.h"
#include "model/weights.h"

namespace kvfork {

void AddQkNorm(const ModelConfig& c, int64_t layer, std::vector<ExpectedTensor>* out) {
  out->push_back(LayerTensor(layer, TensorRole::kQNorm, "self_attn.q_norm.weight",
                             "attn_q_norm.weight", {c.head_dim}, true));
  out->push_back(LayerTensor(layer, TensorRole::kKNorm, "self_attn.k_norm.weight",
                             "attn_k_norm.weight", {c.head_dim}, true));
}

void QkNorm(const ModelConfig& c, const LayerWeights& w, int64_t num_tokens, float* q, float* k) {
  const float eps = static_cast<float>(c.rms_norm_eps);
  // Each head's head_dim slice is one RMSNorm row.
  RmsNorm(q, w.q_norm, num_tokens * c.num_heads, c.head_dim, eps, q);
  RmsNorm(k, w.k_norm, num_tokens * c.num_kv_heads, c.head_dim, eps, k);
}

const ArchSpec& Qwen3Arch() {
  // transformers' Qwen3Config defaults head_dim to 128, not hidden/heads.
  static const ArchSpec spec = {
      Architecture::kQwen3,     "Qwen3ForCausalLM",           "qwen3",
      /*default_head_dim=*/128, /*gguf_rope_permuted=*/false, AddQkNorm, QkNorm};
  return spec;
}

}  // namespace kvfork
