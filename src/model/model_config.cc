// config.json parsing and validation, and the rotary frequencies.
#include "model/model_config.h"

#include <cmath>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>
#include <sstream>

#include "kernels/ops.h"
#include "model/arch.h"

namespace kvfork {
namespace {

using nlohmann::json;

// Every accessor names the file and the field on error; no json exception
// escapes (we check types before every get<>).
class Fields {
 public:
  Fields(const json& obj, const std::string& path, std::string prefix = "")
      : obj_(obj), path_(path), prefix_(std::move(prefix)) {}

  bool Has(const char* name) const { return obj_.contains(name) && !obj_.at(name).is_null(); }

  Status Error(const char* name, const std::string& what) const {
    return InvalidArgumentError(path_ + ": field \"" + prefix_ + name + "\" " + what);
  }

  StatusOr<int64_t> Int(const char* name, bool required, int64_t default_value,
                        int64_t min_value) const {
    if (!Has(name)) {
      if (required) return Error(name, "is missing");
      return default_value;
    }
    const json& v = obj_.at(name);
    if (!v.is_number_integer()) return Error(name, "must be an integer, got " + v.dump());
    int64_t x = v.get<int64_t>();
    if (x < min_value)
      return Error(name, "must be >= " + std::to_string(min_value) + ", got " + std::to_string(x));
    return x;
  }

  StatusOr<double> Double(const char* name, bool required, double default_value) const {
    if (!Has(name)) {
      if (required) return Error(name, "is missing");
      return default_value;
    }
    const json& v = obj_.at(name);
    if (!v.is_number()) return Error(name, "must be a number, got " + v.dump());
    double x = v.get<double>();
    if (!std::isfinite(x)) return Error(name, "must be finite");
    return x;
  }

  StatusOr<bool> Bool(const char* name, bool default_value) const {
    if (!Has(name)) return default_value;
    const json& v = obj_.at(name);
    if (!v.is_boolean()) return Error(name, "must be true or false, got " + v.dump());
    return v.get<bool>();
  }

  StatusOr<std::string> String(const char* name, bool required) const {
    if (!Has(name)) {
      if (required) return Error(name, "is missing");
      return std::string();
    }
    const json& v = obj_.at(name);
    if (!v.is_string()) return Error(name, "must be a string, got " + v.dump());
    return v.get<std::string>();
  }

