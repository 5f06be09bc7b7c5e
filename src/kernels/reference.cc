#include "kernels/reference.h"

#include <cmath>
#include <limits>
#include <vector>

#include "core/bf16.h"
#include "kernels/kv_q4.h"

namespace kvfork::reference {
namespace {

inline float LoadWeight(const MatrixView& w, int64_t r, int64_t c) {
  if (w.dtype == DType::kBf16)
    return Bf16ToF32(static_cast<const bf16_t*>(w.data)[r * w.cols + c]);
  return static_cast<const float*>(w.data)[r * w.cols + c];
}

inline uint8_t* PlanePtr(const KvLayout& l, uint8_t* const* blocks, int layer, int kv, int head,
                         int64_t pos, size_t* index_in_plane, float** scale) {
  uint8_t* block = blocks[pos / l.block_size];
  int64_t slot = pos % l.block_size;
  *index_in_plane = static_cast<size_t>(slot) * l.head_dim;
  *scale = l.dtype == KvDType::kInt8
               ? reinterpret_cast<float*>(block + l.ScaleOffset(layer, kv, head)) + slot
               : nullptr;
  return block + l.PlaneOffset(layer, kv, head);
}

void StoreRow(const KvLayout& l, uint8_t* const* blocks, int layer, int kv, int head, int64_t pos,
              const float* src) {
  size_t idx;
  float* scale;
  uint8_t* plane = PlanePtr(l, blocks, layer, kv, head, pos, &idx, &scale);
  switch (l.dtype) {
    case KvDType::kF32: {
      float* p = reinterpret_cast<float*>(plane) + idx;
      for (int d = 0; d < l.head_dim; ++d) p[d] = src[d];
      break;
    }
    case KvDType::kBf16: {
      bf16_t* p = reinterpret_cast<bf16_t*>(plane) + idx;
      for (int d = 0; d < l.head_dim; ++d) p[d] = F32ToBf16(src[d]);
      break;
    }
    case KvDType::kInt8: {
      float amax = 0.0f;
      for (int d = 0; d < l.head_dim; ++d) amax = std::max(amax, std::fabs(src[d]));
      float s = amax / 127.0f;
      float inv = s > 0.0f ? 1.0f / s : 0.0f;
      int8_t* p = reinterpret_cast<int8_t*>(plane) + idx;
      for (int d = 0; d < l.head_dim; ++d) {
        float q = std::nearbyint(src[d] * inv);
        q = std::min(127.0f, std::max(-127.0f, q));
        p[d] = static_cast<int8_t>(q);
      }
      *scale = s;
      break;
    }
    case KvDType::kQ4:
    case KvDType::kQ4r:
      break;  // WriteKv writes q4 rows with WriteKvQ4
  }
}

}  // namespace

void MatMul(const float* x, int64_t m, const MatrixView& w, float* y, ThreadPool& pool) {
  const int64_t n = w.rows, k = w.cols;
  const bool bf16 = w.dtype == DType::kBf16;
  pool.ParallelFor(m, [&](int64_t i) {
    const float* xi = x + i * k;
    for (int64_t j = 0; j < n; ++j) {
      float acc = 0.0f;
      for (int64_t c = 0; c < k; ++c) {
        float xv = bf16 ? Bf16ToF32(F32ToBf16(xi[c])) : xi[c];
        acc = std::fma(xv, LoadWeight(w, j, c), acc);
      }
      y[i * n + j] = acc;
    }
  });
}

void MatMulShared(const float* x, int64_t m, std::span<const MatMulTarget> targets,
                  ThreadPool& pool) {
  for (const MatMulTarget& t : targets) reference::MatMul(x, m, t.w, t.y, pool);
}

void RmsNorm(const float* x, const float* weight, int64_t rows, int64_t dim, float eps, float* y) {
  for (int64_t r = 0; r < rows; ++r) {
    const float* xr = x + r * dim;
    float ss = 0.0f;
    for (int64_t i = 0; i < dim; ++i) ss += xr[i] * xr[i];
    float inv = 1.0f / std::sqrt(ss / static_cast<float>(dim) + eps);
    float* yr = y + r * dim;
    for (int64_t i = 0; i < dim; ++i) yr[i] = xr[i] * inv * weight[i];
  }
}

void Rope(float* x, int64_t num_tokens, int64_t num_heads, int64_t head_dim,
          const int32_t* positions, const float* inv_freq) {
  const int64_t half = head_dim / 2;
  for (int64_t t = 0; t < num_tokens; ++t) {
    for (int64_t i = 0; i < half; ++i) {
      // The angle in double so large positions keep their precision.
      double angle = static_cast<double>(positions[t]) * static_cast<double>(inv_freq[i]);
      float c = static_cast<float>(std::cos(angle));
      float s = static_cast<float>(std::sin(angle));
      for (int64_t h = 0; h < num_heads; ++h) {
        float* xh = x + (t * num_heads + h) * head_dim;
        float a = xh[i], b = xh[i + half];
        xh[i] = a * c - b * s;
        xh[i + half] = b * c + a * s;
      }
    }
  }
}

void RopeRotate(float* x, int64_t num_tokens, int64_t num_heads, int64_t head_dim,
                const float* cos, const float* sin) {
  const int64_t half = head_dim / 2;
  for (int64_t t = 0; t < num_tokens; ++t) {
    for (int64_t i = 0; i < half; ++i) {
      const float c = cos[t * half + i], s = sin[t * half + i];
      for (int64_t h = 0; h < num_heads; ++h) {
        float* xh = x + (t * num_heads + h) * head_dim;
        float a = xh[i], b = xh[i + half];
        xh[i] = a * c - b * s;
        xh[i + half] = b * c + a * s;
      }
    }
  }
}

void SiluMul(const float* gate, const float* up, int64_t n, float* out) {
  for (int64_t i = 0; i < n; ++i) {
    float g = gate[i];
    out[i] = g / (1.0f + std::exp(-g)) * up[i];
  }
}

void AddInPlace(float* y, const float* x, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] += x[i];
}

