// What differs between the supported architectures, one small file each
// (llama.cc, qwen3.cc); the shared decoder (decoder.cc) asks only this.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "model/model_config.h"

namespace kvfork {

struct LayerWeights;

// A tensor the checkpoint must hold, with the shape config.json implies.
struct ExpectedTensor {
  std::string name;
  std::vector<int64_t> shape;
  bool is_vector = false;  // a norm weight: used as f32
};

struct ArchSpec {
  const char* hf_name = "";  // "LlamaForCausalLM"
  // Appends the architecture's extra per-layer tensors (beyond the common
  // attention, MLP and two norms) for layer `layer` with name prefix
  // "model.layers.N.".
  void (*add_layer_tensors)(const ModelConfig& c, const std::string& prefix,
                            std::vector<ExpectedTensor>* out) = nullptr;
  // Runs between the QKV projections and RoPE, in place on
  // q [tokens, num_heads, head_dim] and k [tokens, num_kv_heads, head_dim];
  // nullptr when the architecture has nothing there. Must be per-row.
  void (*after_qkv)(const ModelConfig& c, const LayerWeights& w, int64_t num_tokens, float* q,
                    float* k) = nullptr;
};

const ArchSpec& LlamaArch();
const ArchSpec& Qwen3Arch();
const ArchSpec& ArchFor(Architecture arch);

}  // namespace kvfork
