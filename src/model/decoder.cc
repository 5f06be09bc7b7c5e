#include "model/decoder.h"

#include <cmath>
#include <string>

#include "kernels/ops.h"

namespace kvfork {
namespace {

// x[r, :] += bias for each of `rows` rows of `cols` (the optional projection
// bias, Qwen2's q/k/v): one f32 add per element, the same in every batch.
void AddBiasRows(float* x, int64_t rows, int64_t cols, const float* bias) {
  for (int64_t r = 0; r < rows; ++r) AddInPlace(x + r * cols, bias, cols);
}

// RoPE on x [rows, heads, head_dim]: all of each head, or with partial rotary
// (rotary_dim < head_dim, Phi-4-mini) its first rotary_dim dims one head at a
// time, the rest passing through as transformers' Phi3 does. cos/sin:
// [rows, rotary_dim / 2].
void Rotate(float* x, int64_t rows, int64_t heads, int64_t head_dim, int64_t rotary_dim,
            const float* cos, const float* sin) {
  if (rotary_dim == head_dim) {
    RopeRotate(x, rows, heads, head_dim, cos, sin);
    return;
  }
  const int64_t half = rotary_dim / 2;
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t h = 0; h < heads; ++h)
      RopeRotate(x + (r * heads + h) * head_dim, 1, 1, rotary_dim, cos + r * half, sin + r * half);
}

}  // namespace

Decoder::Decoder(ModelConfig config, const ArchSpec& arch, std::unique_ptr<ModelWeights> weights)
    : config_(std::move(config)), arch_(arch), weights_(std::move(weights)) {
  inv_freq_ = config_.RopeInvFreq();
  // Gemma 3's sliding layers rotate with their own base.
  if (config_.rope_local_theta > 0) local_inv_freq_ = config_.RopeLocalInvFreq();
  kv_map_ = MapKvGroups(config_, KvDType::kBf16, 16);  // only the layer slots are used
}

Status Decoder::Validate(const ForwardBatch& batch, const KvLayout& layout) const {
  const ModelConfig& c = config_;
  if (layout.num_layers != c.num_layers || layout.num_kv_heads != c.num_kv_heads ||
      layout.head_dim != c.head_dim || layout.block_size <= 0)
    return InvalidArgumentError("KV layout (layers " + std::to_string(layout.num_layers) +
                                ", kv heads " + std::to_string(layout.num_kv_heads) +
                                ", head_dim " + std::to_string(layout.head_dim) +
                                ") does not match the model");
  const std::span<const KvGroup> groups = batch.kv_groups;
  if (!groups.empty()) {
    if (groups.size() != kv_map_.groups.size())
      return InvalidArgumentError("forward batch: " + std::to_string(groups.size()) +
                                  " KV layer groups, the model has " +
                                  std::to_string(kv_map_.groups.size()));
    for (size_t g = 0; g < groups.size(); ++g) {
      const KvLayout& gl = groups[g].layout;
      const KvGroup& want = kv_map_.groups[g];
      if (gl.num_layers != want.layout.num_layers || gl.num_kv_heads != c.num_kv_heads ||
          gl.head_dim != c.head_dim || gl.block_size <= 0 || groups[g].window != want.window)
        return InvalidArgumentError(
            "forward batch: KV layer group " + std::to_string(g) + " (layers " +
            std::to_string(gl.num_layers) + ", window " + std::to_string(groups[g].window) +
            ") does not match the model's (layers " + std::to_string(want.layout.num_layers) +
            ", window " + std::to_string(want.window) + ")");
    }
  }
  int64_t total = 0;
  for (size_t s = 0; s < batch.seqs.size(); ++s) {
    const ForwardSeq& seq = batch.seqs[s];
    const std::string where = "forward batch seq " + std::to_string(s) + ": ";
    if (seq.num_tokens <= 0) return InvalidArgumentError(where + "num_tokens must be > 0");
    if (seq.start_pos < 0) return InvalidArgumentError(where + "start_pos must be >= 0");
    if (groups.empty() && seq.blocks == nullptr)
      return InvalidArgumentError(where + "no block table");
    for (size_t g = 0; g < groups.size(); ++g)
      if (groups[g].layout.num_layers > 0 && seq.group_blocks[g] == nullptr)
        return InvalidArgumentError(where + "no block table for KV layer group " +
                                    std::to_string(g));
    if (seq.start_pos + seq.num_tokens > std::numeric_limits<int32_t>::max())
      return OutOfRangeError(where + "position out of range");
    total += seq.num_tokens;
  }
  if (total != static_cast<int64_t>(batch.tokens.size()))
    return InvalidArgumentError("forward batch: sequences hold " + std::to_string(total) +
                                " tokens but tokens has " + std::to_string(batch.tokens.size()));
  for (size_t i = 0; i < batch.tokens.size(); ++i)
    if (batch.tokens[i] < 0 || batch.tokens[i] >= c.vocab_size)
      return InvalidArgumentError("forward batch: token " + std::to_string(i) + " = " +
                                  std::to_string(batch.tokens[i]) + " is outside the vocab [0, " +
                                  std::to_string(c.vocab_size) + ")");
  return OkStatus();
}

