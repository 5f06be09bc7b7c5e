// AVX-512 KV writes and paged attention: the AVX2 file's algorithms at 16
// lanes (see attention_avx2.cc for why the order is chunking-invariant).
// GCC 12's AVX-512 intrinsic headers build some results from _mm512_undefined_*
// and then warn about them (a known false positive).
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

#include <cmath>
#include <cstring>

#include "kernels/ops_isa.h"
#include "kernels/scratch.h"
#include "kernels/simd_avx512.h"

namespace kvfork::avx512 {
namespace {

constexpr int kMaxHeadDim = 512;     // ops.cc checks the layout against these
constexpr int kMaxBlockSize = 1024;
constexpr int kMaxGroup = 16;  // query heads per KV head

void StoreRow(const KvLayout& l, uint8_t* block, int layer, int kv, int head, int64_t slot,
              const float* src) {
  const int hd = l.head_dim;
  uint8_t* plane = block + l.PlaneOffset(layer, kv, head);
  switch (l.dtype) {
    case KvDType::kF32:
      std::memcpy(reinterpret_cast<float*>(plane) + slot * hd, src,
                  static_cast<size_t>(hd) * sizeof(float));
      break;
    case KvDType::kBf16: {
      uint16_t* p = reinterpret_cast<uint16_t*>(plane) + slot * hd;
      for (int d = 0; d < hd; d += 16)
        StoreBf16(p + d, F32ToBf16Lanes(_mm512_maskz_loadu_ps(Mask16(hd - d), src + d)), hd - d);
      break;
    }
    case KvDType::kInt8: {
      const __m512 abs_mask = _mm512_castsi512_ps(_mm512_set1_epi32(0x7fffffff));
      __m512 amax = _mm512_setzero_ps();
      for (int d = 0; d < hd; d += 16) {
        __m512 v = _mm512_and_ps(_mm512_maskz_loadu_ps(Mask16(hd - d), src + d), abs_mask);
        amax = _mm512_max_ps(v, amax);  // a NaN is skipped, as std::max(amax, NaN) does
      }
      const float s = Hmax(amax) / 127.0f;
      const __m512 vinv = _mm512_set1_ps(s > 0.0f ? 1.0f / s : 0.0f);
      const __m512 lo = _mm512_set1_ps(-127.0f), hi = _mm512_set1_ps(127.0f);
      int8_t* p = reinterpret_cast<int8_t*>(plane) + slot * hd;
      for (int d = 0; d < hd; d += 16) {
        const __mmask16 mask = Mask16(hd - d);
        __m512 q = _mm512_roundscale_ps(_mm512_mul_ps(_mm512_maskz_loadu_ps(mask, src + d), vinv),
                                        _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
        q = _mm512_min_ps(_mm512_max_ps(q, lo), hi);  // NaN -> -127, as the reference
        _mm512_mask_cvtepi32_storeu_epi8(p + d, mask, _mm512_cvtps_epi32(q));
      }
      reinterpret_cast<float*>(block + l.ScaleOffset(layer, kv, head))[slot] = s;
      break;
    }
  }
}

// 16 elements (the first `valid`) of a K or V row as f32; int8 unscaled.
inline __m512 LoadKv(KvDType dtype, const uint8_t* row, int d, int valid) {
  const __mmask16 mask = Mask16(valid);
  switch (dtype) {
    case KvDType::kF32: return _mm512_maskz_loadu_ps(mask, reinterpret_cast<const float*>(row) + d);
    case KvDType::kBf16: return LoadBf16(reinterpret_cast<const uint16_t*>(row) + d, valid);
    case KvDType::kInt8:
      return _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_maskz_loadu_epi8(mask, row + d)));
  }
  return _mm512_setzero_ps();
}

struct Task {
  const AttentionSeq* seq;
  int64_t t;
  int kvh;
};

// One query token against one KV head, for every query head of its GQA group
// (see attention_avx2.cc).
void AttendGroup(const KvLayout& l, int layer, int num_heads, float scale, const AttentionSeq& s,
                 int64_t t, int kvh) {
  const int hd = l.head_dim, bs = l.block_size;
  const int group = num_heads / l.num_kv_heads;
  const int nvec = (hd + 15) / 16;
  const float* q0 = s.q + (t * num_heads + kvh * group) * hd;  // [group, hd]
  float* out0 = s.out + (t * num_heads + kvh * group) * hd;    // [group, hd]
  const int64_t ctx = s.start_pos + t + 1;
  const size_t row_bytes = static_cast<size_t>(hd) * l.ElementBytes();
  const bool int8 = l.dtype == KvDType::kInt8;

  alignas(64) float acc[kMaxGroup * kMaxHeadDim];  // [group, nvec * 16]
  for (int i = 0; i < group * nvec * 16; ++i) acc[i] = 0.0f;
  float ms[kMaxGroup], ls[kMaxGroup];
  for (int g = 0; g < group; ++g) {
    ms[g] = -INFINITY;
    ls[g] = 0.0f;
  }
  alignas(64) float scores[kMaxBlockSize + 16];
  for (int64_t b0 = 0; b0 < ctx; b0 += bs) {
    const uint8_t* block = s.blocks[b0 / bs];
    const int n = static_cast<int>(ctx - b0 < bs ? ctx - b0 : bs);
    const uint8_t* kplane = block + l.PlaneOffset(layer, 0, kvh);
    const uint8_t* vplane = block + l.PlaneOffset(layer, 1, kvh);
    const float* kscale =
        int8 ? reinterpret_cast<const float*>(block + l.ScaleOffset(layer, 0, kvh)) : nullptr;
    const float* vscale =
        int8 ? reinterpret_cast<const float*>(block + l.ScaleOffset(layer, 1, kvh)) : nullptr;
    for (int g = 0; g < group; ++g) {
      const float* q = q0 + g * hd;
      for (int j = 0; j < n; ++j) {
        const uint8_t* krow = kplane + j * row_bytes;
        __m512 dot = _mm512_setzero_ps();
        for (int v = 0; v < nvec; ++v)
          dot = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(Mask16(hd - v * 16), q + v * 16),
                                LoadKv(l.dtype, krow, v * 16, hd - v * 16), dot);
        const float sc = Hsum(dot) * scale;
        scores[j] = int8 ? sc * kscale[j] : sc;
      }
      for (int j = n; j < ((n + 15) & ~15); ++j) scores[j] = -INFINITY;
      __m512 bmax = _mm512_set1_ps(-INFINITY);
      for (int j = 0; j < n; j += 16) bmax = _mm512_max_ps(_mm512_load_ps(scores + j), bmax);
      const float m_new = std::fmax(ms[g], Hmax(bmax));
      const float corr = ExpScalar(ms[g] - m_new);
      const __m512 vm = _mm512_set1_ps(m_new);
      __m512 psum = _mm512_setzero_ps();
      for (int j = 0; j < n; j += 16) {
        __m512 p = Exp(_mm512_sub_ps(_mm512_load_ps(scores + j), vm));  // -inf pads give 0
        psum = _mm512_add_ps(psum, p);
        _mm512_store_ps(scores + j, p);
      }
      ls[g] = ls[g] * corr + Hsum(psum);
      ms[g] = m_new;
      if (int8)
        for (int j = 0; j < n; ++j) scores[j] *= vscale[j];
      const __m512 vcorr = _mm512_set1_ps(corr);
      float* ag = acc + g * nvec * 16;
      for (int v = 0; v < nvec; ++v) {
        __m512 a = _mm512_mul_ps(_mm512_load_ps(ag + v * 16), vcorr);
        const uint8_t* vcol = vplane;
        for (int j = 0; j < n; ++j, vcol += row_bytes)
          a = _mm512_fmadd_ps(_mm512_set1_ps(scores[j]), LoadKv(l.dtype, vcol, v * 16, hd - v * 16),
                              a);
        _mm512_store_ps(ag + v * 16, a);
      }
    }
  }
  for (int g = 0; g < group; ++g) {
    const __m512 vl = _mm512_set1_ps(ls[g]);
    for (int v = 0; v < nvec; ++v)
      _mm512_mask_storeu_ps(out0 + g * hd + v * 16, Mask16(hd - v * 16),
                            _mm512_div_ps(_mm512_load_ps(acc + (g * nvec + v) * 16), vl));
  }
}

}  // namespace

