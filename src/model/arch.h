// What differs between the supported architectures, one small file each
// (llama.cc, qwen2.cc, qwen3.cc, smollm3.cc, phi3.cc, mistral.cc, gemma3.cc,
// qwen3moe.cc),
// and the registry that finds them by the Hugging Face architecture name
// (config.json "architectures") or the GGUF general.architecture. The shared decoder (decoder.cc), the loader
// (weights.cc, model_config.cc, gguf_config.cc) and export-gguf ask only this.
//
// Adding an architecture: a file defining its ArchSpec, and a line in
// Architectures() (arch.cc).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "model/model_config.h"

namespace kvfork {

struct LayerWeights;

// Where a bound tensor goes in ModelWeights / LayerWeights.
enum class TensorRole {
  kEmbed,
  kLmHead,
  kFinalNorm,
  kInputNorm,
  kPostAttnNorm,
  kQ,
  kK,
  kV,
  kO,
  kQBias,
  kKBias,
  kVBias,
  kQNorm,
  kKNorm,
  kAttnOutNorm,  // Gemma's post_attention_layernorm: on the attention output
  kFfnOutNorm,   // Gemma's post_feedforward_layernorm: on the MLP output
  kGate,
  kUp,
  kDown,
  // Fused (Phi3): [q + 2 * kv, hidden] split into kQ/kK/kV row ranges, and
  // [2 * intermediate, hidden] into gate (first half) and up, at bind (views,
  // no copy).
  kQkv,
  kGateUp,
  // Mixture of experts (Qwen3 MoE): the router [num_experts, hidden] and
  // one expert's gate / up [moe_intermediate, hidden] and down
  // [hidden, moe_intermediate] (ExpectedTensor::expert says which).
  kRouter,
  kExpertGate,
  kExpertUp,
  kExpertDown,
};

// A tensor the checkpoint must hold, under both names, with the shape the
// config implies (row-major).
struct ExpectedTensor {
  std::string name;  // Hugging Face: "model.layers.0.self_attn.q_proj.weight"
  std::vector<int64_t> shape;
  bool is_vector = false;  // a norm weight or a bias: used as f32
  std::string gguf_name;   // llama.cpp: "blk.0.attn_q.weight"
  TensorRole role = TensorRole::kEmbed;
  int64_t layer = -1;  // -1 for the model-wide tensors
  // > 0: in GGUF the rows of this [heads * head_dim, cols] matrix are in
  // llama.cpp's interleaved RoPE order for this many heads (its converter's
  // LlamaModel.permute); the loader un-permutes, export-gguf permutes.
  int64_t gguf_rope_heads = 0;
  // An expert's projection. Hugging Face stores one tensor per expert
  // ("model.layers.N.mlp.experts.E.gate_proj.weight", `shape`), llama.cpp's
  // converter stacks a layer's num_experts of them into one GGUF tensor
  // ("blk.N.ffn_gate_exps.weight", [num_experts] + shape, expert E's rows
  // at E * shape[0]). expert >= 0: this entry is that slice.
  int64_t expert = -1;
  int64_t num_experts = 0;

