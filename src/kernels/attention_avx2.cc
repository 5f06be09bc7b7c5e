// AVX2 + FMA KV writes and paged attention.
//
// WriteKv produces exactly the reference's bytes (int8: the same absmax / 127
// scale, 1 / scale, round to nearest even, clamp to +-127; q4 and q4r are
// written by ops.cc's WriteKvQ4 with this level's row functions, kv_q4_avx2.cc).
//
// PagedAttention: tasks of up to kSpanTiles tiles of 1, 2 or 4 query tokens of
// one sequence and one KV head, each tile's rows being its (token, query head
// of the GQA group) pairs (attention_tiles.h); a task walks the key blocks in
// position order, each block serving every tile. Per block and row it
// computes the scores, then folds the block into the row's running (max, sum,
// acc) with one rescale: the block boundaries are fixed positions (pos /
// block_size) and a query's context length does not depend on the chunking,
// so every output has one reduction order however its sequence is split into
// calls, tiles or threads. Register tiles of 4 rows x 2 keys (scores) and 4
// rows x 2 head_dim vectors (p * V) give 8 independent FMA chains, where one
// row alone was one latency-bound chain (decode on the Zen 3 VM: 5.5 GB/s of
// KV; prefill 8.6% of the FMA peak).
#include <algorithm>
#include <cmath>
#include <cstring>

#include "kernels/attention_avx2_rows.h"
#include "kernels/attention_tiles.h"
#include "kernels/ops_isa.h"
#include "kernels/scratch.h"
#include "kernels/simd_avx2.h"

namespace kvfork::avx2 {
namespace {

constexpr int kMaxBlockSize = kMaxAttentionBlockSize;  // ops.cc checks the layout against it

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
        __m256 q =
            _mm256_round_ps(_mm256_mul_ps(_mm256_maskload_ps(src + d, TailMask(hd - d)), vinv),
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
    case KvDType::kQ4:
    case KvDType::kQ4r:
      break;  // ops.cc writes q4 rows (WriteKvQ4, kv_q4_isa.h)
  }
}

// The next block's plane asked for into L2 a slice at a time while this
// block is worked on: rows [from, to), `share` being the plane's bytes per
// row (a q4 plane's codes and scales alike), from the line holding the
// first byte. No division: one per row took decode at 512 bf16 keys from
// 6.3-7.6 to 9.9-19 ms (Zen 3 VM, 1 thread). Each 16-key bf16 plane of
// head_dim 128 is its own 4 KB page, which the hardware prefetchers do not
// enter before a demand miss. T1, not T0: on a Zen 4 VM with
// KVFORK_CPU_ISA=avx2, 28 layers of decode attention at 512 keys took
// 2.9-3.5 ms against 4.1-4.4 with T0.
inline void AskShare(const uint8_t* plane, size_t share, int from, int to) {
  const size_t end = static_cast<size_t>(to) * share;
  for (size_t o = static_cast<size_t>(from) * share / 64 * 64; o < end; o += 64)
    _mm_prefetch(reinterpret_cast<const char*>(plane + o), _MM_HINT_T1);
}

// One K or V plane's rows [0, n) as f32 rows of `stride` (head_dim rounded up
// to 8) floats, zeros past head_dim; int8 unscaled (its scales are applied to
// the scores and to p). Converted once per block for every tile of a span, so
// the register tiles below only load. pf (not null): the next block's plane,
// asked for a row at a time as these are converted.
template <KvDType D>
void PlaneToF32(const uint8_t* plane, int n, int hd, int stride, const uint8_t* pf, float* out) {
  constexpr size_t kBytes = D == KvDType::kF32 ? 4 : D == KvDType::kBf16 ? 2 : 1;
  const size_t row_bytes = static_cast<size_t>(hd) * kBytes;
  const int full = hd & ~7;
  for (int j = 0; j < n; ++j) {
    const uint8_t* row = plane + j * row_bytes;
    float* o = out + static_cast<size_t>(j) * stride;
    if (pf != nullptr) AskShare(pf, row_bytes, j, j + 1);
    for (int d = 0; d < full; d += 8) {
      if constexpr (D == KvDType::kF32) {
        _mm256_store_ps(o + d, _mm256_loadu_ps(reinterpret_cast<const float*>(row) + d));
      } else if constexpr (D == KvDType::kBf16) {
        _mm256_store_ps(o + d, LoadBf16(reinterpret_cast<const uint16_t*>(row) + d));
      } else {
        const __m128i b = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(row + d));
        _mm256_store_ps(o + d, _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(b)));
      }
    }
    for (int d = full; d < stride; ++d) {  // the tail, then zeros
      float v = 0.0f;
      if (d < hd) {
        if constexpr (D == KvDType::kF32)
          v = reinterpret_cast<const float*>(row)[d];
        else if constexpr (D == KvDType::kBf16)
          v = _mm_cvtss_f32(_mm_castsi128_ps(_mm_cvtsi32_si128(
              static_cast<int>(reinterpret_cast<const uint16_t*>(row)[d]) << 16)));
        else
          v = static_cast<float>(reinterpret_cast<const int8_t*>(row)[d]);
      }
      o[d] = v;
    }
  }
}

