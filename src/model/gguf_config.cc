#include "model/gguf_config.h"

#include <cmath>
#include <cstring>
#include <limits>

#include "kernels/ops.h"
#include "model/arch.h"

namespace kvfork {
namespace {

// The {arch}.* keys of one file, each accessor naming the key on error.
class Keys {
 public:
  Keys(const GgufReader& r, std::string arch) : r_(r), arch_(std::move(arch)) {}

  std::string Name(const char* key) const { return arch_ + "." + key; }

  Status Error(const char* key, const std::string& what) const {
    return InvalidArgumentError(r_.path() + ": key " + Name(key) + " " + what);
  }

  // An integer in [min_value, INT32_MAX]: no real model's size is larger,
  // and keeping them there keeps the product of two inside int64.
  StatusOr<int64_t> Int(const char* key, bool required, int64_t default_value,
                        int64_t min_value) const {
    const std::string name = Name(key);
    if (r_.Find(name) == nullptr) {
      if (required) return NotFoundError(r_.path() + ": key " + name + " is missing");
      return default_value;
    }
    KVFORK_ASSIGN_OR_RETURN(uint64_t v, r_.GetUInt(name));
    if (v > static_cast<uint64_t>(std::numeric_limits<int32_t>::max()))
      return Error(key, "is " + std::to_string(v) + ", above 2147483647");
    if (static_cast<int64_t>(v) < min_value)
      return Error(key, "must be >= " + std::to_string(min_value) + ", got " + std::to_string(v));
    return static_cast<int64_t>(v);
  }

  StatusOr<double> Float(const char* key, bool required, double default_value) const {
    const std::string name = Name(key);
    if (r_.Find(name) == nullptr) {
      if (required) return NotFoundError(r_.path() + ": key " + name + " is missing");
      return default_value;
    }
    KVFORK_ASSIGN_OR_RETURN(float v, r_.GetF32(name));
    if (!std::isfinite(v)) return Error(key, "must be finite");
    return static_cast<double>(v);
  }

