// Which type each tensor of a model gets under a quantization mix (`kvfork
// quantize --type`): llama.cpp's llama-quantize recipe (src/llama-quant.cpp,
// llama_tensor_get_type without an importance matrix or overrides), for the
// mixes kvfork offers. docs/quantize.md states it as a table.
//
// In short: 1-D tensors and norms keep their type (f32); output.weight (and
// token_embd.weight when the embeddings are tied) get q6_k unless the mix is
// q8_0; the _M mixes give attn_v and ffn_down q6_k on the layers
// use_more_bits picks (the first and last eighth, and every third between);
// a row width the chosen block does not divide falls back (q4_k -> q5_0,
// q5_k -> q5_1, q6_k -> q8_0, then f16).
//
// llama.cpp counts attn_v / ffn_down tensors as it meets them, in layer
// order; with one of each per layer (every architecture kvfork writes) the
// count is the layer number in the tensor's name, which is what is used
// here, so the choice does not depend on the order tensors are visited.
// Stateless after construction; thread-compatible.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/status.h"
#include "model/gguf_writer.h"

namespace kvfork {

// llama.cpp's --type names; the value is llama_ftype (general.file_type).
enum class QuantizeMix : uint32_t {
  kQ4_0 = 2,
  kQ4_1 = 3,
  kQ8_0 = 7,
  kQ5_0 = 8,
  kQ5_1 = 9,
  kQ4_K_S = 14,
  kQ4_K_M = 15,
  kQ5_K_S = 16,
  kQ5_K_M = 17,
  kQ6_K = 18,
};

// "q4_k_m" (case-insensitive) -> the mix; the error lists the names.
StatusOr<QuantizeMix> ParseQuantizeMix(const std::string& name);
const char* QuantizeMixName(QuantizeMix mix);
// All mixes, in the order the usage text lists them.
const std::vector<QuantizeMix>& AllQuantizeMixes();

// What the recipe needs to know about the model besides each tensor.
struct QuantizeModelInfo {
  std::string arch;          // general.architecture: "llama", "qwen3", ...
  int64_t num_layers = 0;    // {arch}.block_count
  int64_t num_heads = 0;     // attention.head_count
  int64_t num_kv_heads = 0;  // attention.head_count_kv
  // output.weight is present, i.e. the embeddings are not tied (when tied,
  // token_embd.weight is also the output projection and is typed as one).
  bool has_output = false;
  // {arch}.expert_count (0: dense). llama-quant.cpp has Mixtral's rules for
  // exactly 8 experts: attn_v and attn_k in Q8_0, attn_output in Q5_K under
  // Q4_K_S / Q4_K_M.
  int64_t num_experts = 0;
};

class QuantizeRecipe {
 public:
  QuantizeRecipe(QuantizeMix mix, QuantizeModelInfo model);

  // The type tensor `name` of shape ne (ggml order, ne[0] = row width) is
  // written as, given that it is stored as `current` now.
  GgmlType TypeFor(const std::string& name, const std::vector<int64_t>& ne, GgmlType current) const;

  // The block type the mix uses for most weights (q4_k for q4_k_m).
  GgmlType default_type() const { return default_type_; }
  QuantizeMix mix() const { return mix_; }

 private:
  GgmlType MixType(const std::string& name, int64_t row_width) const;

  QuantizeMix mix_;
  QuantizeModelInfo model_;
  GgmlType default_type_;
  bool llama_70b_;  // llama.cpp's LLM_TYPE_70B: attn_v gets q5_k instead of q4_k
};

}  // namespace kvfork