// One q4 plane's rows [0, n) (kv_layout.h: codes, then f16 scales) as f32
// rows of `stride` floats: each value (c - 8) * d, exact, so unlike int8 no
// scale is left for the tile. Per 32-dim group, 16 code bytes give the low
// nibbles (dims 0-15) and the high ones (16-31). pf (not null): the next
// block's plane (codes and scales), asked for a row's share at a time.
void Q4PlaneToF32(const uint8_t* plane, int n, int hd, int bs, int stride, const uint8_t* pf,
                  float* out) {
  const size_t row_bytes = static_cast<size_t>(hd) / 2;
  const int groups = hd / kQ4Group;
  const uint16_t* scales = reinterpret_cast<const uint16_t*>(plane + bs * row_bytes);
  const size_t share = row_bytes + groups * 2;  // of the plane, per row
  const __m256i low4 = _mm256_set1_epi32(15);
  for (int j = 0; j < n; ++j) {
    const uint8_t* row = plane + j * row_bytes;
    float* o = out + static_cast<size_t>(j) * stride;
    if (pf != nullptr) AskShare(pf, share, j, j + 1);
    for (int g = 0; g < groups; ++g) {
      // (c - 8) * d as c * d - 8 d in one FMA: both products are exact (4-bit
      // c, f16 d), so the sum is the exact (c - 8) * d, rounded to itself.
      const float d = _cvtsh_ss(scales[j * groups + g]);
      const __m256 vd = _mm256_set1_ps(d), m8d = _mm256_set1_ps(-8.0f * d);
      for (int h = 0; h < 2; ++h) {  // bytes 8h .. 8h + 7: dims 8h + i and 16 + 8h + i
        const __m256i w = _mm256_cvtepu8_epi32(
            _mm_loadl_epi64(reinterpret_cast<const __m128i*>(row + g * 16 + h * 8)));
        const __m256 lo = _mm256_cvtepi32_ps(_mm256_and_si256(w, low4));
        const __m256 hi = _mm256_cvtepi32_ps(_mm256_srli_epi32(w, 4));
        _mm256_storeu_ps(o + g * 32 + h * 8, _mm256_fmadd_ps(lo, vd, m8d));
        _mm256_storeu_ps(o + g * 32 + 16 + h * 8, _mm256_fmadd_ps(hi, vd, m8d));
      }
    }
  }
}

// Lane j of the result = Hsum(d[j]), bitwise: the same pairs added in the
// same order as Hsum (l + 4, then l + 2, then l + 1), eight vectors at a time
// in 14 shuffles and 7 adds where eight Hsum take 48 instructions.
inline __m256 Reduce8(const __m256* d) {
  __m256 a[4];  // a[i]: lanes 0-3 from d[i], 4-7 from d[i + 4], each l + (l + 4)
  for (int i = 0; i < 4; ++i)
    a[i] = _mm256_add_ps(_mm256_permute2f128_ps(d[i], d[i + 4], 0x20),
                         _mm256_permute2f128_ps(d[i], d[i + 4], 0x31));
  // b[i], low half: d[2i]'s two partials (l + 2 pairs), then d[2i + 1]'s;
  // high half: the same of d[2i + 4] and d[2i + 5].
  __m256 b[2];
  for (int i = 0; i < 2; ++i)
    b[i] = _mm256_add_ps(_mm256_shuffle_ps(a[2 * i], a[2 * i + 1], 0x44),
                         _mm256_shuffle_ps(a[2 * i], a[2 * i + 1], 0xee));
  return _mm256_add_ps(_mm256_shuffle_ps(b[0], b[1], 0x88), _mm256_shuffle_ps(b[0], b[1], 0xdd));
}

