#include "model/gguf_export.h"

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>

#include "core/bf16.h"
#include "kernels/quantize_row.h"
#include "model/gguf_reader.h"
#include "model/model_config.h"
#include "model/safetensors.h"
#include "model/weights.h"

namespace kvfork {
namespace {

using nlohmann::json;

// gguf-py TokenType.
constexpr int32_t kTokenNormal = 1;
constexpr int32_t kTokenControl = 3;
constexpr int32_t kTokenUserDefined = 4;
constexpr int32_t kTokenUnused = 5;

// gguf-py LlamaFileType: what general.file_type says about the bulk of the weights.
uint32_t FileType(GgmlType t) {
  switch (t) {
    case GgmlType::kF32: return 0;   // ALL_F32
    case GgmlType::kF16: return 1;   // MOSTLY_F16
    case GgmlType::kBf16: return 32; // MOSTLY_BF16
    default: break;                  // block types: set by kvfork quantize's mix
  }
  return 0;
}

StatusOr<json> ReadJson(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return NotFoundError(path + ": cannot open");
  std::stringstream ss;
  ss << in.rdbuf();
  json j = json::parse(ss.str(), nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return InvalidArgumentError(path + ": not valid JSON");
  return j;
}

float ToF32(DType t, const uint8_t* p, int64_t i) {
  switch (t) {
    case DType::kF32: {
      float f;
      std::memcpy(&f, p + 4 * i, 4);
      return f;
    }
    case DType::kBf16: {
      uint16_t h;
      std::memcpy(&h, p + 2 * i, 2);
      return Bf16ToF32(h);
    }
    case DType::kF16: {
      uint16_t h;
      std::memcpy(&h, p + 2 * i, 2);
      return F16ToF32(h);
    }
    default:  // safetensors holds element types only
      break;
  }
  return 0;
}

// Copies a safetensors tensor into a GGUF one, converting the element type
// and, if row_map is given, taking output row r from source row row_map[r].
// Same-type copies are bit exact; bf16 -> f16 and the like go through f32,
// as do block types (quantized a row at a time).
Status CopyTensor(const TensorInfo& src, GgmlType out_type, const std::vector<int64_t>* row_map,
                  float add, ThreadPool* pool, uint8_t* dst) {
  const int64_t n = *src.NumElements();  // Open checked it against the bytes
  const int64_t rows = src.shape.empty() ? 1 : src.shape[0];
  const int64_t cols = rows == 0 ? 0 : n / rows;
  const DType out = DTypeOfGgml(out_type);
  const size_t esize = DTypeSize(src.dtype);
  auto source_row = [&](int64_t r) {
    const int64_t sr = row_map != nullptr ? (*row_map)[r] : r;
    return src.data + static_cast<size_t>(sr * cols) * esize;
  };
  if (src.dtype == out && add == 0.0f) {
    for (int64_t r = 0; r < rows; ++r)
      std::memcpy(dst + static_cast<size_t>(r * cols) * esize, source_row(r), static_cast<size_t>(cols) * esize);
    return OkStatus();
  }
  const int64_t bad = QuantizeRows(
      out, rows, cols,
      [&](int64_t r, float* row) {
        const uint8_t* s = source_row(r);
        // add: Gemma's +1 on norm weights, in f32 as the converter adds it
        // (it widens bf16 to f32 first).
        for (int64_t c = 0; c < cols; ++c) row[c] = ToF32(src.dtype, s, c) + add;
      },
      dst, pool);
  if (bad >= 0)
    return InvalidArgumentError(src.file + ": tensor " + src.name + " row " + std::to_string(bad) +
                                " holds a NaN or infinite weight, which cannot be quantized");
  return OkStatus();
}

// tokenizer_config.json's "bos_token" etc.: a string, {"content": ...}, or null.
std::string TokenString(const json& cfg, const char* key) {
  if (!cfg.is_object() || !cfg.contains(key)) return "";
  const json& v = cfg.at(key);
  if (v.is_string()) return v.get<std::string>();
  if (v.is_object() && v.contains("content") && v.at("content").is_string())
    return v.at("content").get<std::string>();
  return "";
}

// True when a TemplateProcessing post-processor (possibly inside a Sequence)
// starts its single-sequence template with `bos`: SpecialVocab's add_bos rule.
bool PostProcessorAddsBos(const json& pp, const std::string& bos) {
  if (!pp.is_object() || bos.empty()) return false;
  std::string type = pp.value("type", "");
  if (type == "Sequence" && pp.contains("processors") && pp.at("processors").is_array()) {
    for (const json& p : pp.at("processors"))
      if (PostProcessorAddsBos(p, bos)) return true;
    return false;
  }
  if (type != "TemplateProcessing" || !pp.contains("single") || !pp.at("single").is_array() ||
      pp.at("single").empty())
    return false;
  const json& first = pp.at("single")[0];
  return first.is_object() && first.contains("SpecialToken") &&
         first.at("SpecialToken").is_object() &&
         first.at("SpecialToken").value("id", "") == bos;
}

Status AddTokenizerFromJson(const std::string& dir, const ModelConfig& config,
                            const std::string& pre, GgufWriter* w) {
  const std::string tok_path = dir + "/tokenizer.json";
  KVFORK_ASSIGN_OR_RETURN(json tj, ReadJson(tok_path));
  json cfg = json::object();
  const std::string cfg_path = dir + "/tokenizer_config.json";
  if (std::filesystem::exists(cfg_path)) {
    KVFORK_ASSIGN_OR_RETURN(cfg, ReadJson(cfg_path));
  }
  if (!tj.is_object() || !tj.contains("model") || !tj.at("model").is_object())
    return InvalidArgumentError(tok_path + ": field \"model\" is missing");
  const json& model = tj.at("model");
  if (model.value("type", "") != "BPE")
    return UnimplementedError(tok_path + ": model.type \"" + model.value("type", "") +
                              "\" is not supported (only BPE)");
  if (!model.contains("vocab") || !model.at("vocab").is_object())
    return InvalidArgumentError(tok_path + ": field \"model.vocab\" must be an object");

  const int64_t vocab_size = config.vocab_size;
  std::vector<std::string> tokens(vocab_size);
  std::vector<bool> present(vocab_size, false);
  std::vector<int32_t> types(vocab_size, kTokenNormal);
  std::map<std::string, int32_t> id_of;
  for (const auto& [text, idv] : model.at("vocab").items()) {
    if (!idv.is_number_integer())
      return InvalidArgumentError(tok_path + ": model.vocab[\"" + text + "\"] is not an integer");
    int64_t id = idv.get<int64_t>();
    if (id < 0 || id >= vocab_size)
      return InvalidArgumentError(tok_path + ": token id " + std::to_string(id) +
                                  " is outside config vocab_size " + std::to_string(vocab_size));
    tokens[id] = text;
    present[id] = true;
    id_of[text] = static_cast<int32_t>(id);
  }
  if (tj.contains("added_tokens") && tj.at("added_tokens").is_array()) {
    for (const json& a : tj.at("added_tokens")) {
      if (!a.is_object() || !a.contains("id") || !a.at("id").is_number_integer() ||
          !a.contains("content") || !a.at("content").is_string())
        return InvalidArgumentError(tok_path + ": malformed entry in added_tokens");
      int64_t id = a.at("id").get<int64_t>();
      if (id < 0 || id >= vocab_size)
        return InvalidArgumentError(tok_path + ": added token id " + std::to_string(id) +
                                    " is outside config vocab_size " + std::to_string(vocab_size));
      std::string text = a.at("content").get<std::string>();
      bool special = a.value("special", false);
      // does_token_look_special: <|...|> added tokens are control tokens
      // even when not marked special.
      bool looks_special = text.size() >= 4 && text.rfind("<|", 0) == 0 &&
                           text.compare(text.size() - 2, 2, "|>") == 0;
      tokens[id] = text;
      present[id] = true;
      types[id] = (special || looks_special) ? kTokenControl : kTokenUserDefined;
      id_of[text] = static_cast<int32_t>(id);
    }
  }
  for (int64_t i = 0; i < vocab_size; ++i) {
    if (!present[i]) {
      tokens[i] = "[PAD" + std::to_string(i) + "]";
      types[i] = kTokenUnused;
    }
  }
  std::vector<std::string> merges;
  if (model.contains("merges") && model.at("merges").is_array()) {
    for (const json& m : model.at("merges")) {
      if (m.is_string()) {
        merges.push_back(m.get<std::string>());
      } else if (m.is_array() && m.size() == 2 && m[0].is_string() && m[1].is_string()) {
        merges.push_back(m[0].get<std::string>() + " " + m[1].get<std::string>());
      } else {
        return InvalidArgumentError(tok_path + ": malformed entry in model.merges");
      }
    }
  }

  w->Set("tokenizer.ggml.model", GgufValue::String("gpt2"));
  w->Set("tokenizer.ggml.pre", GgufValue::String(pre));
  w->Set("tokenizer.ggml.tokens", GgufValue::StringArray(tokens));
  w->Set("tokenizer.ggml.token_type", GgufValue::I32Array(types));
  w->Set("tokenizer.ggml.merges", GgufValue::StringArray(merges));

  // Special ids as SpecialVocab resolves them: tokenizer_config's token
  // strings first, config.json's ids as the fallback.
  auto resolve = [&](const char* key) -> int32_t {
    std::string s = TokenString(cfg, key);
    auto it = id_of.find(s);
    return s.empty() || it == id_of.end() ? -1 : it->second;
  };
  int32_t bos = resolve("bos_token");
  if (bos < 0) bos = config.bos_token_id;
  int32_t eos = resolve("eos_token");
  if (eos < 0 && !config.eos_token_ids.empty()) eos = config.eos_token_ids[0];
  int32_t pad = resolve("pad_token");
  int32_t unk = resolve("unk_token");
  if (bos >= 0) w->Set("tokenizer.ggml.bos_token_id", GgufValue::U32(static_cast<uint32_t>(bos)));
  if (eos >= 0) w->Set("tokenizer.ggml.eos_token_id", GgufValue::U32(static_cast<uint32_t>(eos)));
  if (unk >= 0) w->Set("tokenizer.ggml.unknown_token_id", GgufValue::U32(static_cast<uint32_t>(unk)));
  if (pad >= 0) w->Set("tokenizer.ggml.padding_token_id", GgufValue::U32(static_cast<uint32_t>(pad)));
  bool add_bos = false;
  if (cfg.contains("add_bos_token") && cfg.at("add_bos_token").is_boolean()) {
    add_bos = cfg.at("add_bos_token").get<bool>();
  } else if (tj.contains("post_processor")) {
    add_bos = PostProcessorAddsBos(tj.at("post_processor"), TokenString(cfg, "bos_token"));
  }
  w->Set("tokenizer.ggml.add_bos_token", GgufValue::Bool(add_bos));
  if (cfg.contains("add_eos_token") && cfg.at("add_eos_token").is_boolean())
    w->Set("tokenizer.ggml.add_eos_token", GgufValue::Bool(cfg.at("add_eos_token").get<bool>()));
  if (cfg.contains("add_prefix_space") && cfg.at("add_prefix_space").is_boolean())
    w->Set("tokenizer.ggml.add_space_prefix",
           GgufValue::Bool(cfg.at("add_prefix_space").get<bool>()));
  if (cfg.contains("chat_template") && cfg.at("chat_template").is_string())
    w->Set("tokenizer.chat_template", GgufValue::String(cfg.at("chat_template").get<std::string>()));
  return OkStatus();
}

Status AddTokenizerFromGguf(const std::string& path, const ModelConfig& config, GgufWriter* w) {
  KVFORK_ASSIGN_OR_RETURN(GgufReader r, GgufReader::Open(path));
  KVFORK_ASSIGN_OR_RETURN(uint64_t n, r.GetArrayLength("tokenizer.ggml.tokens"));
  // llama.cpp sizes token_embd by the token list, so they must agree.
  if (static_cast<int64_t>(n) != config.vocab_size)
    return InvalidArgumentError(path + ": has " + std::to_string(n) +
                                " tokens but the model's vocab_size is " +
                                std::to_string(config.vocab_size));
  for (const auto& [key, value] : r.metadata())
    if (key.rfind("tokenizer.", 0) == 0) w->Set(key, value);
  return OkStatus();
}

// What convert_hf_to_gguf's hash detection yields for each family's
// tokenizer: Llama 3 (and SmolLM3's, derived from it), Qwen 2/3, Phi-4-mini's
// o200k.
const char* DefaultTokenizerPre(Architecture arch) {
  switch (arch) {
    case Architecture::kLlama:
    case Architecture::kMistral:  // written as arch "llama" (mistral.cc)
    case Architecture::kSmolLM3:
      return "llama-bpe";
    case Architecture::kPhi3:
      return "gpt-4o";
    case Architecture::kQwen2:
    case Architecture::kQwen3:
    case Architecture::kQwen3Moe:
    case Architecture::kGemma3:  // kvfork's Gemma shapes carry a BPE tokenizer
      break;
  }
  return "qwen2";
}

// A model-wide f32 vector tensor (rope_freqs, rope_factors_*).
Status AddF32Vector(GgufWriter* w, const std::string& name, std::vector<float> values) {
  auto v = std::make_shared<std::vector<float>>(std::move(values));
  return w->AddTensor(name, GgmlType::kF32, {static_cast<int64_t>(v->size())}, [v](uint8_t* dst) {
    std::memcpy(dst, v->data(), v->size() * 4);
    return OkStatus();
  });
}

}  // namespace

Status ExportGguf(const std::string& model_dir, const std::string& out_path,
                  const GgufExportOptions& options) {
  KVFORK_ASSIGN_OR_RETURN(ModelConfig c, LoadModelConfig(model_dir + "/config.json"));
  KVFORK_ASSIGN_OR_RETURN(std::unique_ptr<SafetensorsCheckpoint> ckpt,
                          SafetensorsCheckpoint::Open(model_dir));
  const ArchSpec& spec = ArchFor(c.arch);
  const std::string arch = spec.gguf_name;

  GgufWriter w;
  w.Set("general.architecture", GgufValue::String(arch));
  std::string name = options.name;
  if (name.empty()) name = std::filesystem::path(model_dir).lexically_normal().filename().string();
  if (name.empty()) name = std::filesystem::path(model_dir).parent_path().filename().string();
  w.Set("general.name", GgufValue::String(name));
  w.Set("general.file_type", GgufValue::U32(FileType(options.dtype)));
  auto u32 = [&](const std::string& key, int64_t v) {
    w.Set(arch + "." + key, GgufValue::U32(static_cast<uint32_t>(v)));
  };
  u32("block_count", c.num_layers);
  u32("context_length", c.max_position_embeddings);
  u32("embedding_length", c.hidden_size);
  u32("feed_forward_length", c.intermediate_size);
  u32("attention.head_count", c.num_heads);
  u32("attention.head_count_kv", c.num_kv_heads);
  w.Set(arch + ".rope.freq_base", GgufValue::F32(static_cast<float>(c.rope_theta)));
  w.Set(arch + ".attention.layer_norm_rms_epsilon",
        GgufValue::F32(static_cast<float>(c.rms_norm_eps)));
  if (c.arch == Architecture::kPhi3) {
    // Phi3MiniModel.set_gguf_parameters: no key/value length or vocab_size
    // keys (head_dim is embedding_length / head_count), the pretrained
    // context, and sliding_window 0 for none.
    u32("rope.dimension_count", c.RotaryDim());
    u32("rope.scaling.original_context_length", c.rope_scaling.original_max_position_embeddings);
    u32("attention.sliding_window", 0);
    if (c.hidden_size != c.num_heads * c.head_dim)
      return UnimplementedError(model_dir + "/config.json: head_dim " + std::to_string(c.head_dim) +
                                " is not hidden_size / num_attention_heads, which phi3 GGUF "
                                "cannot express (it has no attention.key_length)");
  } else {
    u32("attention.key_length", c.head_dim);
    u32("attention.value_length", c.head_dim);
    u32("vocab_size", c.vocab_size);
  }
  // LlamaModel (Llama and Mistral) writes rope.dimension_count; it writes no
  // sliding window, so a Mistral GGUF runs without one (mistral.cc).
  if (arch == "llama" || c.arch == Architecture::kSmolLM3) u32("rope.dimension_count", c.head_dim);
  if (c.arch == Architecture::kSmolLM3 && c.layer_uses_rope != SmolLM3GgufRopeLayers(c.num_layers))
    return UnimplementedError(model_dir +
                              "/config.json: no_rope_layers differs from llama.cpp's fixed "
                              "smollm3 pattern (no RoPE in every 4th layer), which GGUF cannot "
                              "express");
  if (c.arch == Architecture::kGemma3) {
    // Gemma3Model.set_gguf_parameters: the window (when some layer slides),
    // the sliding layers' RoPE base, the softcap. llama.cpp assumes every
    // 6th layer global and scores scaled by head_dim^-0.5; a config that
    // differs cannot be written so that llama.cpp runs what it says.
    for (int64_t l = 0; c.sliding_window > 0 && l < c.num_layers; ++l)
      if ((c.LayerWindow(l) > 0) != (l % 6 < 5))
        return UnimplementedError(model_dir + ": layer " + std::to_string(l) +
                                  " is not in Gemma 3's 5-sliding-per-global pattern, which "
                                  "llama.cpp's gemma3 GGUF assumes");
    if (c.query_pre_attn_scalar != static_cast<double>(c.head_dim))
      return UnimplementedError(model_dir + ": query_pre_attn_scalar " +
                                std::to_string(c.query_pre_attn_scalar) +
                                " is not head_dim, which llama.cpp's gemma3 GGUF assumes");
    if (c.sliding_window > 0) u32("attention.sliding_window", c.sliding_window);
    w.Set(arch + ".rope.freq_base_swa", GgufValue::F32(static_cast<float>(c.rope_local_theta)));
    if (c.final_logit_softcapping > 0)
      w.Set(arch + ".final_logit_softcapping",
            GgufValue::F32(static_cast<float>(c.final_logit_softcapping)));
  }

  if (c.arch == Architecture::kQwen3Moe) {
    // Qwen2MoeModel.set_gguf_parameters (TextModel's expert keys and the
    // experts' width). llama.cpp's qwen3moe has every layer sparse and always
    // renormalizes the chosen weights; a config that differs cannot be
    // written so that llama.cpp runs what it says.
    for (int64_t l = 0; l < c.num_layers; ++l)
      if (!c.LayerIsMoe(l))
        return UnimplementedError(model_dir + ": layer " + std::to_string(l) +
                                  " has a dense MLP (decoder_sparse_step / mlp_only_layers), "
                                  "which llama.cpp's qwen3moe GGUF cannot express");
    if (!c.norm_topk_prob)
      return UnimplementedError(model_dir +
                                ": norm_topk_prob false: llama.cpp's qwen3moe always "
                                "renormalizes the chosen experts' weights");
    u32("expert_count", c.num_experts);
    u32("expert_used_count", c.num_experts_per_tok);
    u32("expert_feed_forward_length", c.moe_intermediate_size);
  }

  if (!options.vocab_gguf.empty()) {
    KVFORK_RETURN_IF_ERROR(AddTokenizerFromGguf(options.vocab_gguf, c, &w));
  } else {
    std::string pre = options.tokenizer_pre;
    if (pre.empty()) pre = DefaultTokenizerPre(c.arch);
    const std::string dir = options.tokenizer_dir.empty() ? model_dir : options.tokenizer_dir;
    KVFORK_RETURN_IF_ERROR(AddTokenizerFromJson(dir, c, pre, &w));
  }

  // Tensors, named and shaped by the architecture's table (arch.h), the one
  // the loader binds by. Each keeps a pointer into the checkpoint's mmap,
  // which outlives w.Write(). Tied models reuse token_embd for the output
  // projection (llama.cpp does the same when "output" is absent), so
  // lm_head is not written even if a checkpoint carries a copy.
  auto find = [&](const std::string& name,
                  const std::vector<int64_t>& shape) -> StatusOr<const TensorInfo*> {
    const TensorInfo* t = ckpt->Find(name);
    if (t == nullptr) return NotFoundError(model_dir + ": tensor " + name + " is missing");
    if (t->shape != shape) {
      TensorInfo want;
      want.shape = shape;
      return InvalidArgumentError(t->file + ": tensor " + name + " has shape " +
                                  t->ShapeString() + ", expected " + want.ShapeString());
    }
    return t;
  };
  // A layer's experts of one projection, stacked into one
  // [num_experts, rows, cols] tensor (Qwen2MoeModel.modify_tensors).
  auto add_experts = [&](const std::vector<ExpectedTensor>& all, size_t first) -> Status {
    const ExpectedTensor& e = all[first];
    std::vector<const TensorInfo*> parts;
    for (int64_t x = 0; x < e.num_experts; ++x) {
      KVFORK_ASSIGN_OR_RETURN(const TensorInfo* t, find(all[first + x].name, e.shape));
      parts.push_back(t);
    }
    const std::vector<int64_t> shape = e.ShapeFor(/*gguf=*/true);
    std::vector<int64_t> ne(shape.rbegin(), shape.rend());
    GgmlType type = options.dtype;
    if (options.tensor_type) type = options.tensor_type(e.gguf_name, ne, type);
    const size_t expert_bytes =
        static_cast<size_t>(e.shape[0]) * RowBytes(DTypeOfGgml(type), e.shape[1]);
    ThreadPool* pool = options.pool;
    return w.AddTensor(e.gguf_name, type, ne, [parts, type, expert_bytes, pool](uint8_t* dst) {
      for (size_t x = 0; x < parts.size(); ++x)
        KVFORK_RETURN_IF_ERROR(
            CopyTensor(*parts[x], type, nullptr, 0.0f, pool, dst + x * expert_bytes));
      return OkStatus();
    });
  };
  auto add = [&](const ExpectedTensor& e) -> Status {
    KVFORK_ASSIGN_OR_RETURN(const TensorInfo* t, find(e.name, e.shape));
    // For llama, Q and K rows go from HF's rotate-half order to llama.cpp's
    // interleaved pairs (LlamaModel.permute); the loader undoes it.
    std::shared_ptr<std::vector<int64_t>> row_map;
    if (e.gguf_rope_heads > 0)
      row_map = std::make_shared<std::vector<int64_t>>(
          LlamaRopePermutation(e.gguf_rope_heads, e.shape[0] / e.gguf_rope_heads));
    GgmlType type = e.shape.size() == 1 ? GgmlType::kF32 : options.dtype;
    std::vector<int64_t> ne(e.shape.rbegin(), e.shape.rend());
    if (options.tensor_type) type = options.tensor_type(e.gguf_name, ne, type);
    // The router stays f32, as the converter and llama-quantize keep
    // ffn_gate_inp.
    if (e.role == TensorRole::kRouter) type = GgmlType::kF32;
    ThreadPool* pool = options.pool;
    // Gemma: llama.cpp's converter bakes the (1 + w) into the norm weights.
    const float add = IsNormRole(e.role) ? spec.hf_norm_offset : 0.0f;
    return w.AddTensor(e.gguf_name, type, ne, [t, type, row_map, add, pool](uint8_t* dst) {
      return CopyTensor(*t, type, row_map.get(), add, pool, dst);
    });
  };
  const std::vector<ExpectedTensor> tensors = ExpectedTensors(c, spec);
  KVFORK_RETURN_IF_ERROR(add(tensors[0]));  // token_embd
  if (c.rope_scaling.type == RopeScaling::Type::kLlama3) {
    // LlamaModel.generate_extra_tensors: llama.cpp divides each pair's base
    // frequency by this factor, so it is base / scaled from the one
    // RoPE-frequency function the decoder uses.
    const std::vector<float> scaled = c.RopeInvFreq();
    std::vector<float> factors;
    for (size_t i = 0; i < scaled.size(); ++i)
      factors.push_back(static_cast<float>(c.RopeBaseInvFreq(static_cast<int64_t>(i)) / scaled[i]));
    KVFORK_RETURN_IF_ERROR(AddF32Vector(&w, "rope_freqs.weight", std::move(factors)));
  }
  if (c.rope_scaling.type == RopeScaling::Type::kLongRope) {
    // Phi3MiniModel.generate_extra_tensors: both factor lists, and the
    // attention factor as rope.scaling.attn_factor.
    w.Set(arch + ".rope.scaling.attn_factor",
          GgufValue::F32(static_cast<float>(c.rope_scaling.attention_factor)));
    KVFORK_RETURN_IF_ERROR(
        AddF32Vector(&w, "rope_factors_long.weight", c.rope_scaling.long_factor));
    KVFORK_RETURN_IF_ERROR(
        AddF32Vector(&w, "rope_factors_short.weight", c.rope_scaling.short_factor));
  }
  for (size_t i = 1; i < tensors.size(); ++i) {
    if (tensors[i].expert > 0) continue;  // written with expert 0's stack
    KVFORK_RETURN_IF_ERROR(tensors[i].expert == 0 ? add_experts(tensors, i) : add(tensors[i]));
  }
  for (const auto& [key, value] : options.extra_metadata) w.Set(key, value);
  return w.Write(out_path, options.progress_label).WithContext("writing " + out_path);
}

}  // namespace kvfork