 private:
  const GgufReader& r_;
  std::string arch_;
};

// The optional tokenizer.ggml.*_token_id keys: ids checked against the vocab.
Status SpecialTokens(const GgufReader& r, ModelConfig* c) {
  auto id = [&](const char* key) -> StatusOr<int64_t> {
    if (r.Find(key) == nullptr) return int64_t{-1};
    KVFORK_ASSIGN_OR_RETURN(uint64_t v, r.GetUInt(key));
    if (v >= static_cast<uint64_t>(c->vocab_size))
      return InvalidArgumentError(r.path() + ": key " + key + " has token id " + std::to_string(v) +
                                  ", outside the vocabulary [0, " + std::to_string(c->vocab_size) +
                                  ")");
    return static_cast<int64_t>(v);
  };
  KVFORK_ASSIGN_OR_RETURN(int64_t bos, id("tokenizer.ggml.bos_token_id"));
  c->bos_token_id = static_cast<int32_t>(bos);
  // llama.cpp stops at every end-of-generation token: eos and eot.
  for (const char* key : {"tokenizer.ggml.eos_token_id", "tokenizer.ggml.eot_token_id"}) {
    KVFORK_ASSIGN_OR_RETURN(int64_t e, id(key));
    if (e >= 0 && (c->eos_token_ids.empty() || c->eos_token_ids[0] != e))
      c->eos_token_ids.push_back(static_cast<int32_t>(e));
  }
  return OkStatus();
}

// phi3's extra keys, as its converter writes them: the pretrained context
// (longrope's threshold), longrope's attention factor, and a sliding window
// (0 = none; llama.cpp ignores it, kvfork refuses one the context exceeds:
// windows are the sliding-window work's).
Status Phi3Keys(const GgufCheckpoint& gguf, const Keys& k, ModelConfig* c) {
  KVFORK_ASSIGN_OR_RETURN(
      c->rope_scaling.original_max_position_embeddings,
      k.Int("rope.scaling.original_context_length", false, c->max_position_embeddings, 1));
  KVFORK_ASSIGN_OR_RETURN(c->rope_scaling.attention_factor,
                          k.Float("rope.scaling.attn_factor", false, 1.0));
  if (c->rope_scaling.attention_factor <= 0)
    return k.Error("rope.scaling.attn_factor", "must be > 0");
  KVFORK_ASSIGN_OR_RETURN(int64_t window, k.Int("attention.sliding_window", false, 0, 0));
  if (window > 0 && window < c->max_position_embeddings)
    return UnimplementedError(gguf.metadata().path() + ": key " +
                              k.Name("attention.sliding_window") + " = " + std::to_string(window) +
                              " (below context_length " +
                              std::to_string(c->max_position_embeddings) +
                              "): sliding-window attention is not supported");
  return OkStatus();
}

}  // namespace

StatusOr<ModelConfig> ModelConfigFromGguf(const GgufCheckpoint& gguf) {
  const GgufReader& r = gguf.metadata();
  const std::string& path = r.path();
  if (r.Find("general.architecture") == nullptr)
    return NotFoundError(path + ": key general.architecture is missing");
  KVFORK_ASSIGN_OR_RETURN(std::string arch_name, r.GetString("general.architecture"));
  const ArchSpec* arch = ArchForGgufName(arch_name);
  if (arch == nullptr)
    return UnimplementedError(path + ": key general.architecture is \"" + arch_name +
                              "\", which is not supported (" + SupportedArchNames(true) + ")");
  ModelConfig c;
  c.arch = arch->id;
  Keys k(r, arch_name);
  KVFORK_ASSIGN_OR_RETURN(c.max_position_embeddings, k.Int("context_length", true, 0, 1));
  KVFORK_ASSIGN_OR_RETURN(c.hidden_size, k.Int("embedding_length", true, 0, 1));
  KVFORK_ASSIGN_OR_RETURN(c.num_layers, k.Int("block_count", true, 0, 1));
  KVFORK_ASSIGN_OR_RETURN(c.intermediate_size, k.Int("feed_forward_length", true, 0, 1));
  KVFORK_ASSIGN_OR_RETURN(c.num_heads, k.Int("attention.head_count", true, 0, 1));
  KVFORK_ASSIGN_OR_RETURN(c.num_kv_heads, k.Int("attention.head_count_kv", false, c.num_heads, 1));
  if (c.num_heads % c.num_kv_heads != 0)
    return k.Error("attention.head_count_kv", "(" + std::to_string(c.num_kv_heads) +
                                                  ") must divide attention.head_count (" +
                                                  std::to_string(c.num_heads) + ")");
  if (r.Find(k.Name("attention.key_length")) != nullptr) {
    KVFORK_ASSIGN_OR_RETURN(c.head_dim, k.Int("attention.key_length", true, 0, 2));
  } else {
    if (c.hidden_size % c.num_heads != 0)
      return k.Error("embedding_length",
                     "must be a multiple of attention.head_count when attention.key_length is "
                     "absent");
    c.head_dim = c.hidden_size / c.num_heads;
  }
  KVFORK_ASSIGN_OR_RETURN(int64_t value_length,
                          k.Int("attention.value_length", false, c.head_dim, 1));
  if (value_length != c.head_dim)
    return k.Error("attention.value_length", "(" + std::to_string(value_length) +
                                                 ") must equal attention.key_length (" +
                                                 std::to_string(c.head_dim) + ")");
  KVFORK_ASSIGN_OR_RETURN(c.rotary_dim, k.Int("rope.dimension_count", false, c.head_dim, 1));
  // Partial rotary (phi3's Phi-4-mini) rotates the leading dims NeoX-style;
  // llama's interleaved (permuted) layout has no partial form here.
  if (c.rotary_dim > c.head_dim || c.rotary_dim % 2 != 0 ||
      (c.rotary_dim != c.head_dim && arch->gguf_rope_permuted))
    return UnimplementedError(path + ": key " + k.Name("rope.dimension_count") + " is " +
                              std::to_string(c.rotary_dim) + ": rotary dims other than head_dim " +
                              std::to_string(c.head_dim) +
                              " are supported only even, smaller, and for NeoX-RoPE architectures");
  if (c.head_dim % 2 != 0)
    return k.Error("attention.key_length", "must be even for rotary embeddings");
  if (c.head_dim > kMaxAttentionHeadDim)
    return k.Error("attention.key_length", "(head_dim) is " + std::to_string(c.head_dim) +
                                               ", above the attention kernels' limit of " +
                                               std::to_string(kMaxAttentionHeadDim));
  if (c.num_heads / c.num_kv_heads > kMaxAttentionGroup)
    return k.Error("attention.head_count_kv",
                   "(" + std::to_string(c.num_kv_heads) + ") gives " +
                       std::to_string(c.num_heads / c.num_kv_heads) +
                       " query heads per KV head, above the attention kernels' limit of " +
                       std::to_string(kMaxAttentionGroup));
  KVFORK_ASSIGN_OR_RETURN(c.rms_norm_eps, k.Float("attention.layer_norm_rms_epsilon", true, 0));
  if (c.rms_norm_eps <= 0) return k.Error("attention.layer_norm_rms_epsilon", "must be > 0");
  KVFORK_ASSIGN_OR_RETURN(c.rope_theta, k.Float("rope.freq_base", false, 10000.0));
  if (c.rope_theta <= 1) return k.Error("rope.freq_base", "must be > 1");

  // Rope scaling: llama.cpp's converter writes llama3 scaling as a
  // rope_freqs tensor; the other kinds (linear, yarn, ...) are not supported.
  if (r.Find(k.Name("rope.scaling.type")) != nullptr) {
    KVFORK_ASSIGN_OR_RETURN(std::string type, r.GetString(k.Name("rope.scaling.type")));
    if (type != "none")
      return UnimplementedError(path + ": key " + k.Name("rope.scaling.type") + " is \"" + type +
                                "\", which is not supported (none, or llama3 as rope_freqs)");
  }
  const int64_t half = c.rotary_dim / 2;
  // One f32 [rotary_dim / 2] tensor of positive finite factors.
  auto factors = [&](const char* name, std::vector<float>* out) -> Status {
    const TensorInfo* f = gguf.Find(name);
    if (f->dtype != DType::kF32 || f->shape != std::vector<int64_t>{half})
      return InvalidArgumentError(f->file + ": tensor \"" + name + "\" is " + DTypeName(f->dtype) +
                                  " " + f->ShapeString() + ", expected f32 [" +
                                  std::to_string(half) + "]");
    out->resize(half);
    std::memcpy(out->data(), f->data, f->num_bytes);
    for (float x : *out)
      if (!(x > 0) || !std::isfinite(x))
        return InvalidArgumentError(f->file + ": tensor \"" + name + "\" has factor " +
                                    std::to_string(x) + "; every factor must be finite and > 0");
    return OkStatus();
  };
  if (gguf.Find("rope_freqs.weight") != nullptr) {
    c.rope_scaling.type = RopeScaling::Type::kFreqFactors;
    KVFORK_RETURN_IF_ERROR(factors("rope_freqs.weight", &c.rope_scaling.freq_factors));
  }
  if (c.arch == Architecture::kPhi3) KVFORK_RETURN_IF_ERROR(Phi3Keys(gguf, k, &c));
  const bool has_short = gguf.Find("rope_factors_short.weight") != nullptr;
  const bool has_long = gguf.Find("rope_factors_long.weight") != nullptr;
  if (has_short || has_long) {
    if (c.arch != Architecture::kPhi3 || !has_short || !has_long ||
        c.rope_scaling.type != RopeScaling::Type::kNone)
      return InvalidArgumentError(path +
                                  ": tensors rope_factors_short.weight and "
                                  "rope_factors_long.weight come as a pair, in phi3 only, "
                                  "without rope_freqs.weight");
    c.rope_scaling.type = RopeScaling::Type::kLongRope;
    KVFORK_RETURN_IF_ERROR(factors("rope_factors_short.weight", &c.rope_scaling.short_factor));
    KVFORK_RETURN_IF_ERROR(factors("rope_factors_long.weight", &c.rope_scaling.long_factor));
  }
  if (c.arch == Architecture::kSmolLM3) c.layer_uses_rope = SmolLM3GgufRopeLayers(c.num_layers);
  if (c.arch == Architecture::kQwen3Moe) {
    // What llama.cpp's qwen3moe loader reads: every layer a mixture of
    // expert_count experts of expert_feed_forward_length, expert_used_count
    // per token, the chosen weights always renormalized (build_moe_ffn's
    // norm_w is true for qwen3moe; Qwen3-30B-A3B's norm_topk_prob).
    KVFORK_ASSIGN_OR_RETURN(c.num_experts, k.Int("expert_count", true, 0, 1));
    KVFORK_ASSIGN_OR_RETURN(c.num_experts_per_tok, k.Int("expert_used_count", true, 0, 1));
    KVFORK_ASSIGN_OR_RETURN(c.moe_intermediate_size,
                            k.Int("expert_feed_forward_length", true, 0, 1));
    if (c.num_experts > 4096) return k.Error("expert_count", "is above 4096");
    if (c.num_experts_per_tok > c.num_experts || c.num_experts_per_tok > kMaxExpertsPerToken)
      return k.Error("expert_used_count", "(" + std::to_string(c.num_experts_per_tok) +
                                              ") must not exceed expert_count (" +
                                              std::to_string(c.num_experts) + ") or " +
                                              std::to_string(kMaxExpertsPerToken));
    c.norm_topk_prob = true;
  }

  if (c.arch == Architecture::kGemma3) {
    // What llama.cpp's gemma3 loader reads (src/models/gemma3.cpp): the
    // window and its pattern (default: every 6th layer global), the
    // sliding layers' RoPE base (default 10000), the final softcap; GELU;
    // scores scaled by head_dim^-0.5 (the GGUF has no
    // query_pre_attn_scalar); norm weights with the +1 already in.
    KVFORK_ASSIGN_OR_RETURN(c.sliding_window, k.Int("attention.sliding_window", false, 0, 0));
    KVFORK_ASSIGN_OR_RETURN(int64_t pattern,
                            k.Int("attention.sliding_window_pattern", false, 6, 1));
    if (c.sliding_window > 0) {
      c.sliding_layers.assign(c.num_layers, false);
      for (int64_t l = 0; l < c.num_layers; ++l) c.sliding_layers[l] = l % pattern < pattern - 1;
    }
    KVFORK_ASSIGN_OR_RETURN(c.rope_local_theta, k.Float("rope.freq_base_swa", false, 10000.0));
    if (c.rope_local_theta <= 1) return k.Error("rope.freq_base_swa", "must be > 1");
    KVFORK_ASSIGN_OR_RETURN(c.final_logit_softcapping,
                            k.Float("final_logit_softcapping", false, 0.0));
    if (c.final_logit_softcapping < 0) return k.Error("final_logit_softcapping", "must be >= 0");
    c.hidden_act = Activation::kGeluTanh;
    c.query_pre_attn_scalar = static_cast<double>(c.head_dim);
  }

  const TensorInfo* embd = gguf.Find("token_embd.weight");
  if (embd == nullptr)
    return NotFoundError(path +
                         ": tensor \"token_embd.weight\" is missing (it gives the vocab size)");
  if (embd->shape.size() != 2)
    return InvalidArgumentError(embd->file + ": tensor \"token_embd.weight\" has shape " +
                                embd->ShapeString() + ", expected [vocab, " +
                                std::to_string(c.hidden_size) + "]");
  c.vocab_size = embd->shape[0];
  if (c.vocab_size > std::numeric_limits<int32_t>::max())
    return InvalidArgumentError(embd->file + ": tensor \"token_embd.weight\" has " +
                                std::to_string(c.vocab_size) + " rows, above 2147483647");
  KVFORK_ASSIGN_OR_RETURN(int64_t vocab_key, k.Int("vocab_size", false, c.vocab_size, 1));
  if (vocab_key != c.vocab_size)
    return k.Error("vocab_size", "is " + std::to_string(vocab_key) + " but token_embd.weight has " +
                                     std::to_string(c.vocab_size) + " rows");
  c.tie_word_embeddings = gguf.Find("output.weight") == nullptr;
  KVFORK_RETURN_IF_ERROR(SpecialTokens(r, &c));
  c.torch_dtype = DTypeName(embd->dtype);
  return c;
}

}  // namespace kvfork