// The online-softmax state of one tile: Q consecutive query tokens from t0,
// times the G query heads of one KV head, as rows r = token * G + head.
struct Tile {
  float* q;    // [rows, nv * 8], zero-padded
  float* acc;  // [rows, nv * 8]
  float ms[kMaxTileRows];
  float ls[kMaxTileRows];
  int64_t t0;
  int tokens;  // Q
  int group;   // G
};

void TileInit(const KvLayout& l, int num_heads, const AttentionSeq& s, int64_t t0, int kvh,
              int tokens, Tile* tile) {
  const int hd = l.head_dim, group = num_heads / l.num_kv_heads;
  const int nv = (hd + 7) / 8;
  tile->t0 = t0;
  tile->tokens = tokens;
  tile->group = group;
  for (int r = 0; r < tokens * group; ++r) {
    const float* src = s.q + ((t0 + r / group) * num_heads + kvh * group + r % group) * hd;
    for (int v = 0; v < nv; ++v) {
      _mm256_store_ps(tile->q + (r * nv + v) * 8,
                      _mm256_maskload_ps(src + v * 8, TailMask(hd - v * 8)));
      _mm256_store_ps(tile->acc + (r * nv + v) * 8, _mm256_setzero_ps());
    }
    tile->ms[r] = -INFINITY;
    tile->ls[r] = 0.0f;
  }
}

// out[r * 8 + j] for r < RU, j < KU: lane l sums q[r][d] * k[kj[j]][d] over
// the d with d % 8 == l in increasing d, one FMA chain each (q zero-padded
// to `stride`, and k read as zeros past head_dim).
template <int RU, int KU, typename Rows>
inline void Dots(const float* q, const Rows& k, const int* kj, int stride, __m256* out) {
  __m256 acc[RU][KU];
  for (int r = 0; r < RU; ++r)
    for (int j = 0; j < KU; ++j) acc[r][j] = _mm256_setzero_ps();
  int d = 0;
  do {  // stride >= 8: with a test before the first step, GCC kept acc on the stack
    __m256 qv[RU];
    for (int r = 0; r < RU; ++r) {
      qv[r] = _mm256_load_ps(q + r * stride + d);
      InRegister(qv[r]);
    }
    for (int j = 0; j < KU; ++j) {
      __m256 kv = k.Load(kj[j], d);
      InRegister(kv);  // Dots<2, 4> read each key's vector once per row
      for (int r = 0; r < RU; ++r) acc[r][j] = _mm256_fmadd_ps(qv[r], kv, acc[r][j]);
    }
    d += 8;
  } while (d < stride);
  for (int r = 0; r < RU; ++r)
    for (int j = 0; j < KU; ++j) out[r * 8 + j] = acc[r][j];
}

// Dots of `rows` tile rows against the 8 keys kj[0..8): out[r * 8 + j].
// Rows go four at a time (4 x 2 keys: 8 chains, 4 q and 2 k registers), then
// two (2 x 4), then one (1 x 8).
template <typename Rows>
void DotRows(const float* q, int rows, const Rows& k, const int* kj, int stride, __m256* out) {
  int r = 0;
  for (; r + 4 <= rows; r += 4)
    for (int j = 0; j < 8; j += 2) Dots<4, 2>(q + r * stride, k, kj + j, stride, out + r * 8 + j);
  for (; r + 2 <= rows; r += 2)
    for (int j = 0; j < 8; j += 4) Dots<2, 4>(q + r * stride, k, kj + j, stride, out + r * 8 + j);
  if (r < rows) Dots<1, 8>(q + r * stride, k, kj, stride, out + r * 8);
}

