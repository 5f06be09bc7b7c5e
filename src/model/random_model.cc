#include "model/random_model.h"

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>

#include <nlohmann/json.hpp>

#include "core/bf16.h"
#include "core/progress.h"
#include "core/thread_pool.h"
#include "model/arch.h"
#include "model/safetensors.h"
#include "model/weights.h"

namespace kvfork {
namespace {

using nlohmann::json;
namespace fs = std::filesystem;

struct Shape {
  const char* name;
  int64_t hidden, intermediate, layers, heads, kv_heads, head_dim;
  int64_t vocab;  // 0: the tokenizer's
  bool tie;
  double rope_theta, rms_norm_eps;
  int64_t max_pos;
  bool rope_scaling;
  RopeScaling scaling;
  // Phi3 only: partial_rotary_factor (rotary dims = head_dim * this).
  double partial_rotary = 1.0;
  // For architectures with a sliding window (ArchSpec::has_sliding_window):
  // tiny's 32 makes a prompt of a few dozen tokens cut.
  int64_t sliding_window = 0;
  // Gemma 3 only (1B has none; tiny's exercises the code).
  double final_logit_softcapping = 0;
  // Qwen3 MoE only: experts, experts per token, expert width.
  int64_t experts = 0, experts_per_tok = 0, moe_intermediate = 0;
};

RopeScaling Llama3Scaling(double factor, int64_t original) {
  RopeScaling s;
  s.type = RopeScaling::Type::kLlama3;
  s.factor = factor;
  s.low_freq_factor = 1.0;
  s.high_freq_factor = 4.0;
  s.original_max_position_embeddings = original;
  return s;
}

// Phi3's longrope: the factor lists are made up at config time (they depend
// on the rotary dims), only the pretrained context is the shape's.
RopeScaling LongRope(int64_t original) {
  RopeScaling s;
  s.type = RopeScaling::Type::kLongRope;
  s.original_max_position_embeddings = original;
  return s;
}

const std::vector<Shape>& Shapes() {
  static const std::vector<Shape> shapes = {
      // tiny's rope scaling uses original_max_position_embeddings 32 so that
      // with head_dim 16 its frequencies fall in all three llama3 bands.
      // For qwen3moe, tiny has 8 experts of width 64, 2 per token.
      {"tiny", 64, 128, 2, 4, 2, 16, 0, false, 10000.0, 1e-6, 4096, false,
       Llama3Scaling(8.0, 32), 1.0, 32, 30.0, 8, 2, 64},
      {"default-50m", 256, 1024, 12, 4, 2, 64, 0, true, 1000000.0, 1e-6, 40960, false,
       Llama3Scaling(8.0, 8192)},
      {"qwen3-0.6b", 1024, 3072, 28, 16, 8, 128, 151936, true, 1000000.0, 1e-6, 40960, false,
       Llama3Scaling(8.0, 8192)},
      {"llama-3.2-1b", 2048, 8192, 16, 32, 8, 64, 128256, true, 500000.0, 1e-5, 131072, true,
       Llama3Scaling(32.0, 8192)},
      // Qwen2.5-0.5B(-Instruct)'s config.json, and a tiny one of its kind.
      {"qwen2.5-0.5b", 896, 4864, 24, 14, 2, 64, 151936, true, 1000000.0, 1e-6, 32768, false,
       RopeScaling()},
      {"qwen2.5-tiny", 64, 128, 2, 4, 2, 16, 0, true, 1000000.0, 1e-6, 32768, false, RopeScaling()},
      // SmolLM3-3B; the tiny one has 4 layers so that layer 3 has no RoPE.
      {"smollm3-3b", 2048, 11008, 36, 16, 4, 128, 128256, true, 5000000.0, 1e-6, 65536, false,
       RopeScaling()},
      {"smollm3-tiny", 64, 128, 4, 4, 2, 16, 0, true, 5000000.0, 1e-6, 65536, false, RopeScaling()},
      // Phi-4-mini-instruct (3.8B): partial rotary 0.75, longrope from 4096.
      // The tiny one's pretrained context of 32 puts a 64-token prompt on the
      // long factors, as transformers and llama.cpp would choose.
      {"phi-4-mini", 3072, 8192, 32, 24, 8, 128, 200064, true, 10000.0, 1e-5, 131072, true,
       LongRope(4096), 0.75},
      {"phi3-tiny", 64, 128, 2, 4, 2, 16, 0, false, 10000.0, 1e-5, 4096, false, LongRope(32), 0.75},
      // Mistral-7B-v0.1's config.json: the release with a 4096 window.
      {"mistral-7b", 4096, 14336, 32, 32, 8, 128, 32000, false, 10000.0, 1e-5, 32768, false,
       Llama3Scaling(8.0, 8192), 1.0, 4096},
      // google/gemma-3-1b-pt's config.json (text only; window 512, every
      // 6th layer global, rope_theta 1e6 / local 10000, no softcap).
      {"gemma-3-1b", 1152, 6912, 26, 4, 1, 256, 262144, true, 1000000.0, 1e-6, 32768, false,
       Llama3Scaling(8.0, 8192), 1.0, 512, 0.0},
      // Qwen/Qwen3-30B-A3B's config.json: 128 experts of 768, 8 per token,
      // every layer sparse, renormalized (61 GB in bf16; --experts shrinks it).
      {"qwen3-30b-a3b", 2048, 6144, 48, 32, 4, 128, 151936, false, 1000000.0, 1e-6, 40960, false,
       RopeScaling(), 1.0, 0, 0.0, 128, 8, 768},
  };
  return shapes;
}

uint64_t SplitMix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

uint64_t NameHash(const std::string& s) {
  uint64_t h = 0xcbf29ce484222325ull;  // FNV-1a
  for (unsigned char c : s) h = (h ^ c) * 0x100000001b3ull;
  return h;
}

// Standard normal for element i of a stream: Box-Muller on two hashed uniforms.
double Normal(uint64_t key, uint64_t i) {
  uint64_t a = SplitMix64(key ^ SplitMix64(2 * i));
  uint64_t b = SplitMix64(key ^ SplitMix64(2 * i + 1));
  double u1 = (static_cast<double>(a >> 11) + 1.0) * (1.0 / 9007199254740992.0);  // (0, 1]
  double u2 = static_cast<double>(b >> 11) * (1.0 / 9007199254740992.0);
  return std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2);
}

bool EndsWith(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// (mean, std) of a tensor's values by its role.
std::pair<double, double> Distribution(const ExpectedTensor& t, const ModelConfig& c) {
  // Biases are small around 0; norm weights around 1 (Gemma stores w of its
  // (1 + w), so around 0 there).
  if (EndsWith(t.name, ".bias")) return {0.0, 0.1};
  if (t.is_vector) return {1.0 - ArchFor(c.arch).hf_norm_offset, 0.1};
  const double fan_in = static_cast<double>(t.shape[1]);
  if (EndsWith(t.name, "embed_tokens.weight") || EndsWith(t.name, "lm_head.weight"))
    return {0.0, 2.5 / std::sqrt(static_cast<double>(c.hidden_size))};
  // The router a little sharper than unit logits, so that routing differs
  // clearly between tokens and no two experts come close to a tie.
  if (EndsWith(t.name, "mlp.gate.weight")) return {0.0, 2.0 / std::sqrt(fan_in)};
  if (EndsWith(t.name, "q_proj.weight") || EndsWith(t.name, "k_proj.weight") ||
      EndsWith(t.name, "qkv_proj.weight"))
    return {0.0, 1.5 / std::sqrt(fan_in)};
  return {0.0, 1.0 / std::sqrt(fan_in)};
}

StatusOr<json> ReadJson(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return NotFoundError(path + ": cannot open");
  std::stringstream ss;
  ss << in.rdbuf();
  json j = json::parse(ss.str(), nullptr, false);
  if (j.is_discarded()) return InvalidArgumentError(path + ": not valid JSON");
  return j;
}

// Token id of a special token's content in tokenizer.json, or -1.
int64_t TokenId(const json& tok, const std::string& content) {
  if (tok.contains("added_tokens") && tok["added_tokens"].is_array())
    for (const json& a : tok["added_tokens"])
      if (a.is_object() && a.value("content", "") == content && a.contains("id") &&
          a["id"].is_number_integer())
        return a["id"].get<int64_t>();
  if (tok.contains("model") && tok["model"].is_object() && tok["model"].contains("vocab") &&
      tok["model"]["vocab"].is_object() && tok["model"]["vocab"].contains(content) &&
      tok["model"]["vocab"][content].is_number_integer())
    return tok["model"]["vocab"][content].get<int64_t>();
  return -1;
}

std::string SpecialTokenContent(const json& tc, const char* key) {
  if (!tc.contains(key)) return "";
  const json& v = tc[key];
  if (v.is_string()) return v.get<std::string>();
  if (v.is_object() && v.contains("content") && v["content"].is_string())
    return v["content"].get<std::string>();
  return "";
}

json ConfigJson(const ModelConfig& c, DType dtype) {
  json j;
  const bool llama = c.arch == Architecture::kLlama;
  const ArchSpec& arch = ArchFor(c.arch);
  j["architectures"] = {arch.hf_name};
  j["model_type"] = arch.ModelType();
  j["hidden_size"] = c.hidden_size;
  j["intermediate_size"] = c.intermediate_size;
  j["num_hidden_layers"] = c.num_layers;
  j["num_attention_heads"] = c.num_heads;
  j["num_key_value_heads"] = c.num_kv_heads;
  j["head_dim"] = c.head_dim;
  j["vocab_size"] = c.vocab_size;
  j["max_position_embeddings"] = c.max_position_embeddings;
  j["rms_norm_eps"] = c.rms_norm_eps;
  j["rope_theta"] = c.rope_theta;
  if (c.rope_scaling.type == RopeScaling::Type::kLlama3) {
    j["rope_scaling"] = {{"rope_type", "llama3"},
                         {"factor", c.rope_scaling.factor},
                         {"low_freq_factor", c.rope_scaling.low_freq_factor},
                         {"high_freq_factor", c.rope_scaling.high_freq_factor},
                         {"original_max_position_embeddings",
                          c.rope_scaling.original_max_position_embeddings}};
  } else if (c.rope_scaling.type == RopeScaling::Type::kLongRope) {
    j["rope_scaling"] = {{"type", "longrope"},
                         {"short_factor", c.rope_scaling.short_factor},
                         {"long_factor", c.rope_scaling.long_factor}};
  } else {
    j["rope_scaling"] = nullptr;
  }
  if (c.arch == Architecture::kPhi3) {
    j["original_max_position_embeddings"] = c.rope_scaling.original_max_position_embeddings;
    j["partial_rotary_factor"] = static_cast<double>(c.RotaryDim()) / c.head_dim;
  }
  if (c.arch == Architecture::kSmolLM3) {
    std::vector<int> no_rope_layers;
    for (int64_t l = 0; l < c.num_layers; ++l) no_rope_layers.push_back(c.LayerUsesRope(l) ? 1 : 0);
    j["no_rope_layers"] = no_rope_layers;
    j["use_sliding_window"] = false;
  }
  if (arch.has_sliding_window) {
    if (c.sliding_window > 0) {
      j["sliding_window"] = c.sliding_window;
    } else {
      j["sliding_window"] = nullptr;
    }
  }
  if (c.arch == Architecture::kQwen3Moe) {
    // Qwen3MoeConfig's expert fields (every layer sparse).
    j["num_experts"] = c.num_experts;
    j["num_experts_per_tok"] = c.num_experts_per_tok;
    j["moe_intermediate_size"] = c.moe_intermediate_size;
    j["norm_topk_prob"] = c.norm_topk_prob;
    j["decoder_sparse_step"] = 1;
    j["mlp_only_layers"] = json::array();
    for (int64_t l = 0; l < c.num_layers; ++l)
      if (!c.LayerIsMoe(l)) j["mlp_only_layers"].push_back(l);
    j["use_sliding_window"] = false;
  }
  j["tie_word_embeddings"] = c.tie_word_embeddings;
  if (c.arch == Architecture::kGemma3) {
    // Gemma3TextConfig's fields (layer_types as current transformers writes).
    j["hidden_activation"] = "gelu_pytorch_tanh";
    j["query_pre_attn_scalar"] = c.query_pre_attn_scalar;
    j["rope_local_base_freq"] = c.rope_local_theta;
    j["layer_types"] = json::array();
    for (int64_t l = 0; l < c.num_layers; ++l)
      j["layer_types"].push_back(c.LayerWindow(l) > 0 ? "sliding_attention" : "full_attention");
    if (c.final_logit_softcapping > 0) {
      j["final_logit_softcapping"] = c.final_logit_softcapping;
    } else {
      j["final_logit_softcapping"] = nullptr;
    }
    j["attn_logit_softcapping"] = nullptr;
  } else {
    j["hidden_act"] = "silu";
  }
  j["attention_bias"] = false;
  if (llama) j["mlp_bias"] = false;
  j["torch_dtype"] = dtype == DType::kF32 ? "float32" : dtype == DType::kF16 ? "float16" : "bfloat16";
  if (c.bos_token_id >= 0) j["bos_token_id"] = c.bos_token_id;
  if (c.eos_token_ids.size() == 1) j["eos_token_id"] = c.eos_token_ids[0];
  else if (!c.eos_token_ids.empty()) j["eos_token_id"] = c.eos_token_ids;
  return j;
}

Status WriteText(const std::string& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << text;
  out.close();
  if (!out) return InternalError(path + ": write failed");
  return OkStatus();
}

}  // namespace

std::vector<std::string> RandomModelShapes() {
  std::vector<std::string> names;
  for (const Shape& s : Shapes()) names.push_back(s.name);
  return names;
}

StatusOr<int64_t> TokenizerVocabSize(const std::string& path) {
  KVFORK_ASSIGN_OR_RETURN(json tok, ReadJson(path));
  int64_t max_id = -1;
  try {
    if (tok.contains("model") && tok["model"].contains("vocab") && tok["model"]["vocab"].is_object())
      for (auto& [k, v] : tok["model"]["vocab"].items())
        if (v.is_number_integer()) max_id = std::max<int64_t>(max_id, v.get<int64_t>());
    if (tok.contains("added_tokens") && tok["added_tokens"].is_array())
      for (const json& a : tok["added_tokens"])
        if (a.is_object() && a.contains("id") && a["id"].is_number_integer())
          max_id = std::max<int64_t>(max_id, a["id"].get<int64_t>());
  } catch (const json::exception& e) {
    return InvalidArgumentError(path + ": " + e.what());
  }
  if (max_id < 0) return InvalidArgumentError(path + ": no model.vocab or added_tokens ids");
  return max_id + 1;
}

StatusOr<ModelConfig> RandomModelConfig(const RandomModelOptions& o) {
  const Shape* shape = nullptr;
  for (const Shape& s : Shapes())
    if (o.shape == s.name) shape = &s;
  if (shape == nullptr) {
    std::string names;
    for (const std::string& n : RandomModelShapes()) names += (names.empty() ? "" : ", ") + n;
    return InvalidArgumentError("unknown model shape \"" + o.shape + "\" (known: " + names + ")");
  }
  if (o.dtype != DType::kBf16 && o.dtype != DType::kF32 && o.dtype != DType::kF16)
    return InvalidArgumentError("random model dtype must be bf16, f16 or f32");
  ModelConfig c;
  c.arch = o.arch;
  auto pick = [](int64_t v, int64_t d) { return v > 0 ? v : d; };
  c.hidden_size = pick(o.hidden_size, shape->hidden);
  c.intermediate_size = pick(o.intermediate_size, shape->intermediate);
  c.num_layers = pick(o.num_layers, shape->layers);
  c.num_heads = pick(o.num_heads, shape->heads);
  c.num_kv_heads = pick(o.num_kv_heads, shape->kv_heads);
  c.head_dim = pick(o.head_dim, shape->head_dim);
  if (c.num_heads % c.num_kv_heads != 0)
    return InvalidArgumentError("num_kv_heads must divide num_heads");
  if (c.head_dim % 2 != 0) return InvalidArgumentError("head_dim must be even");
  c.max_position_embeddings = shape->max_pos;
  c.rms_norm_eps = shape->rms_norm_eps;
  c.rope_theta = shape->rope_theta;
  c.tie_word_embeddings = o.tie_word_embeddings.value_or(shape->tie);
  c.rotary_dim = c.head_dim;
  if (c.arch == Architecture::kPhi3) {
    c.rotary_dim = static_cast<int64_t>(static_cast<double>(c.head_dim) * shape->partial_rotary);
    if (c.rotary_dim < 2 || c.rotary_dim % 2 != 0)
      return InvalidArgumentError("head_dim " + std::to_string(c.head_dim) + " with " +
                                  "partial rotary factor " + std::to_string(shape->partial_rotary) +
                                  " gives an odd rotary dim count");
    // Its converter has no head_dim key: head_dim must be hidden / heads.
    if (c.hidden_size != c.num_heads * c.head_dim)
      return InvalidArgumentError("phi3: hidden_size must be num_heads * head_dim");
    // Pretrained context even without scaling: Phi3Config always has one.
    c.rope_scaling.original_max_position_embeddings =
        shape->scaling.type == RopeScaling::Type::kLongRope
            ? shape->scaling.original_max_position_embeddings
            : 4096;
  }
  if (c.arch == Architecture::kSmolLM3) {
    // transformers' default no_rope_layers: every 4th layer without RoPE.
    c.layer_uses_rope = SmolLM3GgufRopeLayers(c.num_layers);
  }
  if (o.rope_scaling.value_or(shape->rope_scaling)) {
    if (c.arch == Architecture::kPhi3) {
      // longrope (Phi-3.5 / Phi-4-mini): short factors near 1, long ones
      // growing to ~32 toward the low frequencies, as the real lists do.
      const int64_t original = c.rope_scaling.original_max_position_embeddings;
      c.rope_scaling = LongRope(original);
      const int64_t half = c.rotary_dim / 2;
      for (int64_t i = 0; i < half; ++i) {
        const double x = static_cast<double>(i) / static_cast<double>(half);
        c.rope_scaling.short_factor.push_back(static_cast<float>(1.0 + 0.25 * x));
        c.rope_scaling.long_factor.push_back(static_cast<float>(1.0 + 31.0 * x * x));
      }
    } else if (shape->scaling.type == RopeScaling::Type::kLlama3) {
      c.rope_scaling = shape->scaling;
    } else {
      c.rope_scaling = Llama3Scaling(8.0, 32);
    }
  }
  if (ArchFor(o.arch).has_sliding_window)
    c.sliding_window = o.sliding_window.value_or(shape->sliding_window);
  if (o.arch == Architecture::kQwen3Moe) {
    // Every layer sparse (unless mlp_only_layers) and the weights
    // renormalized: what llama.cpp's qwen3moe runs (export-gguf refuses
    // anything else).
    c.num_experts = pick(o.num_experts, shape->experts);
    c.num_experts_per_tok = pick(o.num_experts_per_tok, shape->experts_per_tok);
    c.moe_intermediate_size = pick(o.moe_intermediate_size, shape->moe_intermediate);
    c.norm_topk_prob = true;
    if (c.num_experts <= 0 || c.num_experts_per_tok <= 0 || c.moe_intermediate_size <= 0)
      return InvalidArgumentError("qwen3moe: shape \"" + o.shape +
                                  "\" has no experts; give --experts, --experts-per-token and "
                                  "--moe-intermediate-size");
    if (c.num_experts_per_tok > c.num_experts || c.num_experts_per_tok > kMaxExpertsPerToken)
      return InvalidArgumentError("qwen3moe: experts per token must be <= the experts and <= " +
                                  std::to_string(kMaxExpertsPerToken));
    c.moe_layers.assign(static_cast<size_t>(c.num_layers), true);
    for (int64_t l : o.mlp_only_layers) {
      if (l < 0 || l >= c.num_layers)
        return InvalidArgumentError("qwen3moe: mlp_only_layers entry " + std::to_string(l) +
                                    " is not a layer");
      c.moe_layers[static_cast<size_t>(l)] = false;
    }
  }
  if (o.arch == Architecture::kGemma3) {
    // Gemma3TextConfig: 5 sliding layers per global one, local RoPE base
    // 10000, global 1e6 (so the two differ in every shape), GELU-tanh,
    // query_pre_attn_scalar = head_dim (what llama.cpp's GGUF assumes).
    c.sliding_layers.assign(c.num_layers, false);
    for (int64_t l = 0; l < c.num_layers; ++l) c.sliding_layers[l] = (l + 1) % 6 != 0;
    c.rope_theta = 1000000.0;
    c.rope_local_theta = 10000.0;
    c.hidden_act = Activation::kGeluTanh;
    c.query_pre_attn_scalar = static_cast<double>(c.head_dim);
    c.final_logit_softcapping = shape->final_logit_softcapping;
    c.rope_scaling = RopeScaling();  // llama3 scaling is not Gemma's
  }
  c.torch_dtype = DTypeName(o.dtype);

  int64_t tokenizer_vocab = 0;
  if (!o.tokenizer_dir.empty()) {
    const std::string tok_path = o.tokenizer_dir + "/tokenizer.json";
    KVFORK_ASSIGN_OR_RETURN(tokenizer_vocab, TokenizerVocabSize(tok_path));
    KVFORK_ASSIGN_OR_RETURN(json tok, ReadJson(tok_path));
    json tc = json::object();
    if (fs::exists(o.tokenizer_dir + "/tokenizer_config.json")) {
      KVFORK_ASSIGN_OR_RETURN(tc, ReadJson(o.tokenizer_dir + "/tokenizer_config.json"));
    }
    // eos: the configured eos token plus the usual end-of-turn tokens present.
    std::set<int32_t> seen;
    auto add_eos = [&](const std::string& content) {
      int64_t id = content.empty() ? -1 : TokenId(tok, content);
      if (id >= 0 && seen.insert(static_cast<int32_t>(id)).second)
        c.eos_token_ids.push_back(static_cast<int32_t>(id));
    };
    add_eos(SpecialTokenContent(tc, "eos_token"));
    for (const char* t : {"<|im_end|>", "<|endoftext|>", "<|eot_id|>", "<|end_of_text|>", "<|eom_id|>"})
      add_eos(t);
    std::string bos = SpecialTokenContent(tc, "bos_token");
    if (!bos.empty()) c.bos_token_id = static_cast<int32_t>(TokenId(tok, bos));
  }
  c.vocab_size = o.vocab_size > 0 ? o.vocab_size : shape->vocab > 0 ? shape->vocab : tokenizer_vocab;
  if (c.vocab_size <= 0)
    return InvalidArgumentError("random model: give a vocab size or a tokenizer directory");
  if (c.vocab_size < tokenizer_vocab)
    return InvalidArgumentError("vocab size " + std::to_string(c.vocab_size) +
                                " is smaller than the tokenizer's " +
                                std::to_string(tokenizer_vocab));
  return c;
}

Status WriteRandomModel(const RandomModelOptions& o, const std::string& out_dir) {
  KVFORK_ASSIGN_OR_RETURN(ModelConfig c, RandomModelConfig(o));
  std::error_code ec;
  fs::create_directories(out_dir, ec);
  if (ec) return InternalError(out_dir + ": cannot create: " + ec.message());

  // Tokenizer files first: config.json's eos ids came from them.
  if (!o.tokenizer_dir.empty()) {
    for (const char* f : {"tokenizer.json", "tokenizer_config.json", "generation_config.json"}) {
      const fs::path src = fs::path(o.tokenizer_dir) / f;
      if (!fs::exists(src)) continue;
      fs::copy_file(src, fs::path(out_dir) / f, fs::copy_options::overwrite_existing, ec);
      if (ec) return InternalError(src.string() + ": copy failed: " + ec.message());
    }
  }
  const std::string gen_path = out_dir + "/generation_config.json";
  if (!fs::exists(gen_path)) {
    json g = {{"do_sample", false}};
    if (c.bos_token_id >= 0) g["bos_token_id"] = c.bos_token_id;
    if (!c.eos_token_ids.empty()) g["eos_token_id"] = c.eos_token_ids;
    KVFORK_RETURN_IF_ERROR(WriteText(gen_path, g.dump(2) + "\n"));
  }
  KVFORK_RETURN_IF_ERROR(WriteText(out_dir + "/config.json", ConfigJson(c, o.dtype).dump(2) + "\n"));

  const std::vector<ExpectedTensor> tensors = ExpectedTensors(c, ArchFor(c.arch));
  std::vector<TensorHeader> headers;
  for (const ExpectedTensor& t : tensors) headers.push_back({t.name, o.dtype, t.shape});
  // Remove a stale sharded index so the new single file is what loads.
  fs::remove(out_dir + "/model.safetensors.index.json", ec);
  KVFORK_ASSIGN_OR_RETURN(auto writer,
                          SafetensorsWriter::Create(out_dir + "/model.safetensors", headers));
  ThreadPool pool(ThreadPool::DefaultThreads());
  std::vector<uint8_t> buf;
  ProgressOptions po;
  po.label = "writing " + out_dir;
  po.bytes = true;
  for (const ExpectedTensor& t : tensors) {
    int64_t n = 1;
    for (int64_t d : t.shape) n *= d;
    po.total += n * static_cast<int64_t>(DTypeSize(o.dtype));
  }
  if (!o.show_progress) po.enabled = false;
  Progress progress(po);
  int64_t written = 0;
  for (const ExpectedTensor& t : tensors) {
    progress.Update(written, t.name);
    int64_t n = 1;
    for (int64_t d : t.shape) n *= d;
    // Plain variables, not a structured binding: the lambda below captures
    // them, which C++20 allows but Clang 14 (the sanitizer build) rejects.
    const std::pair<double, double> dist = Distribution(t, c);
    const double mean = dist.first;
    const double stddev = dist.second;
    const uint64_t key = SplitMix64(o.seed ^ SplitMix64(NameHash(t.name)));
    const size_t esize = DTypeSize(o.dtype);
    buf.resize(static_cast<size_t>(n) * esize);
    constexpr int64_t kChunk = 1 << 16;
    uint8_t* out = buf.data();
    const DType dtype = o.dtype;
    pool.ParallelFor((n + kChunk - 1) / kChunk, [&](int64_t chunk) {
      const int64_t end = std::min(n, (chunk + 1) * kChunk);
      for (int64_t i = chunk * kChunk; i < end; ++i) {
        float v = static_cast<float>(mean + stddev * Normal(key, static_cast<uint64_t>(i)));
        if (dtype == DType::kF32) {
          std::memcpy(out + 4 * i, &v, 4);
        } else {
          uint16_t h = dtype == DType::kBf16 ? F32ToBf16(v) : F32ToF16(v);
          std::memcpy(out + 2 * i, &h, 2);
        }
      }
    });
    KVFORK_RETURN_IF_ERROR(writer->Write(buf.data(), buf.size()));
    written += static_cast<int64_t>(buf.size());
  }
  progress.Update(written, "");
  progress.Finish();
  return writer->Close();
}

}  // namespace kvfork