  const std::string& NameFor(bool gguf) const { return gguf ? gguf_name : name; }
  // The shape of the tensor named NameFor(gguf): the stacked one for an
  // expert in GGUF.
  std::vector<int64_t> ShapeFor(bool gguf) const {
    if (!gguf || expert < 0) return shape;
    std::vector<int64_t> s = {num_experts};
    s.insert(s.end(), shape.begin(), shape.end());
    return s;
  }
};

// One per-layer tensor (name suffixes after "model.layers.N." / "blk.N.").
ExpectedTensor LayerTensor(int64_t layer, TensorRole role, const char* hf_suffix,
                           const char* gguf_suffix, std::vector<int64_t> shape,
                           bool is_vector = false);

struct ArchSpec {
  Architecture id = Architecture::kLlama;
  const char* hf_name = "";    // "LlamaForCausalLM"
  const char* gguf_name = "";  // "llama": general.architecture, and config.json model_type
  // head_dim when config.json has none: 0 = hidden_size / num_attention_heads.
  int64_t default_head_dim = 0;
  // GGUF stores Q and K rows permuted for interleaved RoPE (llama only).
  bool gguf_rope_permuted = false;
  // Appends the architecture's extra per-layer tensors (beyond the common
  // attention, MLP and two norms) for layer `layer`.
  void (*add_layer_tensors)(const ModelConfig& c, int64_t layer,
                            std::vector<ExpectedTensor>* out) = nullptr;
  // Runs between the QKV projections (bias added) and RoPE, in place on
  // q [tokens, num_heads, head_dim] and k [tokens, num_kv_heads, head_dim];
  // nullptr when the architecture has nothing there. Must be per-row.
  void (*after_qkv)(const ModelConfig& c, const LayerWeights& w, int64_t num_tokens, float* q,
                    float* k) = nullptr;
  // The checkpoint holds fused qkv and gate_up projections (kQkv, kGateUp)
  // instead of q/k/v and gate/up (Phi3).
  bool fused_projections = false;
  // config.json "model_type" where it is not gguf_name (Mistral's GGUF arch
  // is "llama", its model_type "mistral"); nullptr: gguf_name.
  const char* model_type = nullptr;
  // The architecture reads config.json "sliding_window" (null = none).
  bool has_sliding_window = false;
  // Gemma: norms on the attention and MLP outputs too (kAttnOutNorm,
  // kFfnOutNorm), and the pre-MLP norm is "pre_feedforward_layernorm".
  bool sandwich_norms = false;
  // Added to every norm weight of a Hugging Face checkpoint at load (Gemma's
  // (1 + w) RMSNorm: 1); llama.cpp's converter bakes it into the GGUF, so
  // export-gguf adds it and GGUF weights are used as they are.
  float hf_norm_offset = 0.0f;
  // Gemma: the embedding rows are multiplied by sqrt(hidden_size) (in f32).
  bool scale_embeddings = false;
  // Appends a mixture-of-experts layer's MLP tensors (router and experts),
  // which replace gate/up/down where ModelConfig::LayerIsMoe (Qwen3 MoE);
  // nullptr: the architecture has no experts.
  void (*add_moe_tensors)(const ModelConfig& c, int64_t layer,
                          std::vector<ExpectedTensor>* out) = nullptr;

  const char* ModelType() const { return model_type != nullptr ? model_type : gguf_name; }
};

// Row permutation LlamaModel.permute applies to a [n_head * head_dim, cols]
// Q or K weight: GGUF row h*head_dim + 2*i + j = HF row h*head_dim + j*head_dim/2 + i.
// Returns, for each output row, its source row.
std::vector<int64_t> LlamaRopePermutation(int64_t n_head, int64_t head_dim);

const ArchSpec& LlamaArch();
const ArchSpec& Qwen2Arch();
const ArchSpec& Qwen3Arch();
const ArchSpec& SmolLM3Arch();
const ArchSpec& Phi3Arch();

// llama.cpp's smollm3 applies no RoPE in layer il when (il + 1) % 4 == 0
// (n_no_rope_layer_step, not stored in the GGUF); this is that pattern.
constexpr int64_t kSmolLM3GgufNoRopeStep = 4;
std::vector<bool> SmolLM3GgufRopeLayers(int64_t num_layers);
const ArchSpec& MistralArch();
const ArchSpec& Gemma3Arch();
const ArchSpec& Qwen3MoeArch();

// Qwen3's per-head RMSNorm of q and k (qwen3.cc), shared by Gemma 3: the two
// [head_dim] tensors, and the norm as an ArchSpec::after_qkv.
void AddQkNorm(const ModelConfig& c, int64_t layer, std::vector<ExpectedTensor>* out);
void QkNorm(const ModelConfig& c, const LayerWeights& w, int64_t num_tokens, float* q, float* k);

// Every supported architecture, in a stable order.
const std::vector<const ArchSpec*>& Architectures();
const ArchSpec& ArchFor(Architecture arch);
// nullptr when unknown. Where architectures share a GGUF name (Mistral's
// files are "llama"), the first registered one is the GGUF's.
const ArchSpec* ArchForHfName(const std::string& hf_name);
const ArchSpec* ArchForGgufName(const std::string& gguf_name);
// By config.json "model_type" (ArchSpec::ModelType()).
const ArchSpec* ArchForModelType(const std::string& model_type);
// "LlamaForCausalLM, Qwen2ForCausalLM, ..." (or the GGUF names) for messages.
std::string SupportedArchNames(bool gguf);

}  // namespace kvfork