void WriteKv(const KvLayout& layout, int layer, uint8_t* const* blocks, int64_t start_pos,
             int64_t num_tokens, const float* k, const float* v) {
  const int64_t row = static_cast<int64_t>(layout.num_kv_heads) * layout.head_dim;
  for (int64_t t = 0; t < num_tokens; ++t) {
    const int64_t pos = start_pos + t;
    uint8_t* block = blocks[pos / layout.block_size];
    const int64_t slot = pos % layout.block_size;
    for (int h = 0; h < layout.num_kv_heads; ++h) {
      StoreRow(layout, block, layer, 0, h, slot, k + t * row + h * layout.head_dim);
      StoreRow(layout, block, layer, 1, h, slot, v + t * row + h * layout.head_dim);
    }
  }
}

void PagedAttention(const KvLayout& layout, int layer, int num_heads, float scale,
                    std::span<const AttentionSeq> seqs, ThreadPool& pool) {
  int64_t total = 0;
  for (size_t i = 0; i < seqs.size(); ++i) total += seqs[i].num_tokens * layout.num_kv_heads;
  if (total == 0) return;
  Task* tasks =
      static_cast<Task*>(ThreadScratch(kScratchCaller, static_cast<size_t>(total) * sizeof(Task)));
  int64_t n = 0;
  for (size_t i = 0; i < seqs.size(); ++i)
    for (int64_t t = 0; t < seqs[i].num_tokens; ++t)
      for (int h = 0; h < layout.num_kv_heads; ++h) tasks[n++] = Task{&seqs[i], t, h};
  pool.ParallelFor(total, [&](int64_t i) {
    const Task& task = tasks[i];
    AttendGroup(layout, layer, num_heads, scale, *task.seq, task.t, task.kvh);
  });
}

}  // namespace kvfork::avx512