// acc[r][d0 .. d0 + 8 VU) = acc * corr[r], then one FMA chain per lane over
// keys j < n in order: + p[r][j] * V[j].
template <int RU, int VU, typename Rows>
inline void Pv(const float* const* p, const float* corr, const Rows& v, int n, int d0,
               float* const* acc) {
  // p as plain float reads (set1, not _mm256_broadcast_ss): with the
  // broadcast intrinsic GCC 12 kept `a` in memory, storing all 8 accumulators
  // every key (perf: Pv took twice the time of Dots for the same FMAs).
  const float* pr[RU];
  for (int r = 0; r < RU; ++r) pr[r] = p[r];
  __m256 a[RU][VU];
  for (int r = 0; r < RU; ++r)
    for (int u = 0; u < VU; ++u)
      a[r][u] = _mm256_mul_ps(_mm256_load_ps(acc[r] + d0 + 8 * u), _mm256_set1_ps(corr[r]));
  int j = 0;
  do {  // n >= 1 (a block is read only for keys before the tile's last context end)
    __m256 pv[RU];
    for (int r = 0; r < RU; ++r) pv[r] = _mm256_set1_ps(pr[r][j]);
    for (int u = 0; u < VU; ++u) {
      __m256 vv = v.Load(j, d0 + 8 * u);
      InRegister(vv);  // as in Dots: Pv<2, 4> read each V vector once per row
      for (int r = 0; r < RU; ++r) a[r][u] = _mm256_fmadd_ps(pv[r], vv, a[r][u]);
    }
  } while (++j < n);
  for (int r = 0; r < RU; ++r)
    for (int u = 0; u < VU; ++u) _mm256_store_ps(acc[r] + d0 + 8 * u, a[r][u]);
}

// Pv over every head_dim vector for RU rows: 8 / RU vectors a pass, so each
// pass keeps 8 accumulators.
template <int RU, typename Rows>
void PvRows(const float* const* p, const float* corr, const Rows& v, int stride, int n,
            float* const* acc) {
  constexpr int VU = 8 / RU;
  const int nv = stride / 8;
  int u = 0;
  for (; u + VU <= nv; u += VU) Pv<RU, VU>(p, corr, v, n, u * 8, acc);
  for (; u < nv; ++u) Pv<RU, 1>(p, corr, v, n, u * 8, acc);
}

// The next block's K and V planes (null: none), asked for 8 rows at a time
// while a span of one tile scores this block, which it reads from the plane
// as stored (Int8Rows): without the conversion's pass over the rows, the
// prefetch goes with the S products. K's and V's lines alternate: asked for
// as two AskShare runs, K's then V's, decode at 2,048 int8 keys took
// 29.0-30.1 ms against 18.2-25.1 (Zen 3 VM, 1 thread, three rounds). One
// AskShare over an array of planes, alternating as this loop does, was as
// slow: 27.5-32.8 ms against this loop's 17.9-22.8 in the same run.
struct NextPlanes {
  const uint8_t* k = nullptr;
  const uint8_t* v = nullptr;
  size_t share = 0;  // bytes of each plane per row
  void Ask(int j0, int bs) const {
    if (k == nullptr) return;
    const int to = j0 + 8 < bs ? j0 + 8 : bs;
    for (size_t o = static_cast<size_t>(j0) * share / 64 * 64; o < to * share; o += 64) {
      _mm_prefetch(reinterpret_cast<const char*>(k + o), _MM_HINT_T1);
      _mm_prefetch(reinterpret_cast<const char*>(v + o), _MM_HINT_T1);
    }
  }
};

