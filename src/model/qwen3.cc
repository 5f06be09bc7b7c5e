// Qwen3ForCausalLM: Llama's decoder plus a per-head RMSNorm of q and k
// (self_attn.q_norm / k_norm, weight [head_dim]) before RoPE, and an
// explicit head_dim that need not be hidden_size / num_heads.
#include "kernels/ops.h"
#include "model/arch.h"
#include "model/weights.h"

namespace kvfork {
namespace {

void AddQkNorm(const ModelConfig& c, const std::string& prefix, std::vector<ExpectedTensor>* out) {
  out->push_back({prefix + "self_attn.q_norm.weight", {c.head_dim}, true});
  out->push_back({prefix + "self_attn.k_norm.weight", {c.head_dim}, true});
}

void QkNorm(const ModelConfig& c, const LayerWeights& w, int64_t num_tokens, float* q, float* k) {
  const float eps = static_cast<float>(c.rms_norm_eps);
  // Each head's head_dim slice is one RMSNorm row.
  RmsNorm(q, w.q_norm, num_tokens * c.num_heads, c.head_dim, eps, q);
  RmsNorm(k, w.k_norm, num_tokens * c.num_kv_heads, c.head_dim, eps, k);
}

}  // namespace

const ArchSpec& Qwen3Arch() {
  static const ArchSpec spec = {"Qwen3ForCausalLM", AddQkNorm, QkNorm};
  return spec;
}

}  // namespace kvfork
