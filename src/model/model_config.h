// config.json of a Hugging Face causal LM, the fields kvfork uses.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/status.h"

namespace kvfork {

// LlamaForCausalLM, Qwen3ForCausalLM, Qwen2ForCausalLM, SmolLM3ForCausalLM,
// Phi3ForCausalLM, MistralForCausalLM, Gemma3ForCausalLM, Qwen3MoeForCausalLM;
// arch.h has the rest.
enum class Architecture { kLlama, kQwen3, kQwen2, kSmolLM3, kPhi3, kMistral, kGemma3, kQwen3Moe };

// The MLP's gate activation: silu (Llama's SwiGLU) or the tanh
// approximation of GELU (Gemma's "gelu_pytorch_tanh").
enum class Activation { kSilu, kGeluTanh };

struct RopeScaling {
  // kFreqFactors: a GGUF's rope_freqs tensor, one divisor per frequency pair
  // (how llama.cpp's converter stores llama3 scaling).
  // kLongRope (Phi-3.5, Phi-4-mini): each pair's base frequency divided by
  // short_factor[i], or long_factor[i] when the context the model is loaded
  // for exceeds original_max_position_embeddings (as llama.cpp chooses), and
  // cos/sin multiplied by attention_factor.
  enum class Type { kNone, kLlama3, kFreqFactors, kLongRope };
  Type type = Type::kNone;
  std::vector<float> freq_factors;  // [rotary_dim / 2], kFreqFactors only
  std::vector<float> short_factor;  // [rotary_dim / 2], kLongRope only
  std::vector<float> long_factor;   // [rotary_dim / 2], kLongRope only
  bool use_long_factor = false;     // kLongRope: set by Model::Load from the context
  double attention_factor = 1.0;    // kLongRope: scales cos and sin
  double factor = 1.0;
  double low_freq_factor = 1.0;
  double high_freq_factor = 4.0;
  int64_t original_max_position_embeddings = 8192;
};

// The most experts one token may use (num_experts_per_tok): Qwen3 MoE
// uses 8; the router keeps its choice on the stack.
inline constexpr int64_t kMaxExpertsPerToken = 64;

struct ModelConfig {
  Architecture arch = Architecture::kQwen3;
  int64_t vocab_size = 0;
  int64_t hidden_size = 0;
  int64_t intermediate_size = 0;
  int64_t num_layers = 0;        // num_hidden_layers
  int64_t num_heads = 0;         // num_attention_heads
  int64_t num_kv_heads = 0;      // num_key_value_heads (defaults to num_heads)
  int64_t head_dim = 0;          // explicit (Qwen3) or hidden_size / num_heads
  // Leading dims of each head that RoPE rotates (Phi-4-mini's
  // partial_rotary_factor 0.75); the rest pass through. Even, <= head_dim.
  int64_t rotary_dim = 0;
  // Per layer: false where the layer applies no RoPE (SmolLM3's
  // no_rope_layers entries of 0). Empty: every layer applies it.
  std::vector<bool> layer_uses_rope;
  int64_t max_position_embeddings = 0;
  double rms_norm_eps = 1e-6;
  double rope_theta = 10000.0;
  RopeScaling rope_scaling;
  // Sliding-window attention (Mistral's sliding_window): 0 = none. Layers
  // whose sliding_layers entry is true attend to the last sliding_window
  // positions only (AttentionSeq::window); an empty sliding_layers with a
  // window means every layer.
  int64_t sliding_window = 0;
  std::vector<bool> sliding_layers;  // [num_layers] or empty
  // Gemma 3: RoPE base of the sliding layers (rope_local_base_freq; 0 = rope_theta).
  double rope_local_theta = 0;
  Activation hidden_act = Activation::kSilu;
  // Attention scores scale by query_pre_attn_scalar^-0.5 (Gemma 3); 0 = head_dim.
  double query_pre_attn_scalar = 0;
  // logits = cap * tanh(logits / cap) (Gemma's final_logit_softcapping); 0 = none.
  double final_logit_softcapping = 0;
  // Mixture of experts (Qwen3MoeForCausalLM; model/moe.h): 0 experts = a
  // dense model. A MoE layer's MLP is num_experts SwiGLU experts of
  // moe_intermediate_size, num_experts_per_tok of them per token, weighted
  // by the router's softmax (renormalized over the chosen ones when
  // norm_topk_prob); the other layers keep the dense MLP of intermediate_size.
  int64_t num_experts = 0;
  int64_t num_experts_per_tok = 0;
  int64_t moe_intermediate_size = 0;
  bool norm_topk_prob = false;
  // [num_layers]: true where the layer's MLP is the experts (from
  // decoder_sparse_step and mlp_only_layers); empty = every layer when
  // num_experts > 0.
  std::vector<bool> moe_layers;
  bool tie_word_embeddings = false;
  std::vector<int32_t> eos_token_ids;  // config.json eos_token_id (number or list)
  int32_t bos_token_id = -1;
  std::string torch_dtype;  // as written, for the log

  // Rotary inverse frequencies [rotary_dim / 2], with the scaling applied:
  // the one RoPE-frequency function (export-gguf derives rope_freqs from it).
  std::vector<float> RopeInvFreq() const;
  // The unscaled inverse frequency of pair i: rope_theta^(-2i / rotary_dim).
  double RopeBaseInvFreq(int64_t i) const;
  // rotary_dim, or head_dim where a hand-built config left it 0.
  int64_t RotaryDim() const { return rotary_dim > 0 ? rotary_dim : head_dim; }
  bool LayerUsesRope(int64_t layer) const {
    return layer_uses_rope.empty() || layer_uses_rope[static_cast<size_t>(layer)];
  }
  // The sliding layers' frequencies (rope_local_theta, no scaling), where
  // rope_local_theta is set; else RopeInvFreq().
  std::vector<float> RopeLocalInvFreq() const;
  bool LayerIsMoe(int64_t layer) const {
    if (num_experts <= 0) return false;
    return moe_layers.empty() || moe_layers[static_cast<size_t>(layer)];
  }
  // Layer `layer`'s attention window (AttentionSeq::window): 0 = global.
  int64_t LayerWindow(int64_t layer) const {
    if (sliding_window <= 0) return 0;
    if (sliding_layers.empty()) return sliding_window;
    return sliding_layers[layer] ? sliding_window : 0;
  }
};

// Parses and validates config.json; errors name the file and the field.
StatusOr<ModelConfig> LoadModelConfig(const std::string& path);
StatusOr<ModelConfig> ParseModelConfig(const std::string& json_text, const std::string& path);

}  // namespace kvfork
