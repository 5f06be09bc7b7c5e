// AVX2 + FMA KV writes and paged attention.
//
// WriteKv produces exactly the reference's bytes (int8: the same absmax / 127
// scale, 1 / scale, round to nearest even, clamp to +-127).
//
// PagedAttention: one task per (sequence, query token, KV head), covering the
// GQA group of query heads that share it; a task walks the key blocks in
// position order. Per block it computes the scores,
// then folds the block into the running (max, sum, acc) with one rescale:
// the block boundaries are fixed positions (pos / block_size) and a query's
// context length does not depend on the chunking, so every output has one
// reduction order however its sequence is split into calls or threads.
#include <cmath>
#include <cstring>

#include "kernels/ops_isa.h"
#include "kernels/scratch.h"
#include "kernels/simd_avx2.h"

namespace kvfork::avx2 {
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
      int d = 0;
      for (; d + 8 <= hd; d += 8) StoreBf16(p + d, F32ToBf16Lanes(_mm256_loadu_ps(src + d)));
      if (d < hd) {
        alignas(16) uint16_t tmp[8];
        StoreBf16(tmp, F32ToBf16Lanes(_mm256_maskload_ps(src + d, TailMask(hd - d))));
        std::memcpy(p + d, tmp, static_cast<size_t>(hd - d) * sizeof(uint16_t));
      }
      break;
    }
    case KvDType::kInt8: {
      const __m256 abs_mask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
      __m256 amax = _mm256_setzero_ps();
      for (int d = 0; d < hd; d += 8) {
        __m256 v = _mm256_and_ps(_mm256_maskload_ps(src + d, TailMask(hd - d)), abs_mask);
        amax = _mm256_max_ps(v, amax);  // a NaN is skipped, as std::max(amax, NaN) does
      }
      const float s = Hmax(amax) / 127.0f;
      const float inv = s > 0.0f ? 1.0f / s : 0.0f;
      const __m256 vinv = _mm256_set1_ps(inv);
      const __m256 lo = _mm256_set1_ps(-127.0f), hi = _mm256_set1_ps(127.0f);
      int8_t* p = reinterpret_cast<int8_t*>(plane) + slot * hd;
      for (int d = 0; d < hd; d += 8) {
        __m256 q = _mm256_round_ps(_mm256_mul_ps(_mm256_maskload_ps(src + d, TailMask(hd - d)), vinv),
                                   _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
        // Operand order as std::min(127, std::max(-127, q)): a NaN q gives -127.
        q = _mm256_min_ps(_mm256_max_ps(q, lo), hi);
        __m256i qi = _mm256_cvtps_epi32(q);
        __m128i w16 = _mm_packs_epi32(_mm256_castsi256_si128(qi), _mm256_extracti128_si256(qi, 1));
        __m128i b8 = _mm_packs_epi16(w16, w16);
        alignas(16) int8_t tmp[16];
        _mm_store_si128(reinterpret_cast<__m128i*>(tmp), b8);
        std::memcpy(p + d, tmp, static_cast<size_t>(hd - d < 8 ? hd - d : 8));
      }
      reinterpret_cast<float*>(block + l.ScaleOffset(layer, kv, head))[slot] = s;
      break;
    }
  }
}

// Loads 8 elements of a K or V row as f32 (int8 unscaled: the scale is applied
// by the caller), `mask` limiting the tail.
inline __m256 LoadKv(KvDType dtype, const uint8_t* row, int d, __m256i mask, int valid) {
  switch (dtype) {
    case KvDType::kF32: return _mm256_maskload_ps(reinterpret_cast<const float*>(row) + d, mask);
    case KvDType::kBf16: {
      const uint16_t* p = reinterpret_cast<const uint16_t*>(row) + d;
      if (valid >= 8) return LoadBf16(p);
      alignas(16) uint16_t tmp[8] = {0, 0, 0, 0, 0, 0, 0, 0};
      std::memcpy(tmp, p, static_cast<size_t>(valid) * sizeof(uint16_t));
      return LoadBf16(tmp);
    }
    case KvDType::kInt8: {
      const int8_t* p = reinterpret_cast<const int8_t*>(row) + d;
      int64_t bits = 0;
      std::memcpy(&bits, p, static_cast<size_t>(valid >= 8 ? 8 : valid));
      return _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_cvtsi64_si128(bits)));
    }
  }
  return _mm256_setzero_ps();
}

struct Task {
  const AttentionSeq* seq;
  int64_t t;
  int kvh;
};

