// Qwen3MoeForCausalLM (Qwen3-30B-A3B, Qwen3-235B-A22B), GGUF "qwen3moe":
// Qwen3's attention (per-head q/k RMSNorm) and, in the layers
// decoder_sparse_step / mlp_only_layers pick, a mixture of experts in place
// of the MLP (model/moe.h runs it). Tensors of such a layer:
//   model.layers.N.mlp.gate.weight [experts, hidden]      blk.N.ffn_gate_inp.weight
//   model.layers.N.mlp.experts.E.gate_proj.weight [I, H]  blk.N.ffn_gate_exps.weight [E, I, H]
//   model.layers.N.mlp.experts.E.up_proj.weight [I, H]    blk.N.ffn_up_exps.weight [E, I, H]
//   model.layers.N.mlp.experts.E.down_proj.weight [H, I]  blk.N.ffn_down_exps.weight [E, H, I]
// (I = moe_intermediate_size; GGUF stacks the experts as llama.cpp's
// converter, Qwen2MoeModel.modify_tensors, does.) Parsed in model_config.cc
// (ParseQwen3Moe) and gguf_config.cc.
#include "model/arch.h"

namespace kvfork {
namespace {

void AddQwen3MoeTensors(const ModelConfig& c, int64_t layer, std::vector<ExpectedTensor>* out) {
  const int64_t h = c.hidden_size, f = c.moe_intermediate_size, e = c.num_experts;
  out->push_back(
      LayerTensor(layer, TensorRole::kRouter, "mlp.gate.weight", "ffn_gate_inp.weight", {e, h}));
  struct Part {
    TensorRole role;
    const char* hf;
    const char* gguf;
    std::vector<int64_t> shape;
  };
  const Part parts[] = {{TensorRole::kExpertGate, "gate_proj.weight", "ffn_gate_exps.weight", {f, h}},
                        {TensorRole::kExpertUp, "up_proj.weight", "ffn_up_exps.weight", {f, h}},
                        {TensorRole::kExpertDown, "down_proj.weight", "ffn_down_exps.weight", {h, f}}};
  for (const Part& p : parts)
    for (int64_t x = 0; x < e; ++x) {
      const std::string hf = "mlp.experts." + std::to_string(x) + "." + p.hf;
      ExpectedTensor t = LayerTensor(layer, p.role, hf.c_str(), p.gguf, p.shape);
      t.expert = x;
      t.num_experts = e;
      out->push_back(std::move(t));
    }
}

}  // namespace

const ArchSpec& Qwen3MoeArch() {
  // Qwen3MoeConfig's head_dim defaults to hidden_size / num_attention_heads
  // (Qwen3Config's to 128); the released configs state it.
  static const ArchSpec spec = {Architecture::kQwen3Moe,
                                "Qwen3MoeForCausalLM",
                                "qwen3moe",
                                /*default_head_dim=*/0,
                                /*gguf_rope_permuted=*/false,
                                AddQkNorm,
                                QkNorm,
                                /*fused_projections=*/false,
                                /*model_type=*/"qwen3_moe",
                                /*has_sliding_window=*/false,
                                /*sandwich_norms=*/false,
                                /*hf_norm_offset=*/0.0f,
                                /*scale_embeddings=*/false,
                                AddQwen3MoeTensors};
  return spec;
}

}  // namespace kvfork
