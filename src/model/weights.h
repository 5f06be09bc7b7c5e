// A tensor source's tensors bound to a config: every expected tensor present
// (by its Hugging Face or GGUF name, as the source's naming says) with the
// shape the config implies, no extra ones, in a compute dtype.
//
// Ownership: ModelWeights owns the source (its mmaps) and any tensor it had
// to convert (f16 -> bf16/f32, norm weights -> f32, misaligned data, llama
// Q/K rows un-permuted from GGUF); every view points into one of those and
// lives as long as ModelWeights. Block-quantized matrices (q8_0, q4_k, ...)
// are bound in place as MatrixView{dtype, data} of their ggml blocks.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/status.h"
#include "kernels/ops.h"
#include "model/arch.h"
#include "model/model.h"
#include "model/model_config.h"
#include "model/tensor_source.h"

namespace kvfork {

struct LayerWeights {
  MatrixView q_proj;                      // [num_heads * head_dim, hidden]
  MatrixView k_proj;                      // [num_kv_heads * head_dim, hidden]
  MatrixView v_proj;                      // [num_kv_heads * head_dim, hidden]
  MatrixView o_proj;                      // [hidden, num_heads * head_dim]
  MatrixView gate_proj;                   // [intermediate, hidden]
  MatrixView up_proj;                     // [intermediate, hidden]
  MatrixView down_proj;                   // [hidden, intermediate]
  const float* input_norm = nullptr;      // [hidden]
  const float* post_attn_norm = nullptr;  // [hidden]
  const float* attn_out_norm = nullptr;   // [hidden], Gemma 3 only
  const float* ffn_out_norm = nullptr;    // [hidden], Gemma 3 only
  const float* q_norm = nullptr;          // [head_dim], Qwen3 and Gemma 3
  const float* k_norm = nullptr;          // [head_dim], Qwen3 only
  const float* q_bias = nullptr;          // [num_heads * head_dim], Qwen2 only
  const float* k_bias = nullptr;          // [num_kv_heads * head_dim], Qwen2 only
  const float* v_bias = nullptr;          // [num_kv_heads * head_dim], Qwen2 only
  // A mixture-of-experts layer (ModelConfig::LayerIsMoe) has these instead
  // of gate/up/down_proj: the router and, per expert, its SwiGLU MLP (views
  // into the stacked GGUF tensor, or the per-expert safetensors).
  MatrixView router;                      // [num_experts, hidden]
  std::vector<MatrixView> expert_gate;    // [num_experts] x [moe_intermediate, hidden]
  std::vector<MatrixView> expert_up;      // [num_experts] x [moe_intermediate, hidden]
  std::vector<MatrixView> expert_down;    // [num_experts] x [hidden, moe_intermediate]
};

struct ModelWeights {
  MatrixView embed_tokens;            // [vocab, hidden]
  MatrixView lm_head;                 // [vocab, hidden]; embed_tokens when tied
  const float* final_norm = nullptr;  // [hidden]
  std::vector<LayerWeights> layers;
  // Bytes of weights one decode step reads (every matrix once at its
  // row_bytes, the embedding row aside; of the experts, only the
  // num_experts_per_tok / num_experts share one token uses): the numerator
  // of the bandwidth limit.
  size_t decode_bytes_per_token = 0;
  int64_t num_params = 0;

  std::unique_ptr<TensorSource> source;
  std::vector<std::vector<uint8_t>> owned;  // converted copies
};

// The tensors an architecture expects for a config, in a stable order.
std::vector<ExpectedTensor> ExpectedTensors(const ModelConfig& c, const ArchSpec& arch);

// Validates and binds; errors name the tensor, the expected and actual shape.
StatusOr<std::unique_ptr<ModelWeights>> BindWeights(const ModelConfig& c, const ArchSpec& arch,
                                                    std::unique_ptr<TensorSource> source,
                                                    const ModelLoadOptions& options);

// Tensors a GGUF holds beside the weights, which the loader reads into the
// config instead of binding (llama3 scaling's rope_freqs, longrope's
// rope_factors_short / rope_factors_long).
bool IsGgufConfigTensor(const std::string& name);

// A norm weight (final, per layer or per head), not a bias.
bool IsNormRole(TensorRole role);

}  // namespace kvfork