// One query token against one KV head: every query head of the GQA group
// (group = num_heads / num_kv_heads) reads the same K/V block while it is in
// L1. Per head and block: scores, block max, one rescale of (max, sum, acc),
// then the block's weighted V rows in position order.
void AttendGroup(const KvLayout& l, int layer, int num_heads, float scale, const AttentionSeq& s,
                 int64_t t, int kvh) {
  const int hd = l.head_dim, bs = l.block_size;
  const int group = num_heads / l.num_kv_heads;
  const int nvec = (hd + 7) / 8;
  const float* q0 = s.q + (t * num_heads + kvh * group) * hd;  // [group, hd]
  float* out0 = s.out + (t * num_heads + kvh * group) * hd;    // [group, hd]
  const int64_t ctx = s.start_pos + t + 1;
  const size_t row_bytes = static_cast<size_t>(hd) * l.ElementBytes();
  const bool int8 = l.dtype == KvDType::kInt8;

  __m256i masks[kMaxHeadDim / 8];
  for (int v = 0; v < nvec; ++v) masks[v] = TailMask(hd - v * 8);
  alignas(32) float acc[kMaxGroup * kMaxHeadDim];  // [group, nvec * 8]
  for (int i = 0; i < group * nvec * 8; ++i) acc[i] = 0.0f;
  float ms[kMaxGroup], ls[kMaxGroup];
  for (int g = 0; g < group; ++g) {
    ms[g] = -INFINITY;
    ls[g] = 0.0f;
  }
  alignas(32) float scores[kMaxBlockSize + 8];
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
        __m256 dot = _mm256_setzero_ps();
        for (int v = 0; v < nvec; ++v)
          dot = _mm256_fmadd_ps(_mm256_maskload_ps(q + v * 8, masks[v]),
                                LoadKv(l.dtype, krow, v * 8, masks[v], hd - v * 8), dot);
        const float sc = Hsum(dot) * scale;
        scores[j] = int8 ? sc * kscale[j] : sc;
      }
      for (int j = n; j < ((n + 7) & ~7); ++j) scores[j] = -INFINITY;
      __m256 bmax = _mm256_set1_ps(-INFINITY);
      for (int j = 0; j < n; j += 8) bmax = _mm256_max_ps(_mm256_load_ps(scores + j), bmax);
      const float m_new = std::fmax(ms[g], Hmax(bmax));
      const float corr = ExpScalar(ms[g] - m_new);
      const __m256 vm = _mm256_set1_ps(m_new);
      __m256 psum = _mm256_setzero_ps();
      for (int j = 0; j < n; j += 8) {
        __m256 p = Exp(_mm256_sub_ps(_mm256_load_ps(scores + j), vm));  // -inf pads give 0
        psum = _mm256_add_ps(psum, p);
        _mm256_store_ps(scores + j, p);
      }
      ls[g] = ls[g] * corr + Hsum(psum);
      ms[g] = m_new;
      if (int8)
        for (int j = 0; j < n; ++j) scores[j] *= vscale[j];
      const __m256 vcorr = _mm256_set1_ps(corr);
      float* ag = acc + g * nvec * 8;
      for (int v = 0; v < nvec; ++v) {
        __m256 a = _mm256_mul_ps(_mm256_load_ps(ag + v * 8), vcorr);
        const uint8_t* vcol = vplane;
        for (int j = 0; j < n; ++j, vcol += row_bytes)
          a = _mm256_fmadd_ps(_mm256_set1_ps(scores[j]),
                              LoadKv(l.dtype, vcol, v * 8, masks[v], hd - v * 8), a);
        _mm256_store_ps(ag + v * 8, a);
      }
    }
  }
  for (int g = 0; g < group; ++g) {
    const __m256 vl = _mm256_set1_ps(ls[g]);
    for (int v = 0; v < nvec; ++v)
      _mm256_maskstore_ps(out0 + g * hd + v * 8, masks[v],
                          _mm256_div_ps(_mm256_load_ps(acc + (g * nvec + v) * 8), vl));
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
  // Tasks of all sequences in one ParallelFor, so a decode step over many
  // sequences (1 token each) still spreads over the threads.
  int64_t total = 0;
  for (size_t i = 0; i < seqs.size(); ++i) total += seqs[i].num_tokens * layout.num_kv_heads;
  if (total == 0) return;
  Task* tasks = static_cast<Task*>(ThreadScratch(kScratchCaller, static_cast<size_t>(total) * sizeof(Task)));
  int64_t n = 0;
  for (size_t i = 0; i < seqs.size(); ++i)
    for (int64_t t = 0; t < seqs[i].num_tokens; ++t)
      for (int h = 0; h < layout.num_kv_heads; ++h) tasks[n++] = Task{&seqs[i], t, h};
  pool.ParallelFor(total, [&](int64_t i) {
    const Task& task = tasks[i];
    AttendGroup(layout, layer, num_heads, scale, *task.seq, task.t, task.kvh);
  });
}

}  // namespace kvfork::avx2
