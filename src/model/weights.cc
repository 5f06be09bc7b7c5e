#include "model/weights.h"

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <map>

#include "core/bf16.h"
#include "core/logging.h"
#include "core/progress.h"

namespace kvfork {
namespace {

std::string ShapeString(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

bool IsIgnored(const std::string& name) {
  // Some older Llama checkpoints store the rotary table; it is recomputed.
  return name.find("rotary_emb.inv_freq") != std::string::npos;
}

class Binder {
 public:
  Binder(ModelWeights* w, const ModelLoadOptions& o) : w_(w), options_(o) {}

  // A matrix in bf16 or f32: in place when aligned, else converted/copied.
  MatrixView Matrix(const TensorInfo& t) {
    MatrixView m;
    m.rows = t.shape[0];
    m.cols = t.shape.size() > 1 ? t.shape[1] : 1;
    const int64_t n = *t.NumElements();  // Open checked it against the bytes
    if (t.dtype == DType::kF16) {
      ++f16_converted_;
      if (options_.f16_to_f32) {
        float* dst = Alloc<float>(n);
        for (int64_t i = 0; i < n; ++i) dst[i] = F16ToF32(Load16(t.data, i));
        m.dtype = DType::kF32;
        m.data = dst;
      } else {
        bf16_t* dst = Alloc<bf16_t>(n);
        for (int64_t i = 0; i < n; ++i) dst[i] = F32ToBf16(F16ToF32(Load16(t.data, i)));
        m.dtype = DType::kBf16;
        m.data = dst;
      }
      return m;
    }
    m.dtype = t.dtype;
    // Block formats are read a block at a time with unaligned loads: in place.
    const size_t align = IsQuantized(t.dtype) ? 1 : DTypeSize(t.dtype);
    if (reinterpret_cast<uintptr_t>(t.data) % align == 0) {
      m.data = t.data;
    } else {
      // The format does not promise alignment; a misaligned tensor is copied.
      uint8_t* dst = Alloc<uint8_t>(static_cast<int64_t>(t.num_bytes));
      std::memcpy(dst, t.data, t.num_bytes);
      m.data = dst;
      KVFORK_LOG(kWarn) << t.file << ": tensor " << t.name << " is misaligned; copied";
    }
    return m;
  }

  // Expert `expert`'s [rows, cols] of a stacked GGUF expert tensor
  // [num_experts, rows, cols]: in place, as Matrix (experts are whole rows).
  MatrixView ExpertSlice(const TensorInfo& t, int64_t expert) {
    TensorInfo slice = t;
    slice.shape.erase(slice.shape.begin());
    slice.num_bytes = t.num_bytes / static_cast<size_t>(t.shape[0]);
    slice.data = t.data + slice.num_bytes * static_cast<size_t>(expert);
    return Matrix(slice);
  }

  // A norm weight as f32 (small; always converted unless already f32 aligned).
  const float* Vector(const TensorInfo& t) {
    const int64_t n = *t.NumElements();  // Open checked it against the bytes
    if (t.dtype == DType::kF32 && reinterpret_cast<uintptr_t>(t.data) % 4 == 0)
      return reinterpret_cast<const float*>(t.data);
    float* dst = Alloc<float>(n);
    for (int64_t i = 0; i < n; ++i) {
      if (t.dtype == DType::kF32) {
        std::memcpy(&dst[i], t.data + 4 * i, 4);
      } else if (t.dtype == DType::kBf16) {
        dst[i] = Bf16ToF32(Load16(t.data, i));
      } else {
        dst[i] = F16ToF32(Load16(t.data, i));
      }
    }
    return dst;
  }

  // A copy of m with its rows moved from llama.cpp's interleaved RoPE order
  // back to Hugging Face's rotate-half order. Rows are whole blocks, so this
  // works for every format.
  MatrixView UnpermuteRope(const MatrixView& m, int64_t heads) {
    const int64_t head_dim = m.rows / heads;
    const std::vector<int64_t> hf_row = LlamaRopePermutation(heads, head_dim);
    const size_t row_bytes = m.row_bytes();
    uint8_t* dst = Alloc<uint8_t>(static_cast<int64_t>(row_bytes * m.rows));
    for (int64_t g = 0; g < m.rows; ++g)
      std::memcpy(dst + hf_row[g] * row_bytes, m.row(g), row_bytes);
    MatrixView out = m;
    out.data = dst;
    return out;
  }

  // A copy of v[0, n) with `add` added to each weight in f32 (Gemma's 1 + w).
  const float* Offset(const float* v, int64_t n, float add) {
    float* dst = Alloc<float>(n);
    for (int64_t i = 0; i < n; ++i) dst[i] = v[i] + add;
    return dst;
  }

  int f16_converted() const { return f16_converted_; }

 private:
  static uint16_t Load16(const uint8_t* p, int64_t i) {
    uint16_t v;
    std::memcpy(&v, p + 2 * i, 2);
    return v;
  }
  template <typename T>
  T* Alloc(int64_t n) {
    w_->owned.emplace_back(static_cast<size_t>(n) * sizeof(T));
    return reinterpret_cast<T*>(w_->owned.back().data());
  }

  ModelWeights* w_;
  const ModelLoadOptions& options_;
  int f16_converted_ = 0;
};

size_t MatrixBytes(const MatrixView& m) { return static_cast<size_t>(m.rows) * m.row_bytes(); }

// Rows [first, first + count) of m, in place: a fused projection's part.
// Rows are whole blocks in every format, so any row range is a matrix.
MatrixView RowRange(const MatrixView& m, int64_t first, int64_t count) {
  MatrixView out = m;
  out.data = m.row(first);
  out.rows = count;
  return out;
}

ExpectedTensor ModelTensor(TensorRole role, const char* hf_name, const char* gguf_name,
                           std::vector<int64_t> shape, bool is_vector) {
  ExpectedTensor t;
  t.name = hf_name;
  t.gguf_name = gguf_name;
  t.shape = std::move(shape);
  t.is_vector = is_vector;
  t.role = role;
  return t;
}

}  // namespace

bool IsGgufConfigTensor(const std::string& name) {
  return name == "rope_freqs.weight" || name == "rope_factors_short.weight" ||
         name == "rope_factors_long.weight";
}

bool IsNormRole(TensorRole role) {
  switch (role) {
    case TensorRole::kFinalNorm:
    case TensorRole::kInputNorm:
    case TensorRole::kPostAttnNorm:
    case TensorRole::kQNorm:
    case TensorRole::kKNorm:
    case TensorRole::kAttnOutNorm:
    case TensorRole::kFfnOutNorm:
      return true;
    default:
      return false;
  }
}

std::vector<ExpectedTensor> ExpectedTensors(const ModelConfig& c, const ArchSpec& arch) {
  const int64_t h = c.hidden_size, q = c.num_heads * c.head_dim, kv = c.num_kv_heads * c.head_dim;
  const int64_t f = c.intermediate_size;
  using R = TensorRole;
  std::vector<ExpectedTensor> out;
  out.push_back(ModelTensor(R::kEmbed, "model.embed_tokens.weight", "token_embd.weight",
                            {c.vocab_size, h}, false));
  for (int64_t l = 0; l < c.num_layers; ++l) {
    out.push_back(
        LayerTensor(l, R::kInputNorm, "input_layernorm.weight", "attn_norm.weight", {h}, true));
    if (arch.fused_projections) {
      out.push_back(
          LayerTensor(l, R::kQkv, "self_attn.qkv_proj.weight", "attn_qkv.weight", {q + 2 * kv, h}));
    } else {
      out.push_back(LayerTensor(l, R::kQ, "self_attn.q_proj.weight", "attn_q.weight", {q, h}));
      if (arch.gguf_rope_permuted) out.back().gguf_rope_heads = c.num_heads;
      out.push_back(LayerTensor(l, R::kK, "self_attn.k_proj.weight", "attn_k.weight", {kv, h}));
      if (arch.gguf_rope_permuted) out.back().gguf_rope_heads = c.num_kv_heads;
      out.push_back(LayerTensor(l, R::kV, "self_attn.v_proj.weight", "attn_v.weight", {kv, h}));
    }
    out.push_back(LayerTensor(l, R::kO, "self_attn.o_proj.weight", "attn_output.weight", {h, q}));
    if (arch.add_layer_tensors != nullptr) arch.add_layer_tensors(c, l, &out);
    // The pre-MLP norm: Gemma names it pre_feedforward_layernorm (its
    // post_attention_layernorm is the attention output's, kAttnOutNorm).
    out.push_back(LayerTensor(l, R::kPostAttnNorm,
                              arch.sandwich_norms ? "pre_feedforward_layernorm.weight"
                                                  : "post_attention_layernorm.weight",
                              "ffn_norm.weight", {h}, true));
    if (c.LayerIsMoe(l) && arch.add_moe_tensors != nullptr) {
      arch.add_moe_tensors(c, l, &out);
      continue;
    }
    if (arch.fused_projections) {
      out.push_back(
          LayerTensor(l, R::kGateUp, "mlp.gate_up_proj.weight", "ffn_up.weight", {2 * f, h}));
    } else {
      out.push_back(LayerTensor(l, R::kGate, "mlp.gate_proj.weight", "ffn_gate.weight", {f, h}));
      out.push_back(LayerTensor(l, R::kUp, "mlp.up_proj.weight", "ffn_up.weight", {f, h}));
    }
    out.push_back(LayerTensor(l, R::kDown, "mlp.down_proj.weight", "ffn_down.weight", {h, f}));
  }
  out.push_back(ModelTensor(R::kFinalNorm, "model.norm.weight", "output_norm.weight", {h}, true));
  if (!c.tie_word_embeddings)
    out.push_back(
        ModelTensor(R::kLmHead, "lm_head.weight", "output.weight", {c.vocab_size, h}, false));
  return out;
}

StatusOr<std::unique_ptr<ModelWeights>> BindWeights(const ModelConfig& c, const ArchSpec& arch,
                                                    std::unique_ptr<TensorSource> source,
                                                    const ModelLoadOptions& options) {
  auto w = std::make_unique<ModelWeights>();
  const TensorSource& ck = *source;
  const bool gguf = ck.naming() == TensorNaming::kGguf;
  // Where the expected shapes come from, for messages.
  const std::string config_name = gguf ? ck.path() + " metadata" : "config.json";
  // Bound the config by what the files hold before building its tensor list:
  // a layer has at least 9 tensors (6 fused), so num_hidden_layers 1000000000
  // is refused here instead of after 9e9 tensor names have been built.
  const int64_t kTensorsPerLayer = arch.fused_projections ? 6 : 9;
  const int64_t num_tensors = static_cast<int64_t>(ck.tensors().size());
  if (c.num_layers > num_tensors / kTensorsPerLayer)
    return InvalidArgumentError((gguf ? ck.path() + ": key " + arch.gguf_name + ".block_count "
                                      : std::string("config.json: num_hidden_layers ")) +
                                std::to_string(c.num_layers) + " needs at least " +
                                std::to_string(c.num_layers * kTensorsPerLayer) +
                                " tensors; the checkpoint has " + std::to_string(num_tensors));
  // A mixture of experts lists each expert's three matrices: bound the list
  // (Qwen3-235B-A22B needs 37k entries) before building it, so a file that
  // claims 4096 experts in 10^5 layers is refused, not allocated.
  constexpr int64_t kMaxExpectedTensors = 1 << 20;
  const int64_t per_layer = 16 + 3 * std::max<int64_t>(c.num_experts, 0);
  if (c.num_layers > kMaxExpectedTensors / per_layer)
    return InvalidArgumentError(
        (gguf ? ck.path() + ": keys " + arch.gguf_name + ".block_count and expert_count "
              : std::string("config.json: num_hidden_layers and num_experts ")) +
        "imply " + std::to_string(c.num_layers) + " layers of " + std::to_string(per_layer) +
        " tensors, more than kvfork binds (" + std::to_string(kMaxExpectedTensors) + ")");
  std::vector<ExpectedTensor> expected = ExpectedTensors(c, arch);

  // Check everything before binding anything, so errors come in a useful order.
  std::map<std::string, bool> wanted;
  for (const ExpectedTensor& e : expected) {
    const std::string& name = e.NameFor(gguf);
    wanted[name] = true;
    const TensorInfo* t = ck.Find(name);
    if (t == nullptr)
      return NotFoundError((gguf ? ck.path() + ": " : std::string()) + "tensor \"" + name +
                           "\" is missing (expected shape " + ShapeString(e.shape) + " from " +
                           config_name + ")");
    if (t->shape != e.ShapeFor(gguf))
      return InvalidArgumentError(t->file + ": tensor \"" + name + "\" has shape " +
                                  t->ShapeString() + ", " + config_name + " implies " +
                                  ShapeString(e.ShapeFor(gguf)));
    if (e.is_vector && IsQuantized(t->dtype))
      return InvalidArgumentError(t->file + ": tensor \"" + name + "\" is " + DTypeName(t->dtype) +
                                  "; norm weights and biases must be f32, "
                                  "f16 or bf16");
    if (e.gguf_rope_heads > 0 && e.shape[0] % e.gguf_rope_heads != 0)
      return InvalidArgumentError(t->file + ": tensor \"" + name + "\" rows do not split into " +
                                  std::to_string(e.gguf_rope_heads) + " heads");
  }
  for (const auto& [name, t] : ck.tensors()) {
    if (wanted.count(name) || IsIgnored(name)) continue;
    if (gguf && IsGgufConfigTensor(name)) continue;
    if (!gguf && name == "lm_head.weight" && c.tie_word_embeddings) {
      // transformers overwrites a stored lm_head with embed_tokens when tied.
      KVFORK_LOG(kWarn) << t.file << ": lm_head.weight present but tie_word_embeddings is "
                        << "true; using model.embed_tokens.weight as transformers does";
      continue;
    }
    return InvalidArgumentError(
        t.file + ": unexpected tensor \"" + name + "\" (shape " + t.ShapeString() + ") for " +
        (gguf ? arch.gguf_name : arch.hf_name) + " with this " + config_name);
  }

  // A stacked GGUF expert tensor is one file tensor for num_experts entries.
  auto file_bytes = [&](const ExpectedTensor& e) -> int64_t {
    const int64_t bytes = static_cast<int64_t>(ck.Find(e.NameFor(gguf))->num_bytes);
    return gguf && e.expert >= 0 ? bytes / e.num_experts : bytes;
  };
  int64_t total_bytes = 0;
  for (const ExpectedTensor& e : expected) total_bytes += file_bytes(e);
  ProgressOptions po;
  po.label = "loading " + ck.path();
  po.total = total_bytes;
  po.bytes = true;
  if (!options.show_progress) po.enabled = false;
  Progress progress(po);
  Binder b(w.get(), options);
  size_t done = 0;
  int64_t done_bytes = 0;
  size_t expert_bytes = 0;
  w->layers.resize(c.num_layers);
  for (const ExpectedTensor& e : expected) {
    const TensorInfo& t = *ck.Find(e.NameFor(gguf));
    ++done;
    done_bytes += file_bytes(e);
    progress.Update(done_bytes,
                    std::to_string(done) + "/" + std::to_string(expected.size()) + " tensors");
    if (e.is_vector) {
      const float* v = b.Vector(t);
      if (!gguf && arch.hf_norm_offset != 0.0f && IsNormRole(e.role))
        v = b.Offset(v, *t.NumElements(), arch.hf_norm_offset);
      if (e.layer < 0) {
        w->final_norm = v;  // the only model-wide vector
        continue;
      }
      LayerWeights& L = w->layers[e.layer];
      switch (e.role) {
        case TensorRole::kInputNorm:
          L.input_norm = v;
          break;
        case TensorRole::kPostAttnNorm:
          L.post_attn_norm = v;
          break;
        case TensorRole::kQNorm:
          L.q_norm = v;
          break;
        case TensorRole::kKNorm:
          L.k_norm = v;
          break;
        case TensorRole::kAttnOutNorm:
          L.attn_out_norm = v;
          break;
        case TensorRole::kFfnOutNorm:
          L.ffn_out_norm = v;
          break;
        case TensorRole::kQBias:
          L.q_bias = v;
          break;
        case TensorRole::kKBias:
          L.k_bias = v;
          break;
        case TensorRole::kVBias:
          L.v_bias = v;
          break;
        default:
          KVFORK_CHECK_MSG(false, "vector tensor with a matrix role: " + e.name);
      }
      continue;
    }
    MatrixView m = gguf && e.expert >= 0 ? b.ExpertSlice(t, e.expert) : b.Matrix(t);
    if (gguf && e.gguf_rope_heads > 0) m = b.UnpermuteRope(m, e.gguf_rope_heads);
    if (e.expert >= 0) {
      // One token reads num_experts_per_tok of the num_experts experts.
      expert_bytes += MatrixBytes(m);
      LayerWeights& L = w->layers[e.layer];
      std::vector<MatrixView>& experts = e.role == TensorRole::kExpertGate ? L.expert_gate
                                         : e.role == TensorRole::kExpertUp ? L.expert_up
                                                                           : L.expert_down;
      experts.resize(static_cast<size_t>(e.num_experts));
      experts[e.expert] = m;
      continue;
    }
    if (e.role == TensorRole::kEmbed) {
      w->embed_tokens = m;
      continue;
    }
    w->decode_bytes_per_token += MatrixBytes(m);
    if (e.role == TensorRole::kLmHead) {
      w->lm_head = m;
      continue;
    }
    LayerWeights& L = w->layers[e.layer];
    switch (e.role) {
      case TensorRole::kQ:
        L.q_proj = m;
        break;
      case TensorRole::kK:
        L.k_proj = m;
        break;
      case TensorRole::kV:
        L.v_proj = m;
        break;
      case TensorRole::kO:
        L.o_proj = m;
        break;
      case TensorRole::kGate:
        L.gate_proj = m;
        break;
      case TensorRole::kUp:
        L.up_proj = m;
        break;
      case TensorRole::kDown:
        L.down_proj = m;
        break;
      case TensorRole::kRouter:
        L.router = m;
        break;
      case TensorRole::kQkv: {
        const int64_t q = c.num_heads * c.head_dim, kv = c.num_kv_heads * c.head_dim;
        L.q_proj = RowRange(m, 0, q);
        L.k_proj = RowRange(m, q, kv);
        L.v_proj = RowRange(m, q + kv, kv);
        break;
      }
      case TensorRole::kGateUp:
        L.gate_proj = RowRange(m, 0, c.intermediate_size);
        L.up_proj = RowRange(m, c.intermediate_size, c.intermediate_size);
        break;
      default:
        KVFORK_CHECK_MSG(false, "matrix tensor with a vector role: " + e.name);
    }
  }
  if (c.num_experts > 0)
    w->decode_bytes_per_token += expert_bytes * static_cast<size_t>(c.num_experts_per_tok) /
                                 static_cast<size_t>(c.num_experts);
  if (c.tie_word_embeddings) {
    w->lm_head = w->embed_tokens;
    w->decode_bytes_per_token += MatrixBytes(w->lm_head);
  }
  progress.Finish();
  for (const ExpectedTensor& e : expected) {
    int64_t n = 1;
    for (int64_t d : e.shape) n *= d;
    w->num_params += n;
  }
  if (b.f16_converted() > 0) {
    KVFORK_LOG(kInfo) << "converted " << b.f16_converted() << " f16 tensors to "
                      << (options.f16_to_f32 ? "f32" : "bf16") << " at load";
  }
  w->source = std::move(source);
  return w;
}

}  // namespace kvfork