// One key block (at position b0, before the tile's last context end) folded
// into the tile; kr, vr: the block's K and V rows (attention_avx2_rows.h), at
// least the tile's; kscale, vscale: int8's per-key scales, else null. Per
// (token, head) row the order is fixed by the keys alone: score of key j =
// Hsum(lanes of q * k accumulated over d) * scale (int8: * the key's scale);
// per block, max, one rescale of (max, sum, acc), then the block's p * V in
// key order. A row whose context ends before the tile's last sees the
// remaining keys masked: its scores there are -inf, so corr is exp(0) = 1 and
// p = 0, and acc * 1 + 0 * v, ls * 1 + 0 and max(m, -inf) leave its state bit
// for bit as if it ran alone.
template <typename Rows>
void TileBlock(const KvLayout& l, float scale, const AttentionSeq& s, int64_t b0, const Rows& kr,
               const Rows& vr, const float* kscale, const float* vscale, const NextPlanes& next,
               Tile* tile) {
  const int bs = l.block_size, group = tile->group;
  const int rows = tile->tokens * group;
  const int stride = (l.head_dim + 7) / 8 * 8;
  const int64_t ctx0 = s.start_pos + tile->t0 + 1;  // context of the tile's first token
  const int64_t ctx_end = ctx0 + tile->tokens - 1;  // and of its last
  const int n = static_cast<int>(ctx_end - b0 < bs ? ctx_end - b0 : bs);  // keys read
  const int n8 = (n + 7) & ~7;
  int valid[kMaxTileRows];  // keys of this block row r may see: [first[r], valid[r])
  int first[kMaxTileRows];
  int seen_by_all_from = 0, seen_by_all_to = n;  // keys every row sees
  for (int r = 0; r < rows; ++r) {
    const int64_t v = ctx0 + r / group - b0;
    valid[r] = static_cast<int>(v < 0 ? 0 : v > n ? n : v);
    const int64_t f = AttentionWindowStart(ctx0 + r / group - 1, s.window) - b0;
    first[r] = static_cast<int>(f < 0 ? 0 : f > n ? n : f);
    seen_by_all_from = std::max(seen_by_all_from, first[r]);
    seen_by_all_to = std::min(seen_by_all_to, valid[r]);
  }

  alignas(32) float scores[kMaxTileRows][kMaxBlockSize + 8];
  const __m256 neg_inf = _mm256_set1_ps(-INFINITY), vscale_all = _mm256_set1_ps(scale);
  for (int j0 = 0; j0 < n; j0 += 8) {
    next.Ask(j0, bs);
    int kj[8];  // keys past n repeat key n - 1 (masked below)
    for (int jj = 0; jj < 8; ++jj) kj[jj] = j0 + jj < n ? j0 + jj : n - 1;
    __m256 dots[kMaxTileRows * 8];
    DotRows(tile->q, rows, kr, kj, stride, dots);
    const __m256 kscales =
        kscale != nullptr ? _mm256_maskload_ps(kscale + j0, TailMask(n - j0)) : _mm256_setzero_ps();
    // Most groups of 8 keys are in every row's context (all but the
    // diagonal block's in a prefill): no mask to build and blend.
    const bool all_see = j0 >= seen_by_all_from && j0 + 8 <= seen_by_all_to;
    for (int r = 0; r < rows; ++r) {
      __m256 sc = _mm256_mul_ps(Reduce8(dots + r * 8), vscale_all);
      if (kscale != nullptr) sc = _mm256_mul_ps(sc, kscales);
      if (!all_see) {
        const __m256 in_ctx = _mm256_castsi256_ps(
            _mm256_andnot_si256(TailMask(first[r] - j0), TailMask(valid[r] - j0)));
        sc = _mm256_blendv_ps(neg_inf, sc, in_ctx);
      }
      _mm256_store_ps(scores[r] + j0, sc);
    }
  }
  // Online softmax per row; -inf scores give p = 0. The rows' corrections
  // and block sums go 8 rows to a vector: Exp is lane-wise, so lane r is
  // ExpScalar(ms - m_sub) bit for bit, and Reduce8 adds as Hsum does.
  alignas(32) float corr[kMaxTileRows];
  alignas(32) float shift[kMaxTileRows];  // ms before this block - m_sub
  __m256 psum[kMaxTileRows];
  for (int r = 0; r < rows; ++r) {
    float* sr = scores[r];
    __m256 bmax = neg_inf;
    for (int j = 0; j < n8; j += 8) bmax = _mm256_max_ps(_mm256_load_ps(sr + j), bmax);
    const float m_new = std::fmax(tile->ms[r], Hmax(bmax));
    // A row that has seen no key yet and sees none here (before its window)
    // subtracts 0: corr = exp(-inf) = 0 and p = 0 keep its state (-inf, 0, 0).
    const float m_sub = m_new == -INFINITY ? 0.0f : m_new;
    shift[r] = tile->ms[r] - m_sub;
    const __m256 vm = _mm256_set1_ps(m_sub);
    __m256 sum = _mm256_setzero_ps();
    for (int j = 0; j < n8; j += 8) {
      __m256 p = Exp(_mm256_sub_ps(_mm256_load_ps(sr + j), vm));
      sum = _mm256_add_ps(sum, p);
      if (vscale != nullptr) p = _mm256_mul_ps(p, _mm256_maskload_ps(vscale + j, TailMask(n - j)));
      _mm256_store_ps(sr + j, p);
    }
    psum[r] = sum;
    tile->ms[r] = m_new;
  }
  for (int r0 = 0; r0 < rows; r0 += 8) {
    const __m256i live = TailMask(rows - r0);
    for (int r = rows; r < r0 + 8; ++r) psum[r] = _mm256_setzero_ps();  // Reduce8 reads 8
    const __m256 c = Exp(_mm256_maskload_ps(shift + r0, live));
    _mm256_store_ps(corr + r0, c);
    const __m256 ls = _mm256_add_ps(_mm256_mul_ps(_mm256_maskload_ps(tile->ls + r0, live), c),
                                    Reduce8(psum + r0));
    _mm256_maskstore_ps(tile->ls + r0, live, ls);
  }
  // acc = acc * corr + the block's p * V, rows four, then two, then one at a time.
  const float* p[kMaxTileRows];
  float* acc[kMaxTileRows];
  for (int r = 0; r < rows; ++r) {
    p[r] = scores[r];
    acc[r] = tile->acc + r * stride;
  }
  int r = 0;
  for (; r + 4 <= rows; r += 4) PvRows<4>(p + r, corr + r, vr, stride, n, acc + r);
  for (; r + 2 <= rows; r += 2) PvRows<2>(p + r, corr + r, vr, stride, n, acc + r);
  if (r < rows) PvRows<1>(p + r, corr + r, vr, stride, n, acc + r);
}

