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
  std::vector<float> inv_freq = c->RopeInvFreq();
  KVFORK_CHECK(static_cast<int64_t>(inv_freq.size()) == c->head_dim / 2);
}

}  // namespace kvfork::fuzz
