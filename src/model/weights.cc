#include "model/weights.h"

#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <map>

#include "core/bf16.h"
#include "core/logging.h"

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
    const size_t align = DTypeSize(t.dtype);
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

size_t MatrixBytes(const MatrixView& m) {
  return static_cast<size_t>(m.rows) * m.cols * DTypeSize(m.dtype);
}

}  // namespace

std::vector<ExpectedTensor> ExpectedTensors(const ModelConfig& c, const ArchSpec& arch) {
  const int64_t h = c.hidden_size, q = c.num_heads * c.head_dim, kv = c.num_kv_heads * c.head_dim;
  std::vector<ExpectedTensor> out;
  out.push_back({"model.embed_tokens.weight", {c.vocab_size, h}, false});
  for (int64_t l = 0; l < c.num_layers; ++l) {
    const std::string p = "model.layers." + std::to_string(l) + ".";
    out.push_back({p + "input_layernorm.weight", {h}, true});
    out.push_back({p + "self_attn.q_proj.weight", {q, h}, false});
    out.push_back({p + "self_attn.k_proj.weight", {kv, h}, false});
    out.push_back({p + "self_attn.v_proj.weight", {kv, h}, false});
    out.push_back({p + "self_attn.o_proj.weight", {h, q}, false});
    if (arch.add_layer_tensors != nullptr) arch.add_layer_tensors(c, p, &out);
    out.push_back({p + "post_attention_layernorm.weight", {h}, true});
    out.push_back({p + "mlp.gate_proj.weight", {c.intermediate_size, h}, false});
    out.push_back({p + "mlp.up_proj.weight", {c.intermediate_size, h}, false});
    out.push_back({p + "mlp.down_proj.weight", {h, c.intermediate_size}, false});
  }
  out.push_back({"model.norm.weight", {h}, true});
  if (!c.tie_word_embeddings) out.push_back({"lm_head.weight", {c.vocab_size, h}, false});
  return out;
}

StatusOr<std::unique_ptr<ModelWeights>> BindWeights(
    const ModelConfig& c, const ArchSpec& arch, std::unique_ptr<SafetensorsCheckpoint> checkpoint,
    const ModelLoadOptions& options) {
  auto w = std::make_unique<ModelWeights>();
  const SafetensorsCheckpoint& ck = *checkpoint;
  // Bound the config by what the files hold before building its tensor list:
  // a layer has at least 9 tensors, so num_hidden_layers 1000000000 is refused
  // here instead of after 9e9 tensor names have been built.
  constexpr int64_t kTensorsPerLayer = 9;
  const int64_t num_tensors = static_cast<int64_t>(ck.tensors().size());
  if (c.num_layers > num_tensors / kTensorsPerLayer)
    return InvalidArgumentError("config.json: num_hidden_layers " + std::to_string(c.num_layers) +
                                " needs at least " +
                                std::to_string(c.num_layers * kTensorsPerLayer) +
                                " tensors; the checkpoint has " + std::to_string(num_tensors));
  std::vector<ExpectedTensor> expected = ExpectedTensors(c, arch);

  // Check everything before binding anything, so errors come in a useful order.
  std::map<std::string, bool> wanted;
  for (const ExpectedTensor& e : expected) {
    wanted[e.name] = true;
    const TensorInfo* t = ck.Find(e.name);
    if (t == nullptr)
      return NotFoundError("tensor \"" + e.name + "\" is missing (expected shape " +
                           ShapeString(e.shape) + " from config.json)");
    if (t->shape != e.shape)
      return InvalidArgumentError(t->file + ": tensor \"" + e.name + "\" has shape " +
                                  t->ShapeString() + ", config.json implies " +
                                  ShapeString(e.shape));
  }
  for (const auto& [name, t] : ck.tensors()) {
    if (wanted.count(name) || IsIgnored(name)) continue;
    if (name == "lm_head.weight" && c.tie_word_embeddings) {
      // transformers overwrites a stored lm_head with embed_tokens when tied.
      KVFORK_LOG(kWarn) << t.file << ": lm_head.weight present but tie_word_embeddings is "
                        << "true; using model.embed_tokens.weight as transformers does";
      continue;
    }
    return InvalidArgumentError(t.file + ": unexpected tensor \"" + name + "\" (shape " +
                                t.ShapeString() + ") for " + arch.hf_name +
                                " with this config.json");
  }

  const bool progress = options.show_progress && isatty(2);
  Binder b(w.get(), options);
  size_t done = 0;
  auto tick = [&]() {
    ++done;
    if (progress && (done % 16 == 0 || done == expected.size()))
      std::fprintf(stderr, "\rloading weights: %zu/%zu tensors", done, expected.size());
  };
  auto get = [&](const std::string& name) -> const TensorInfo& {
    tick();
    return *ck.Find(name);
  };
  w->embed_tokens = b.Matrix(get("model.embed_tokens.weight"));
  w->layers.resize(c.num_layers);
  for (int64_t l = 0; l < c.num_layers; ++l) {
    const std::string p = "model.layers." + std::to_string(l) + ".";
    LayerWeights& L = w->layers[l];
    L.input_norm = b.Vector(get(p + "input_layernorm.weight"));
    L.q_proj = b.Matrix(get(p + "self_attn.q_proj.weight"));
    L.k_proj = b.Matrix(get(p + "self_attn.k_proj.weight"));
    L.v_proj = b.Matrix(get(p + "self_attn.v_proj.weight"));
    L.o_proj = b.Matrix(get(p + "self_attn.o_proj.weight"));
    if (ck.Find(p + "self_attn.q_norm.weight") && arch.after_qkv != nullptr) {
      L.q_norm = b.Vector(get(p + "self_attn.q_norm.weight"));
      L.k_norm = b.Vector(get(p + "self_attn.k_norm.weight"));
    }
    L.post_attn_norm = b.Vector(get(p + "post_attention_layernorm.weight"));
    L.gate_proj = b.Matrix(get(p + "mlp.gate_proj.weight"));
    L.up_proj = b.Matrix(get(p + "mlp.up_proj.weight"));
    L.down_proj = b.Matrix(get(p + "mlp.down_proj.weight"));
    for (const MatrixView* m : {&L.q_proj, &L.k_proj, &L.v_proj, &L.o_proj, &L.gate_proj,
                                &L.up_proj, &L.down_proj})
      w->decode_bytes_per_token += MatrixBytes(*m);
  }
  w->final_norm = b.Vector(get("model.norm.weight"));
  w->lm_head = c.tie_word_embeddings ? w->embed_tokens : b.Matrix(get("lm_head.weight"));
  w->decode_bytes_per_token += MatrixBytes(w->lm_head);
  if (progress) std::fprintf(stderr, "\n");
  for (const ExpectedTensor& e : expected) {
    int64_t n = 1;
    for (int64_t d : e.shape) n *= d;
    w->num_params += n;
  }
  if (b.f16_converted() > 0) {
    KVFORK_LOG(kInfo) << "converted " << b.f16_converted() << " f16 tensors to "
                      << (options.f16_to_f32 ? "f32" : "bf16") << " at load";
  }
  w->checkpoint = std::move(checkpoint);
  return w;
}

}  // namespace kvfork
