#include "model/quantize_recipe.h"

#include <algorithm>
#include <cctype>
#include <cstdio>

namespace kvfork {
namespace {

struct MixRow {
  QuantizeMix mix;
  const char* name;
  GgmlType default_type;  // llama_ftype_get_default_type
};

constexpr MixRow kMixes[] = {
    {QuantizeMix::kQ8_0, "q8_0", GgmlType::kQ8_0},
    {QuantizeMix::kQ4_0, "q4_0", GgmlType::kQ4_0},
    {QuantizeMix::kQ4_1, "q4_1", GgmlType::kQ4_1},
    {QuantizeMix::kQ5_0, "q5_0", GgmlType::kQ5_0},
    {QuantizeMix::kQ5_1, "q5_1", GgmlType::kQ5_1},
    {QuantizeMix::kQ4_K_S, "q4_k_s", GgmlType::kQ4_K},
    {QuantizeMix::kQ4_K_M, "q4_k_m", GgmlType::kQ4_K},
    {QuantizeMix::kQ5_K_S, "q5_k_s", GgmlType::kQ5_K},
    {QuantizeMix::kQ5_K_M, "q5_k_m", GgmlType::kQ5_K},
    {QuantizeMix::kQ6_K, "q6_k", GgmlType::kQ6_K},
};

const MixRow& RowOf(QuantizeMix mix) {
  for (const MixRow& r : kMixes)
    if (r.mix == mix) return r;
  return kMixes[0];  // unreachable: every enum value has a row
}

// llama-quant.cpp's tensor categories, as far as these mixes tell them apart.
enum class Category { kOutput, kTokenEmbd, kAttnV, kAttnK, kAttnOutput, kFfnDown, kOther };

Category CategoryOf(const std::string& name) {
  auto has = [&](const char* s) { return name.find(s) != std::string::npos; };
  if (name == "output.weight") return Category::kOutput;
  if (name == "token_embd.weight" || name == "per_layer_token_embd.weight")
    return Category::kTokenEmbd;
  // category_is_attn_v: fused QKV and MLA's kv_b count as attn_v (their
  // later branch in llama_tensor_get_type_impl is unreachable).
  if (has("attn_qkv.weight") || has("attn_kv_b.weight") || has("attn_v.weight"))
    return Category::kAttnV;
  // attn_k and attn_output: rules for 8-expert models only.
  if (has("attn_k.weight")) return Category::kAttnK;
  // attn_q, ffn_up, ffn_gate (and the experts' ffn_up_exps, ffn_gate_exps):
  // no rule for these mixes.
  if (has("attn_q.weight")) return Category::kOther;
  if (has("attn_output.weight")) return Category::kAttnOutput;
  if (has("ffn_up") || has("ffn_gate")) return Category::kOther;
  if (has("ffn_down")) return Category::kFfnDown;
  return Category::kOther;
}

// tensor_allows_quantization: 2-D and up (trailing 1s do not count, as
// ggml_n_dims), named *weight, and none of the small or special tensors
// llama.cpp keeps as they are.
bool AllowsQuantization(const std::string& name, const std::vector<int64_t>& ne) {
  size_t dims = ne.size();
  while (dims > 1 && ne[dims - 1] == 1) --dims;
  if (dims < 2) return false;
  if (name.size() < 6 || name.compare(name.size() - 6, 6, "weight") != 0) return false;
  static const char* const kKeep[] = {
      "_norm.weight",
      "ffn_gate_inp.weight",
      "ffn_gate_tid2eid.weight",
      "altup",
      "laurel",
      "per_layer_model_proj",
      "ssm_conv1d",
      "shortconv.conv.weight",
      "indexer.k_proj.weight",
      "indexer.q_proj.weight",
      "time_mix_first.weight",
      "time_mix_w0.weight",
      "time_mix_w1.weight",
      "time_mix_w2.weight",
      "time_mix_v0.weight",
      "time_mix_v1.weight",
      "time_mix_v2.weight",
      "time_mix_a0.weight",
      "time_mix_a1.weight",
      "time_mix_a2.weight",
      "time_mix_g1.weight",
      "time_mix_g2.weight",
      "time_mix_decay_w1.weight",
      "time_mix_decay_w2.weight",
      "time_mix_lerp_fused.weight",
      "attn_rel_b.weight",
      ".position_embd",
      "sam.pos_embd",
      "sam.neck.",
      "sam.net_",
      ".rel_pos",
      ".patch_embd",
      ".patch_merger",
      "a.rvq.codebook",
      "mm.a.code_embd",
  };
  for (const char* k : kKeep)
    if (name.find(k) != std::string::npos) return false;
  return name != "position_embd.weight" && name != "token_types.weight";
}

int BlockElems(GgmlType t) { return Traits(DTypeOfGgml(t)).block_elems; }

// The layer number N of "blk.N....", or 0.
int64_t LayerOf(const std::string& name) {
  long long layer = 0;
  if (std::sscanf(name.c_str(), "blk.%lld.", &layer) != 1) return 0;
  return layer;
}

// The first and last eighth of the layers, and every third one between.
bool UseMoreBits(int64_t i_layer, int64_t n_layers) {
  return i_layer < n_layers / 8 || i_layer >= 7 * n_layers / 8 || (i_layer - n_layers / 8) % 3 == 2;
}

// tensor_type_fallback: a block type that does not divide the row width
// becomes a 32-block type of about as many bits, and f16 if even that does
// not divide it.
GgmlType Fallback(GgmlType t, int64_t row_width) {
  if (row_width % BlockElems(t) == 0) return t;
  GgmlType r = t;
  switch (t) {
    case GgmlType::kQ4_K:
      r = GgmlType::kQ5_0;
      break;
    case GgmlType::kQ5_K:
      r = GgmlType::kQ5_1;
      break;
    case GgmlType::kQ6_K:
      r = GgmlType::kQ8_0;
      break;
    default:
      break;  // already a 32-block type
  }
  if (row_width % BlockElems(r) != 0) r = GgmlType::kF16;
  return r;
}

}  // namespace

StatusOr<QuantizeMix> ParseQuantizeMix(const std::string& name) {
  std::string lower = name;
  std::transform(lower.begin(), lower.end(), lower.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  std::string names;
  for (const MixRow& r : kMixes) {
    if (lower == r.name) return r.mix;
    names += names.empty() ? r.name : std::string(", ") + r.name;
  }
  return InvalidArgumentError("--type must be one of " + names + ", got \"" + name + "\"");
}

const char* QuantizeMixName(QuantizeMix mix) { return RowOf(mix).name; }

const std::vector<QuantizeMix>& AllQuantizeMixes() {
  static const std::vector<QuantizeMix> all = [] {
    std::vector<QuantizeMix> v;
    for (const MixRow& r : kMixes) v.push_back(r.mix);
    return v;
  }();
  return all;
}

QuantizeRecipe::QuantizeRecipe(QuantizeMix mix, QuantizeModelInfo model)
    : mix_(mix), model_(std::move(model)), default_type_(RowOf(mix).default_type) {
  // llama.cpp's LLM_TYPE_70B for the architectures kvfork reads: 80 layers
  // with grouped KV heads (llama) or 80 layers (qwen2).
  llama_70b_ = model_.num_layers == 80 &&
               ((model_.arch == "llama" && model_.num_heads != model_.num_kv_heads) ||
                model_.arch == "qwen2");
}

GgmlType QuantizeRecipe::MixType(const std::string& name, int64_t row_width) const {
  const Category category = CategoryOf(name);
  GgmlType t = default_type_;
  if (category == Category::kOutput || (!model_.has_output && category == Category::kTokenEmbd)) {
    if (model_.arch == "falcon" || row_width % BlockElems(t) != 0) return GgmlType::kQ8_0;
    return t == GgmlType::kQ8_0 ? t : GgmlType::kQ6_K;
  }
  const int64_t i_layer = LayerOf(name);
  const int64_t n_layers = model_.num_layers;
  const bool falcon = model_.arch == "falcon";
  if (category == Category::kAttnV) {
    if ((mix_ == QuantizeMix::kQ4_K_M || mix_ == QuantizeMix::kQ5_K_M) &&
        UseMoreBits(i_layer, n_layers)) {
      t = GgmlType::kQ6_K;
    } else if (mix_ == QuantizeMix::kQ4_K_S && i_layer < 4) {
      t = GgmlType::kQ5_K;
    }
    if (llama_70b_ && t == GgmlType::kQ4_K) t = GgmlType::kQ5_K;
    // "for the 8-expert model, bumping this to Q8_0 trades just ~128MB"
    if (model_.num_experts == 8) t = GgmlType::kQ8_0;
  } else if (category == Category::kAttnK) {
    if (model_.num_experts == 8) t = GgmlType::kQ8_0;
  } else if (category == Category::kAttnOutput) {
    if (!falcon && model_.num_experts == 8 &&
        (mix_ == QuantizeMix::kQ4_K_S || mix_ == QuantizeMix::kQ4_K_M))
      t = GgmlType::kQ5_K;
  } else if (category == Category::kFfnDown) {
    if (mix_ == QuantizeMix::kQ4_K_M) {
      if (falcon) {
        t = i_layer < n_layers / 16          ? GgmlType::kQ6_K
            : UseMoreBits(i_layer, n_layers) ? GgmlType::kQ5_K
                                             : GgmlType::kQ4_K;
      } else if (UseMoreBits(i_layer, n_layers)) {
        t = GgmlType::kQ6_K;
      }
    } else if (mix_ == QuantizeMix::kQ5_K_M && UseMoreBits(i_layer, n_layers)) {
      t = GgmlType::kQ6_K;
    } else if (mix_ == QuantizeMix::kQ4_K_S && !falcon && i_layer < n_layers / 8) {
      t = GgmlType::kQ5_K;
    }
  }
  return t;
}

GgmlType QuantizeRecipe::TypeFor(const std::string& name, const std::vector<int64_t>& ne,
                                 GgmlType current) const {
  if (ne.empty() || !AllowsQuantization(name, ne)) return current;
  return Fallback(MixType(name, ne[0]), ne[0]);
}

}  // namespace kvfork