void Softmax(float* x, int64_t n) {
  float mx = -std::numeric_limits<float>::infinity();
  for (int64_t i = 0; i < n; ++i) mx = std::max(mx, x[i]);
  float sum = 0.0f;
  for (int64_t i = 0; i < n; ++i) {
    x[i] = std::exp(x[i] - mx);
    sum += x[i];
  }
  for (int64_t i = 0; i < n; ++i) x[i] /= sum;
}

void EmbeddingLookup(const MatrixView& table, const int32_t* ids, int64_t n, float* out) {
  for (int64_t t = 0; t < n; ++t)
    for (int64_t c = 0; c < table.cols; ++c) out[t * table.cols + c] = LoadWeight(table, ids[t], c);
}

int64_t Argmax(const float* x, int64_t n) {
  int64_t best = 0;
  for (int64_t i = 1; i < n; ++i)
    if (x[i] > x[best]) best = i;
  return best;
}

void WriteKv(const KvLayout& layout, int layer, uint8_t* const* blocks, int64_t start_pos,
             int64_t num_tokens, const float* k, const float* v) {
  if (IsQ4(layout.dtype)) return WriteKvQ4(layout, layer, blocks, start_pos, num_tokens, k, v);
  const int64_t row = static_cast<int64_t>(layout.num_kv_heads) * layout.head_dim;
  for (int64_t t = 0; t < num_tokens; ++t) {
    for (int h = 0; h < layout.num_kv_heads; ++h) {
      StoreRow(layout, blocks, layer, 0, h, start_pos + t, k + t * row + h * layout.head_dim);
      StoreRow(layout, blocks, layer, 1, h, start_pos + t, v + t * row + h * layout.head_dim);
    }
  }
}

float ReadKv(const KvLayout& layout, int layer, int kv, uint8_t* const* blocks, int64_t pos,
             int head, int d) {
  size_t idx;
  float* scale;
  uint8_t* plane = PlanePtr(layout, blocks, layer, kv, head, pos, &idx, &scale);
  switch (layout.dtype) {
    case KvDType::kF32: return reinterpret_cast<float*>(plane)[idx + d];
    case KvDType::kBf16: return Bf16ToF32(reinterpret_cast<bf16_t*>(plane)[idx + d]);
    case KvDType::kInt8: return static_cast<float>(reinterpret_cast<int8_t*>(plane)[idx + d]) * *scale;
    case KvDType::kQ4:
    case KvDType::kQ4r: {  // q4r: the rotated value (PagedAttention rotates q and out)
      const size_t slot = idx / layout.head_dim;
      const uint8_t* codes = plane + slot * layout.RowBytes();
      const auto* scales =
          reinterpret_cast<const f16_t*>(plane + layout.block_size * layout.RowBytes()) +
          slot * (layout.RowScaleBytes() / 2);
      return DequantizeQ4(codes, scales, d);
    }
  }
  return 0.0f;
}

void PagedAttention(const KvLayout& layout, int layer, int num_heads, float scale,
                    std::span<const AttentionSeq> seqs, ThreadPool& pool) {
  const int hd = layout.head_dim;
  const int group = num_heads / layout.num_kv_heads;
  for (const AttentionSeq& s : seqs) {
    pool.ParallelFor(s.num_tokens * num_heads, [&](int64_t task) {
      const int64_t t = task / num_heads;
      const int h = static_cast<int>(task % num_heads);
      const int kvh = h / group;
      const float* q = s.q + (t * num_heads + h) * hd;
      float* out = s.out + (t * num_heads + h) * hd;
      const int64_t ctx = s.start_pos + t + 1;
      // Online softmax over the window's keys in position order.
      float m = -std::numeric_limits<float>::infinity();
      float l = 0.0f;
      std::vector<float> acc(hd, 0.0f);
      for (int64_t p = AttentionWindowStart(ctx - 1, s.window); p < ctx; ++p) {
        float dot = 0.0f;
        for (int d = 0; d < hd; ++d) dot += q[d] * ReadKv(layout, layer, 0, s.blocks, p, kvh, d);
        float score = dot * scale;
        float m_new = std::max(m, score);
        float corr = std::exp(m - m_new);
        float w = std::exp(score - m_new);
        l = l * corr + w;
        for (int d = 0; d < hd; ++d)
          acc[d] = acc[d] * corr + w * ReadKv(layout, layer, 1, s.blocks, p, kvh, d);
        m = m_new;
      }
      for (int d = 0; d < hd; ++d) out[d] = acc[d] / l;
    });
  }
}

}  // namespace kvfork::reference