 private:
  const json& obj_;
  const std::string& path_;
  std::string prefix_;
};

// A list of rotary_dim / 2 positive finite factors (longrope's
// short_factor / long_factor).
Status FactorList(const json& rs, const Fields& f, const char* name, int64_t count,
                  std::vector<float>* out) {
  if (!f.Has(name)) return f.Error(name, "is missing");
  const json& v = rs.at(name);
  if (!v.is_array() || static_cast<int64_t>(v.size()) != count)
    return f.Error(name,
                   "must be a list of " + std::to_string(count) + " numbers (rotary dims / 2)");
  for (const json& x : v) {
    if (!x.is_number() || !std::isfinite(x.get<double>()) || x.get<double>() <= 0)
      return f.Error(name, "must hold finite numbers > 0, got " + x.dump());
    out->push_back(static_cast<float>(x.get<double>()));
  }
  return OkStatus();
}

// longrope (Phi-3.5, Phi-4-mini), as transformers'
// _compute_longrope_parameters: the factor is max_position_embeddings /
// original_max_position_embeddings, and without an explicit
// attention_factor, sqrt(1 + ln(factor) / ln(original)) when factor > 1.
Status ParseLongRope(const json& rs, const Fields& f, ModelConfig* c) {
  RopeScaling& s = c->rope_scaling;
  s.type = RopeScaling::Type::kLongRope;
  if (f.Has("original_max_position_embeddings")) {
    KVFORK_ASSIGN_OR_RETURN(s.original_max_position_embeddings,
                            f.Int("original_max_position_embeddings", true, 0, 1));
  }
  const int64_t half = c->RotaryDim() / 2;
  KVFORK_RETURN_IF_ERROR(FactorList(rs, f, "short_factor", half, &s.short_factor));
  KVFORK_RETURN_IF_ERROR(FactorList(rs, f, "long_factor", half, &s.long_factor));
  const double factor = static_cast<double>(c->max_position_embeddings) /
                        static_cast<double>(s.original_max_position_embeddings);
  s.factor = factor;
  if (f.Has("attention_factor")) {
    KVFORK_ASSIGN_OR_RETURN(s.attention_factor, f.Double("attention_factor", true, 1.0));
    if (s.attention_factor <= 0) return f.Error("attention_factor", "must be > 0");
  } else {
    s.attention_factor =
        factor <= 1.0
            ? 1.0
            : std::sqrt(1 + std::log(factor) /
                                std::log(static_cast<double>(s.original_max_position_embeddings)));
  }
  return OkStatus();
}

Status ParseRopeScaling(const json& root, const std::string& path, ModelConfig* c) {
  if (!root.contains("rope_scaling") || root.at("rope_scaling").is_null()) return OkStatus();
  const json& rs = root.at("rope_scaling");
  if (!rs.is_object())
    return InvalidArgumentError(path + ": field \"rope_scaling\" must be an object or null");
  Fields f(rs, path, "rope_scaling.");
  // transformers accepts both "rope_type" (current) and "type" (older files).
  std::string type;
  if (f.Has("rope_type")) {
    KVFORK_ASSIGN_OR_RETURN(type, f.String("rope_type", true));
  } else {
    KVFORK_ASSIGN_OR_RETURN(type, f.String("type", false));
  }
  if (type == "default" || type.empty()) return OkStatus();
  // "su" is longrope's older name (Phi-3 configs of 2024).
  if ((type == "longrope" || type == "su") && c->arch == Architecture::kPhi3)
    return ParseLongRope(rs, f, c);
  if (type != "llama3")
    return UnimplementedError(path + ": rope_scaling type \"" + type +
                              "\" is not supported (llama3; longrope for Phi3ForCausalLM)");
  RopeScaling& s = c->rope_scaling;
  s.type = RopeScaling::Type::kLlama3;
  KVFORK_ASSIGN_OR_RETURN(s.factor, f.Double("factor", true, 0));
  KVFORK_ASSIGN_OR_RETURN(s.low_freq_factor, f.Double("low_freq_factor", true, 0));
  KVFORK_ASSIGN_OR_RETURN(s.high_freq_factor, f.Double("high_freq_factor", true, 0));
  KVFORK_ASSIGN_OR_RETURN(s.original_max_position_embeddings,
                          f.Int("original_max_position_embeddings", true, 0, 1));
  if (s.factor <= 0) return f.Error("factor", "must be > 0");
  if (s.low_freq_factor <= 0) return f.Error("low_freq_factor", "must be > 0");
  if (s.high_freq_factor <= s.low_freq_factor)
    return f.Error("high_freq_factor", "must be greater than low_freq_factor");
  return OkStatus();
}

// partial_rotary_factor (Phi3 only): RoPE on the first
// int(head_dim * factor) dims of each head, as transformers' Phi3Attention.
Status ParseRotaryDim(const json& root, const Fields& f, ModelConfig* c) {
  c->rotary_dim = c->head_dim;
  if (!f.Has("partial_rotary_factor")) return OkStatus();
  KVFORK_ASSIGN_OR_RETURN(double prf, f.Double("partial_rotary_factor", true, 1.0));
  if (prf == 1.0) return OkStatus();
  if (c->arch != Architecture::kPhi3)
    return f.Error("partial_rotary_factor",
                   "other than 1 is supported for Phi3ForCausalLM only, got " +
                       root.at("partial_rotary_factor").dump());
  if (!(prf > 0 && prf < 1)) return f.Error("partial_rotary_factor", "must be in (0, 1]");
  c->rotary_dim = static_cast<int64_t>(static_cast<double>(c->head_dim) * prf);
  if (c->rotary_dim < 2 || c->rotary_dim % 2 != 0)
    return f.Error("partial_rotary_factor", "gives " + std::to_string(c->rotary_dim) +
                                                " rotary dims; they must be even and >= 2");
  return OkStatus();
}

// SmolLM3's no_rope_layers: one entry per layer, 1 = RoPE, 0 = none. Absent:
// transformers' default, every no_rope_layer_interval-th layer without.
Status ParseNoRopeLayers(const json& root, const Fields& f, ModelConfig* c) {
  c->layer_uses_rope.assign(static_cast<size_t>(c->num_layers), true);
  if (f.Has("no_rope_layers")) {
    const json& v = root.at("no_rope_layers");
    if (!v.is_array() || static_cast<int64_t>(v.size()) != c->num_layers)
      return f.Error("no_rope_layers", "must be a list of num_hidden_layers (" +
                                           std::to_string(c->num_layers) + ") 0/1 entries");
    for (size_t l = 0; l < v.size(); ++l) {
      if (!v[l].is_number_integer() || (v[l].get<int64_t>() != 0 && v[l].get<int64_t>() != 1))
        return f.Error("no_rope_layers",
                       "entry " + std::to_string(l) + " must be 0 or 1, got " + v[l].dump());
      c->layer_uses_rope[l] = v[l].get<int64_t>() == 1;
    }
    return OkStatus();
  }
  KVFORK_ASSIGN_OR_RETURN(int64_t interval, f.Int("no_rope_layer_interval", false, 4, 1));
  for (int64_t l = 0; l < c->num_layers; ++l) c->layer_uses_rope[l] = (l + 1) % interval != 0;
  return OkStatus();
}

// Qwen3MoeConfig's expert fields, with its defaults (128 experts, 8 per
// token, 768 wide, no renormalization, every layer sparse). Layer l is a
// mixture of experts when it is not in mlp_only_layers and
// (l + 1) % decoder_sparse_step == 0, as Qwen3MoeDecoderLayer decides.
Status ParseQwen3Moe(const json& root, const Fields& f, ModelConfig* c) {
  KVFORK_ASSIGN_OR_RETURN(c->num_experts, f.Int("num_experts", false, 128, 0));
  KVFORK_ASSIGN_OR_RETURN(c->num_experts_per_tok, f.Int("num_experts_per_tok", false, 8, 1));
  KVFORK_ASSIGN_OR_RETURN(c->moe_intermediate_size, f.Int("moe_intermediate_size", false, 768, 1));
  KVFORK_ASSIGN_OR_RETURN(c->norm_topk_prob, f.Bool("norm_topk_prob", false));
  KVFORK_ASSIGN_OR_RETURN(int64_t step, f.Int("decoder_sparse_step", false, 1, 1));
  // Sizes beyond int32 are no real model's (and a bound on what is built).
  if (c->num_experts > 4096) return f.Error("num_experts", "is above 4096");
  if (c->moe_intermediate_size > std::numeric_limits<int32_t>::max())
    return f.Error("moe_intermediate_size", "is above 2147483647");
  if (c->num_experts_per_tok > kMaxExpertsPerToken)
    return f.Error("num_experts_per_tok", "is above " + std::to_string(kMaxExpertsPerToken));
  if (c->num_experts > 0 && c->num_experts_per_tok > c->num_experts)
    return f.Error("num_experts_per_tok", "(" + std::to_string(c->num_experts_per_tok) +
                                              ") must not exceed num_experts (" +
                                              std::to_string(c->num_experts) + ")");
  c->moe_layers.assign(static_cast<size_t>(c->num_layers), true);
  for (int64_t l = 0; l < c->num_layers; ++l) c->moe_layers[l] = (l + 1) % step == 0;
  if (f.Has("mlp_only_layers")) {
    const json& v = root.at("mlp_only_layers");
    if (!v.is_array()) return f.Error("mlp_only_layers", "must be a list of layer indices");
    for (const json& x : v) {
      if (!x.is_number_integer() || x.get<int64_t>() < 0 || x.get<int64_t>() >= c->num_layers)
        return f.Error("mlp_only_layers", "entry " + x.dump() + " is not a layer index in [0, " +
                                              std::to_string(c->num_layers) + ")");
      c->moe_layers[static_cast<size_t>(x.get<int64_t>())] = false;
    }
  }
  return OkStatus();
}

// Gemma3TextConfig's fields beyond Llama's, with its defaults.
Status ParseGemma3(const json& root, const Fields& f, const std::string& path, ModelConfig* c) {
  if (!f.Has("tie_word_embeddings")) c->tie_word_embeddings = true;
  if (!f.Has("rope_theta")) c->rope_theta = 1000000.0;
  KVFORK_ASSIGN_OR_RETURN(std::string act, f.String("hidden_activation", false));
  if (act.empty()) {
    KVFORK_ASSIGN_OR_RETURN(act, f.String("hidden_act", false));
  }
  if (!act.empty() && act != "gelu_pytorch_tanh")
    return UnimplementedError(path + ": field \"hidden_activation\" = \"" + act +
                              "\" is not supported (only gelu_pytorch_tanh)");
  c->hidden_act = Activation::kGeluTanh;
  KVFORK_ASSIGN_OR_RETURN(c->query_pre_attn_scalar, f.Double("query_pre_attn_scalar", false, 256));
  if (c->query_pre_attn_scalar <= 0) return f.Error("query_pre_attn_scalar", "must be > 0");
  KVFORK_ASSIGN_OR_RETURN(c->rope_local_theta, f.Double("rope_local_base_freq", false, 10000.0));
  if (c->rope_local_theta <= 1) return f.Error("rope_local_base_freq", "must be > 1");
  KVFORK_ASSIGN_OR_RETURN(c->final_logit_softcapping,
                          f.Double("final_logit_softcapping", false, 0));
  if (c->final_logit_softcapping < 0) return f.Error("final_logit_softcapping", "must be >= 0");
  if (f.Has("attn_logit_softcapping"))
    return UnimplementedError(path + ": field \"attn_logit_softcapping\" is not supported "
                              "(Gemma 3 has none; null it)");
  KVFORK_ASSIGN_OR_RETURN(c->sliding_window, f.Int("sliding_window", false, 4096, 1));
  // layer_types (current transformers) or sliding_window_pattern (older
  // files): every pattern-th layer is global, the others slide.
  c->sliding_layers.assign(c->num_layers, false);
  if (f.Has("layer_types")) {
    const json& lt = root.at("layer_types");
    if (!lt.is_array() || static_cast<int64_t>(lt.size()) != c->num_layers)
      return f.Error("layer_types", "must be a list of num_hidden_layers strings");
    for (int64_t l = 0; l < c->num_layers; ++l) {
      const json& t = lt[l];
      if (t == "sliding_attention") {
        c->sliding_layers[l] = true;
      } else if (t != "full_attention") {
        return f.Error("layer_types", "entry " + std::to_string(l) + " is " + t.dump() +
                                          " (sliding_attention or full_attention)");
      }
    }
  } else {
    KVFORK_ASSIGN_OR_RETURN(int64_t pattern, f.Int("sliding_window_pattern", false, 6, 1));
    for (int64_t l = 0; l < c->num_layers; ++l) c->sliding_layers[l] = (l + 1) % pattern != 0;
  }
  return OkStatus();
}

}  // namespace

StatusOr<ModelConfig> ParseModelConfig(const std::string& json_text, const std::string& path) {
  json root = json::parse(json_text, nullptr, /*allow_exceptions=*/false);
  if (root.is_discarded()) return InvalidArgumentError(path + ": not valid JSON");
  if (!root.is_object()) return InvalidArgumentError(path + ": top level must be a JSON object");
  Fields f(root, path);
  ModelConfig c;

  // Architecture: "architectures": ["LlamaForCausalLM"] (model_type as a fallback).
  std::string arch;
  if (f.Has("architectures")) {
    const json& a = root.at("architectures");
    if (!a.is_array() || a.empty() || !a[0].is_string())
      return f.Error("architectures", "must be a non-empty list of strings");
    arch = a[0].get<std::string>();
  } else {
    KVFORK_ASSIGN_OR_RETURN(std::string model_type, f.String("model_type", false));
    const ArchSpec* by_type = ArchForModelType(model_type);
    if (by_type != nullptr)
      arch = by_type->hf_name;
    else if (model_type.empty()) return f.Error("architectures", "is missing (and no model_type)");
    else arch = model_type;
  }
  const ArchSpec* spec = ArchForHfName(arch);
  if (spec == nullptr)
    return UnimplementedError(path + ": architecture \"" + arch + "\" is not supported (" +
                              SupportedArchNames(/*gguf=*/false) + ")");
  c.arch = spec->id;

  KVFORK_ASSIGN_OR_RETURN(c.vocab_size, f.Int("vocab_size", true, 0, 1));
  KVFORK_ASSIGN_OR_RETURN(c.hidden_size, f.Int("hidden_size", true, 0, 1));
  KVFORK_ASSIGN_OR_RETURN(c.intermediate_size, f.Int("intermediate_size", true, 0, 1));
  KVFORK_ASSIGN_OR_RETURN(c.num_layers, f.Int("num_hidden_layers", true, 0, 1));
  KVFORK_ASSIGN_OR_RETURN(c.num_heads, f.Int("num_attention_heads", true, 0, 1));
  KVFORK_ASSIGN_OR_RETURN(c.num_kv_heads, f.Int("num_key_value_heads", false, c.num_heads, 1));
  if (c.num_heads % c.num_kv_heads != 0)
    return f.Error("num_key_value_heads", "(" + std::to_string(c.num_kv_heads) +
                                              ") must divide num_attention_heads (" +
                                              std::to_string(c.num_heads) + ")");
  if (f.Has("head_dim")) {
    KVFORK_ASSIGN_OR_RETURN(c.head_dim, f.Int("head_dim", true, 0, 2));
  } else if (spec->default_head_dim > 0) {
    c.head_dim = spec->default_head_dim;
  } else {
    if (c.hidden_size % c.num_heads != 0)
      return f.Error("hidden_size", "must be a multiple of num_attention_heads when head_dim is absent");
    c.head_dim = c.hidden_size / c.num_heads;
  }
  // Sizes beyond int32 are no real model's, and keeping them there keeps the
  // products of two (a matrix's elements) inside int64.
  for (const auto& [name, value] :
       {std::pair<const char*, int64_t>{"vocab_size", c.vocab_size},
        {"hidden_size", c.hidden_size},
        {"intermediate_size", c.intermediate_size},
        {"num_hidden_layers", c.num_layers},
        {"num_attention_heads", c.num_heads},
        {"head_dim", c.head_dim}})
    if (value > std::numeric_limits<int32_t>::max())
      return f.Error(name, "is " + std::to_string(value) + ", above 2147483647");
  if (c.head_dim % 2 != 0) return f.Error("head_dim", "must be even for rotary embeddings");
  if (c.head_dim > kMaxAttentionHeadDim)
    return f.Error("head_dim", "is " + std::to_string(c.head_dim) +
                                   ", above the attention kernels' limit of " +
                                   std::to_string(kMaxAttentionHeadDim));
  if (c.num_heads / c.num_kv_heads > kMaxAttentionGroup)
    return f.Error("num_key_value_heads",
                   "(" + std::to_string(c.num_kv_heads) + ") gives " +
                       std::to_string(c.num_heads / c.num_kv_heads) +
                       " query heads per KV head, above the attention kernels' limit of " +
                       std::to_string(kMaxAttentionGroup));
  KVFORK_ASSIGN_OR_RETURN(c.max_position_embeddings,
                          f.Int("max_position_embeddings", false, 2048, 1));
  KVFORK_ASSIGN_OR_RETURN(c.rms_norm_eps, f.Double("rms_norm_eps", false, 1e-6));
  if (c.rms_norm_eps <= 0) return f.Error("rms_norm_eps", "must be > 0");
  KVFORK_ASSIGN_OR_RETURN(c.rope_theta, f.Double("rope_theta", false, 10000.0));
  if (c.rope_theta <= 1) return f.Error("rope_theta", "must be > 1");
  KVFORK_ASSIGN_OR_RETURN(c.tie_word_embeddings, f.Bool("tie_word_embeddings", false));
  KVFORK_RETURN_IF_ERROR(ParseRotaryDim(root, f, &c));
  if (c.arch == Architecture::kPhi3) {
    // Phi3Config keeps the pretrained context beside max_position_embeddings
    // (default 4096); longrope's factor is their ratio.
    KVFORK_ASSIGN_OR_RETURN(c.rope_scaling.original_max_position_embeddings,
                            f.Int("original_max_position_embeddings", false, 4096, 1));
    // A window the context can exceed masks attention: the sliding-window
    // work (issue 24) owns that; a window >= the context changes nothing.
    KVFORK_ASSIGN_OR_RETURN(int64_t window,
                            f.Int("sliding_window", false, c.max_position_embeddings, 1));
    if (window < c.max_position_embeddings)
      return UnimplementedError(path + ": field \"sliding_window\" = " + std::to_string(window) +
                                " (below max_position_embeddings " +
                                std::to_string(c.max_position_embeddings) + ") is not supported");
  }
  if (c.arch == Architecture::kSmolLM3) KVFORK_RETURN_IF_ERROR(ParseNoRopeLayers(root, f, &c));
  if (c.arch == Architecture::kQwen3Moe) KVFORK_RETURN_IF_ERROR(ParseQwen3Moe(root, f, &c));
  KVFORK_RETURN_IF_ERROR(ParseRopeScaling(root, path, &c));

  // Features of the HF classes we do not implement are errors, not silently ignored.
  for (const char* name : {"attention_bias", "mlp_bias"}) {
    KVFORK_ASSIGN_OR_RETURN(bool on, f.Bool(name, false));
    if (on) return UnimplementedError(path + ": field \"" + name + "\" = true is not supported");
  }
  if (c.arch == Architecture::kQwen3 || c.arch == Architecture::kQwen2 ||
      c.arch == Architecture::kSmolLM3 || c.arch == Architecture::kQwen3Moe) {
    KVFORK_ASSIGN_OR_RETURN(bool sliding, f.Bool("use_sliding_window", false));
    if (sliding)
      return UnimplementedError(path + ": field \"use_sliding_window\" = true is not supported");
  }
  if (spec->has_sliding_window) {
    // null (Has() is false) or absent: no window.
    KVFORK_ASSIGN_OR_RETURN(c.sliding_window, f.Int("sliding_window", false, 0, 1));
  }
  if (c.arch == Architecture::kGemma3) {
    KVFORK_RETURN_IF_ERROR(ParseGemma3(root, f, path, &c));
  } else if (f.Has("hidden_act")) {
    KVFORK_ASSIGN_OR_RETURN(std::string act, f.String("hidden_act", true));
    if (act != "silu")
      return UnimplementedError(path + ": field \"hidden_act\" = \"" + act +
                                "\" is not supported (only silu)");
  }

  // Token ids index the vocabulary (the sampler's stop set, the prompt's
  // first token): one outside it is an error here, not a wild read later.
  auto in_vocab = [&](const char* name, int64_t id) -> Status {
    if (id >= 0 && id < c.vocab_size) return OkStatus();
    return f.Error(name, "has token id " + std::to_string(id) + ", outside the vocabulary [0, " +
                             std::to_string(c.vocab_size) + ")");
  };
  if (f.Has("eos_token_id")) {
    const json& e = root.at("eos_token_id");
    std::vector<json> ids;
    if (e.is_array()) {
      ids.assign(e.begin(), e.end());
    } else {
      ids.push_back(e);
    }
    for (const json& x : ids) {
      if (!x.is_number_integer())
        return f.Error("eos_token_id", "must be an integer or a list of integers");
      KVFORK_RETURN_IF_ERROR(in_vocab("eos_token_id", x.get<int64_t>()));
      c.eos_token_ids.push_back(static_cast<int32_t>(x.get<int64_t>()));
    }
  }
  KVFORK_ASSIGN_OR_RETURN(int64_t bos, f.Int("bos_token_id", false, -1, 0));
  if (bos != -1) KVFORK_RETURN_IF_ERROR(in_vocab("bos_token_id", bos));
  c.bos_token_id = static_cast<int32_t>(bos);
  if (f.Has("torch_dtype")) {
    KVFORK_ASSIGN_OR_RETURN(c.torch_dtype, f.String("torch_dtype", false));
  }
  return c;
}

StatusOr<ModelConfig> LoadModelConfig(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return NotFoundError(path + ": cannot open (missing config.json?)");
  std::stringstream ss;
  ss << in.rdbuf();
  if (in.bad()) return DataLossError(path + ": read error");
  return ParseModelConfig(ss.str(), path);
}

double ModelConfig::RopeBaseInvFreq(int64_t i) const {
  return 1.0 / std::pow(rope_theta, static_cast<double>(2 * i) / RotaryDim());
}

std::vector<float> ModelConfig::RopeLocalInvFreq() const {
  if (rope_local_theta <= 0) return RopeInvFreq();
  // transformers' Gemma3 local rotary embedding: the default rope at
  // rope_local_base_freq, evaluated in double and rounded once.
  // Over the rotary dims, as RopeInvFreq, so the decoder's tables agree
  // (Gemma 3 rotates all of head_dim).
  const int64_t dim = RotaryDim();
  std::vector<float> out(dim / 2);
  for (int64_t i = 0; i < dim / 2; ++i)
    out[i] = static_cast<float>(1.0 / std::pow(rope_local_theta, static_cast<double>(2 * i) / dim));
  return out;
}

std::vector<float> ModelConfig::RopeInvFreq() const {
  // As transformers' _compute_default_rope_parameters and
  // _compute_llama3_parameters, evaluated in double and rounded once; a
  // GGUF's freq factors divide as llama.cpp's rope does (theta / factor).
  const int64_t half = RotaryDim() / 2;
  std::vector<float> out(half);
  const double kPi = 3.14159265358979323846;
  for (int64_t i = 0; i < half; ++i) {
    double inv = RopeBaseInvFreq(i);
    if (rope_scaling.type == RopeScaling::Type::kLlama3) {
      const RopeScaling& s = rope_scaling;
      const double old_ctx = static_cast<double>(s.original_max_position_embeddings);
      const double low_freq_wavelen = old_ctx / s.low_freq_factor;
      const double high_freq_wavelen = old_ctx / s.high_freq_factor;
      const double wavelen = 2 * kPi / inv;
      if (wavelen > low_freq_wavelen) {
        inv = inv / s.factor;
      } else if (wavelen >= high_freq_wavelen) {
        // Medium band: interpolate between scaled and unscaled.
        double smooth = (old_ctx / wavelen - s.low_freq_factor) /
                        (s.high_freq_factor - s.low_freq_factor);
        inv = (1 - smooth) * inv / s.factor + smooth * inv;
      }
    } else if (rope_scaling.type == RopeScaling::Type::kFreqFactors &&
               static_cast<size_t>(i) < rope_scaling.freq_factors.size()) {
      inv = inv / rope_scaling.freq_factors[i];
    } else if (rope_scaling.type == RopeScaling::Type::kLongRope) {
      const std::vector<float>& f =
          rope_scaling.use_long_factor ? rope_scaling.long_factor : rope_scaling.short_factor;
      if (static_cast<size_t>(i) < f.size()) inv = inv / f[i];
    }
    out[i] = static_cast<float>(inv);
  }
  return out;
}

}  // namespace kvfork
