// Qwen2ForCausalLM (Qwen2, Qwen2.5), GGUF "qwen2": Llama's decoder with a
// bias on the q, k and v projections (always present: transformers' Qwen2
// attention has bias=True for them and none on o_proj), NeoX RoPE (stored
// unpermuted in GGUF) and head_dim = hidden_size / num_heads.
#include "model/arch.h"

namespace kvfork {
namespace {

void AddQkvBias(const ModelConfig& c, int64_t layer, std::vector<ExpectedTensor>* out) {
  const int64_t q = c.num_heads * c.head_dim, kv = c.num_kv_heads * c.head_dim;
  out->push_back(
      LayerTensor(layer, TensorRole::kQBias, "self_attn.q_proj.bias", "attn_q.bias", {q}, true));
  out->push_back(
      LayerTensor(layer, TensorRole::kKBias, "self_attn.k_proj.bias", "attn_k.bias", {kv}, true));
  out->push_back(
      LayerTensor(layer, TensorRole::kVBias, "self_attn.v_proj.bias", "attn_v.bias", {kv}, true));
}

}  // namespace

const ArchSpec& Qwen2Arch() {
  static const ArchSpec spec = {
      Architecture::kQwen2,   "Qwen2ForCausalLM",           "qwen2",
      /*default_head_dim=*/0, /*gguf_rope_permuted=*/false, AddQkvBias, nullptr};
  return spec;
}

}  // namespace kvfork