Status Decoder::Forward(const ForwardBatch& batch, const KvLayout& layout, ThreadPool& pool,
                        std::vector<float>* logits) {
  KVFORK_RETURN_IF_ERROR(Validate(batch, layout));
  const ModelConfig& c = config_;
  const ModelWeights& w = *weights_;
  const int64_t T = static_cast<int64_t>(batch.tokens.size());
  const int64_t H = c.hidden_size, I = c.intermediate_size;
  const int64_t qd = c.num_heads * c.head_dim, kvd = c.num_kv_heads * c.head_dim;
  const float eps = static_cast<float>(c.rms_norm_eps);
  // Gemma 3 scales scores by query_pre_attn_scalar^-0.5, the others head_dim^-0.5.
  const float scale = 1.0f / std::sqrt(static_cast<float>(
                                 c.query_pre_attn_scalar > 0 ? c.query_pre_attn_scalar : c.head_dim));
  if (T == 0) {
    logits->clear();
    return OkStatus();
  }

  positions_.resize(T);
  {
    int64_t t = 0;
    for (const ForwardSeq& s : batch.seqs)
      for (int64_t i = 0; i < s.num_tokens; ++i)
        positions_[t++] = static_cast<int32_t>(s.start_pos + i);
  }
  x_.resize(T * H);
  h_.resize(T * H);
  q_.resize(T * qd);
  k_.resize(T * kvd);
  v_.resize(T * kvd);
  attn_.resize(T * qd);
  gate_.resize(T * I);
  up_.resize(T * I);
  out_.resize(T * H);

  attn_seqs_.resize(batch.seqs.size());
  {
    int64_t t = 0;
    for (size_t s = 0; s < batch.seqs.size(); ++s) {
      const ForwardSeq& fs = batch.seqs[s];
      attn_seqs_[s] = {q_.data() + t * qd, attn_.data() + t * qd, fs.num_tokens, fs.start_pos,
                       fs.blocks};
      t += fs.num_tokens;
    }
  }

  // RoPE's angles depend only on the positions: once for every layer.
  const int64_t rotary_dim = c.RotaryDim();
  const int64_t half = rotary_dim / 2;
  rope_cos_.resize(T * half);
  rope_sin_.resize(T * half);
  // longrope's attention factor scales cos and sin (transformers multiplies
  // them after cos()/sin(), llama.cpp's rope by its attn_factor): in f32.
  const float rope_scale = c.rope_scaling.type == RopeScaling::Type::kLongRope
                               ? static_cast<float>(c.rope_scaling.attention_factor)
                               : 1.0f;
  pool.ParallelForRows(T, [&](int64_t r0, int64_t r1) {
    RopeAngles(positions_.data() + r0, r1 - r0, inv_freq_.data(), half,
               rope_cos_.data() + r0 * half, rope_sin_.data() + r0 * half);
    if (rope_scale != 1.0f)
      for (int64_t i = r0 * half; i < r1 * half; ++i) {
        rope_cos_[i] *= rope_scale;
        rope_sin_[i] *= rope_scale;
      }
  });
  if (!local_inv_freq_.empty()) {
    local_cos_.resize(T * half);
    local_sin_.resize(T * half);
    pool.ParallelForRows(T, [&](int64_t r0, int64_t r1) {
      RopeAngles(positions_.data() + r0, r1 - r0, local_inv_freq_.data(), half,
                 local_cos_.data() + r0 * half, local_sin_.data() + r0 * half);
    });
  }
  EmbeddingLookup(w.embed_tokens, batch.tokens.data(), T, x_.data());
  if (arch_.scale_embeddings) {
    // Gemma: * sqrt(hidden_size) in f32, as llama.cpp's ggml_scale.
    const float s = std::sqrt(static_cast<float>(H));
    for (int64_t i = 0; i < T * H; ++i) x_[i] *= s;
  }
  for (int64_t l = 0; l < c.num_layers; ++l) {
    const LayerWeights& L = w.layers[l];
    const bool rope = c.LayerUsesRope(l);
    const int64_t window = c.LayerWindow(l);
    // Sliding layers take the local RoPE tables where the model has them.
    const bool local = window > 0 && !local_inv_freq_.empty();
    const float* layer_cos = local ? local_cos_.data() : rope_cos_.data();
    const float* layer_sin = local ? local_sin_.data() : rope_sin_.data();
    pool.ParallelForRows(T, [&](int64_t r0, int64_t r1) {
      RmsNorm(x_.data() + r0 * H, L.input_norm, r1 - r0, H, eps, h_.data() + r0 * H);
    });
    const MatMulTarget qkv[] = {
        {L.q_proj, q_.data()}, {L.k_proj, k_.data()}, {L.v_proj, v_.data()}};
    MatMulShared(h_.data(), T, qkv, pool);
    pool.ParallelForRows(T, [&](int64_t r0, int64_t r1) {
      float* q = q_.data() + r0 * qd;
      float* k = k_.data() + r0 * kvd;
      if (L.q_bias != nullptr) {
        // Per row after the product, so a row's bits do not depend on the batch.
        AddBiasRows(q, r1 - r0, qd, L.q_bias);
        AddBiasRows(k, r1 - r0, kvd, L.k_bias);
        AddBiasRows(v_.data() + r0 * kvd, r1 - r0, kvd, L.v_bias);
      }
      if (arch_.after_qkv != nullptr) arch_.after_qkv(c, L, r1 - r0, q, k);
      if (!rope) return;  // SmolLM3's layers without position encoding
      const float* cos = layer_cos + r0 * half;
      const float* sin = layer_sin + r0 * half;
      Rotate(q, r1 - r0, c.num_heads, c.head_dim, rotary_dim, cos, sin);
      Rotate(k, r1 - r0, c.num_kv_heads, c.head_dim, rotary_dim, cos, sin);
    });
    // With layer groups, the layer's K/V is plane kv_layer of its group's
    // blocks (MapKvGroups); else plane l of the one table.
    const bool grouped = !batch.kv_groups.empty();
    const int group = grouped ? kv_map_.group_of_layer[l] : 0;
    const KvLayout& kv_layout = grouped ? batch.kv_groups[group].layout : layout;
    const int kv_layer = grouped ? kv_map_.index_in_group[l] : static_cast<int>(l);
    {
      int64_t t = 0;
      for (size_t i = 0; i < batch.seqs.size(); ++i) {
        const ForwardSeq& s = batch.seqs[i];
        uint8_t* const* table = grouped ? s.group_blocks[group] : s.blocks;
        attn_seqs_[i].blocks = table;
        // Each token fills its own slots (and int8 scales): split like the rest.
        pool.ParallelForRows(s.num_tokens, [&](int64_t r0, int64_t r1) {
          WriteKv(kv_layout, kv_layer, table, s.start_pos + r0, r1 - r0, k_.data() + (t + r0) * kvd,
                  v_.data() + (t + r0) * kvd);
        });
        t += s.num_tokens;
      }
    }
    for (AttentionSeq& s : attn_seqs_) s.window = window;
    PagedAttention(kv_layout, kv_layer, static_cast<int>(c.num_heads), scale, attn_seqs_, pool);
    AddBranch(attn_.data(), T, L.o_proj, L.attn_out_norm, pool);
    pool.ParallelForRows(T, [&](int64_t r0, int64_t r1) {
      RmsNorm(x_.data() + r0 * H, L.post_attn_norm, r1 - r0, H, eps, h_.data() + r0 * H);
    });
    if (c.LayerIsMoe(l)) {
      moe_.Add(c, L, h_.data(), T, x_.data(), pool);
      continue;
    }
    if (c.hidden_act == Activation::kGeluTanh) {
      const MatMulTarget gate_up[] = {{L.gate_proj, gate_.data()}, {L.up_proj, up_.data()}};
      MatMulShared(h_.data(), T, gate_up, pool);
      pool.ParallelForRows(T, [&](int64_t r0, int64_t r1) {
        GeluTanhMul(gate_.data() + r0 * I, up_.data() + r0 * I, (r1 - r0) * I,
                    gate_.data() + r0 * I);
      });
    } else {
      MatMulSiluMul(h_.data(), T, {L.gate_proj, gate_.data()}, {L.up_proj, up_.data()}, pool);
    }
    AddBranch(gate_.data(), T, L.down_proj, L.ffn_out_norm, pool);
  }

  // Final norm and lm_head only for the rows whose logits are asked for.
  auto first_row = [](const ForwardSeq& s) {
    return s.no_logits ? s.num_tokens : s.all_logits ? 0 : s.num_tokens - 1;
  };
  int64_t rows = 0;
  for (const ForwardSeq& s : batch.seqs) rows += s.num_tokens - first_row(s);
  logits->resize(rows * c.vocab_size);
  if (rows == 0) return OkStatus();
  rows_.resize(rows * H);
  {
    int64_t t = 0, r = 0;
    for (const ForwardSeq& s : batch.seqs) {
      for (int64_t i = first_row(s); i < s.num_tokens; ++i, ++r)
        RmsNorm(x_.data() + (t + i) * H, w.final_norm, 1, H, eps, rows_.data() + r * H);
      t += s.num_tokens;
    }
  }
  MatMul(rows_.data(), rows, w.lm_head, logits->data(), pool);
  if (c.final_logit_softcapping > 0)
    SoftCap(logits->data(), rows * c.vocab_size, static_cast<float>(c.final_logit_softcapping));
  return OkStatus();
}

void Decoder::AddBranch(const float* in, int64_t T, const MatrixView& w, const float* out_norm,
                        ThreadPool& pool) {
  const int64_t H = config_.hidden_size;
  if (out_norm == nullptr) {
    MatMulAddTo(in, T, {w, out_.data()}, x_.data(), pool);
    return;
  }
  // Gemma's sandwich: the branch's output is normed before the residual add.
  MatMul(in, T, w, out_.data(), pool);
  const float eps = static_cast<float>(config_.rms_norm_eps);
  pool.ParallelForRows(T, [&](int64_t r0, int64_t r1) {
    RmsNorm(out_.data() + r0 * H, out_norm, r1 - r0, H, eps, out_.data() + r0 * H);
    AddInPlace(x_.data() + r0 * H, out_.data() + r0 * H, (r1 - r0) * H);
  });
}

}  // namespace kvfork
