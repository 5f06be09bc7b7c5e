#include <cmath>
#include <string>

#include "fuzz/fuzz_targets.h"
#include "model/model_config.h"

namespace kvfork::fuzz {

void FuzzModelConfig(std::string_view input) {
  StatusOr<ModelConfig> c = ParseModelConfig(std::string(input), "config.json");
  if (!c.ok()) {
    KVFORK_CHECK(!c.status().message().empty());
    return;
  }
  // What the model and the KV cache size their buffers from must be sane
  // once the config is accepted.
  KVFORK_CHECK(c->vocab_size > 0 && c->hidden_size > 0 && c->intermediate_size > 0);
  KVFORK_CHECK(c->num_layers > 0 && c->num_heads > 0 && c->num_kv_heads > 0 && c->head_dim > 0);
  KVFORK_CHECK(c->num_heads % c->num_kv_heads == 0);
  KVFORK_CHECK(c->max_position_embeddings > 0);
  // RoPE rotates the first RotaryDim() dims of a head (all but Phi3's
  // partial_rotary_factor): one frequency per pair, for both RoPE bases.
  const int64_t rotary = c->RotaryDim();
  KVFORK_CHECK(rotary >= 2 && rotary % 2 == 0 && rotary <= c->head_dim);
  KVFORK_CHECK(static_cast<int64_t>(c->RopeInvFreq().size()) == rotary / 2);
  KVFORK_CHECK(static_cast<int64_t>(c->RopeLocalInvFreq().size()) == rotary / 2);
  KVFORK_CHECK(c->layer_uses_rope.empty() ||
               static_cast<int64_t>(c->layer_uses_rope.size()) == c->num_layers);
  KVFORK_CHECK(c->sliding_layers.empty() ||
               static_cast<int64_t>(c->sliding_layers.size()) == c->num_layers);
  for (int64_t l = 0; l < c->num_layers; ++l) KVFORK_CHECK(c->LayerWindow(l) >= 0);
  // Mixture of experts: what the router's stack buffer and the experts'
  // scratch are sized from.
  KVFORK_CHECK(c->moe_layers.empty() ||
               static_cast<int64_t>(c->moe_layers.size()) == c->num_layers);
  if (c->num_experts > 0)
    KVFORK_CHECK(c->num_experts_per_tok >= 1 && c->num_experts_per_tok <= c->num_experts &&
                 c->num_experts_per_tok <= kMaxExpertsPerToken && c->moe_intermediate_size > 0);
}

}  // namespace kvfork::fuzz