void TileFinish(const KvLayout& l, int num_heads, const AttentionSeq& s, int kvh,
                const Tile& tile) {
  const int hd = l.head_dim, group = tile.group;
  const int nv = (hd + 7) / 8;
  for (int r = 0; r < tile.tokens * group; ++r) {
    float* out = s.out + ((tile.t0 + r / group) * num_heads + kvh * group + r % group) * hd;
    const __m256 vl = _mm256_set1_ps(tile.ls[r]);
    for (int v = 0; v < nv; ++v)
      _mm256_maskstore_ps(out + v * 8, TailMask(hd - v * 8),
                          _mm256_div_ps(_mm256_load_ps(tile.acc + (r * nv + v) * 8), vl));
  }
}

// The tiles of one task against KV head kvh, block by block: each block's K
// and V planes, converted to f32 once, serve every tile of the span. A span
// of one tile reads each block once, as decode does: the next block's K and
// V planes are asked for (AskShare) while this block's are converted, or,
// int8 read as stored (Int8Rows, the same values), while this block's are
// scored.
template <KvDType D>
void AttendSpan(const KvLayout& l, int layer, int num_heads, float scale,
                const AttentionTask& task) {
  const AttentionSeq& s = *task.seq;
  const int tokens = 1 << task.tile;
  const int bs = l.block_size, hd = l.head_dim;
  const bool int8 = D == KvDType::kInt8;
  // A span of one tile reads int8 K and V as stored (below, int8 alone: bf16
  // and q4 read so were no faster, q4 slower, each 8 dims converting their
  // group's scale; docs/kernels.md). Every block it walks is in its window
  // (the walk starts at the window's first block) and before its context's
  // end, so it skips the per-tile test the spans of several tiles make.
  const bool direct = int8 && task.ntiles == 1 && hd % 8 == 0;
  // Scratch: the tile states, then each tile's q and acc rows, then the
  // block's K and V as f32 (none where read as stored).
  const size_t rows = static_cast<size_t>(tokens) * (num_heads / l.num_kv_heads);
  const size_t stride = static_cast<size_t>(hd + 7) / 8 * 8;
  const size_t states = (static_cast<size_t>(task.ntiles) * sizeof(Tile) + 31) / 32 * 32;
  const size_t tile_floats = static_cast<size_t>(task.ntiles) * 2 * rows * stride;
  const size_t plane_floats = direct ? 0 : static_cast<size_t>(bs) * stride;
  auto* mem = static_cast<uint8_t*>(
      ThreadScratch(kScratchTask, states + (tile_floats + 2 * plane_floats) * sizeof(float)));
  Tile* tiles = reinterpret_cast<Tile*>(mem);
  float* tile_mem = reinterpret_cast<float*>(mem + states);
  float* kf = tile_mem + tile_floats;
  float* vf = kf + plane_floats;
  for (int k = 0; k < task.ntiles; ++k) {
    tiles[k].q = tile_mem + (2 * k) * rows * stride;
    tiles[k].acc = tile_mem + (2 * k + 1) * rows * stride;
    TileInit(l, num_heads, s, task.t + int64_t{k} * tokens, task.kvh, tokens, &tiles[k]);
  }
  const int64_t last_ctx_end = s.start_pos + task.t + int64_t{task.ntiles} * tokens;
  // Blocks wholly before the first query's window are seen by no row.
  const int64_t first_key = AttentionWindowStart(s.start_pos + task.t, s.window);
  for (int64_t b0 = first_key / bs * bs; b0 < last_ctx_end; b0 += bs) {
    const uint8_t* block = s.blocks[b0 / bs];
    const int n = static_cast<int>(last_ctx_end - b0 < bs ? last_ctx_end - b0 : bs);
    const int64_t next = b0 + bs;
    const uint8_t* next_block =
        task.ntiles == 1 && next < last_ctx_end ? s.blocks[next / bs] : nullptr;
    const auto plane = [&](const uint8_t* b, int kv) {
      return b + l.PlaneOffset(layer, kv, task.kvh);
    };
    const float* kscale =
        int8 ? reinterpret_cast<const float*>(block + l.ScaleOffset(layer, 0, task.kvh)) : nullptr;
    const float* vscale =
        int8 ? reinterpret_cast<const float*>(block + l.ScaleOffset(layer, 1, task.kvh)) : nullptr;
    if constexpr (D == KvDType::kInt8) {
      if (direct) {
        NextPlanes next_planes;
        if (next_block != nullptr)
          next_planes = {plane(next_block, 0), plane(next_block, 1), l.PlaneBytes() / bs};
        TileBlock(l, scale, s, b0, Int8Rows{plane(block, 0), hd}, Int8Rows{plane(block, 1), hd},
                  kscale, vscale, next_planes, &tiles[0]);
        continue;
      }
    }
    for (int kv = 0; kv < 2; ++kv) {
      const uint8_t* pf = next_block ? plane(next_block, kv) : nullptr;
      if constexpr (D == KvDType::kQ4)
        Q4PlaneToF32(plane(block, kv), n, hd, bs, static_cast<int>(stride), pf, kv ? vf : kf);
      else
        PlaneToF32<D>(plane(block, kv), n, hd, static_cast<int>(stride), pf, kv ? vf : kf);
    }
    const F32Rows kr{kf, static_cast<int>(stride)}, vr{vf, static_cast<int>(stride)};
    for (int k = 0; k < task.ntiles; ++k)
      if (b0 < s.start_pos + tiles[k].t0 + tokens &&
          b0 + bs > AttentionWindowStart(s.start_pos + tiles[k].t0, s.window))
        TileBlock(l, scale, s, b0, kr, vr, kscale, vscale, NextPlanes{}, &tiles[k]);
  }
  for (int k = 0; k < task.ntiles; ++k) TileFinish(l, num_heads, s, task.kvh, tiles[k]);
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
  for (const AttentionSeq& s : seqs) total += s.num_tokens * layout.num_kv_heads;
  if (total == 0) return;
  auto* tasks = static_cast<AttentionTask*>(
      ThreadScratch(kScratchCaller, static_cast<size_t>(total) * sizeof(AttentionTask)));
  const int max_tile = MaxTileTokens(num_heads / layout.num_kv_heads);
  const int64_t n = PlanAttentionTasks(seqs, layout.num_kv_heads, max_tile, tasks);
  // q4r reads as q4: ops.cc rotates its queries and outputs.
  const auto span = layout.dtype == KvDType::kF32    ? AttendSpan<KvDType::kF32>
                    : layout.dtype == KvDType::kBf16 ? AttendSpan<KvDType::kBf16>
                    : IsQ4(layout.dtype)             ? AttendSpan<KvDType::kQ4>
                                                     : AttendSpan<KvDType::kInt8>;
  pool.ParallelFor(n, [&](int64_t i) { span(layout, layer, num_heads, scale, tasks[i]); });
}

}  // namespace kvfork::avx2
