// Gemma3ForCausalLM (text; Gemma 3 1B, and the text tower's shape of the
// larger ones), GGUF "gemma3". What differs from the shared decoder:
//   - four norms a layer ("sandwich"): input_layernorm before attention,
//     post_attention_layernorm on the attention output before the residual
//     add, pre_feedforward_layernorm before the MLP (the slot Llama's
//     post_attention_layernorm fills) and post_feedforward_layernorm on the
//     MLP output before its residual add;
//   - RMSNorm scaled by (1 + w): Hugging Face stores w and the loader adds 1
//     once (in f32, as Gemma3RMSNorm computes 1.0 + weight.float());
//     llama.cpp's converter bakes the +1 into the GGUF's norm weights, so
//     GGUF weights are used as they are and export-gguf adds it;
//   - per-head q/k RMSNorm before RoPE (Qwen3's, with Gemma's weights);
//   - GELU-tanh gate (hidden_activation "gelu_pytorch_tanh");
//   - embeddings scaled by sqrt(hidden_size) (in f32; transformers rounds
//     the scale to the weights' dtype first, so a bf16 model's HF run uses
//     34.0 for 1152 where kvfork and llama.cpp use 33.94);
//   - scores scaled by query_pre_attn_scalar^-0.5;
//   - sliding-window layers (layer_types / sliding_window_pattern: five of
//     six) with their own RoPE base rope_local_base_freq, the global ones
//     rope_theta;
//   - optional final logit softcapping.
// Parsed in model_config.cc (ParseGemma3), run by decoder.cc.
#include "model/arch.h"
#include "model/weights.h"

namespace kvfork {
namespace {

void AddGemma3Tensors(const ModelConfig& c, int64_t layer, std::vector<ExpectedTensor>* out) {
  AddQkNorm(c, layer, out);  // Qwen3's per-head q/k norms
  out->push_back(LayerTensor(layer, TensorRole::kAttnOutNorm, "post_attention_layernorm.weight",
                             "post_attention_norm.weight", {c.hidden_size}, true));
  out->push_back(LayerTensor(layer, TensorRole::kFfnOutNorm, "post_feedforward_layernorm.weight",
                             "post_ffw_norm.weight", {c.hidden_size}, true));
}

}  // namespace

const ArchSpec& Gemma3Arch() {
  static const ArchSpec spec = {Architecture::kGemma3,
                                "Gemma3ForCausalLM",
                                "gemma3",
                                /*default_head_dim=*/256,
                                /*gguf_rope_permuted=*/false,
                                AddGemma3Tensors,
                                QkNorm,
                                /*fused_projections=*/false,
                                /*model_type=*/"gemma3_text",
                                /*has_sliding_window=*/true,
                                /*sandwich_norms=*/true,
                                /*hf_norm_offset=*/1.0f,
                                /*scale_embeddings=*/true};
  return spec;
}

}  // namespace kvfork
