// What every avx512 attention kernel shares: a tile's state (Q tokens x G
// query heads against one KV head), the keys of a block a tile sees, the
// scores' reduction and masking, and the online softmax's step per block.
// Included by attention_avx512.cc alone, and its names have internal
// linkage (the anonymous namespace): no function here may be merged with
// another ISA level's (kernels_isa_objects_have_no_weak_symbols).
#pragma once

#include <cmath>
#include <cstring>

#include "kernels/attention_tiles.h"
#include "kernels/ops_isa.h"
#include "kernels/simd_avx512.h"

namespace kvfork::avx512 {
namespace {

constexpr int kMaxHeadDim = kMaxAttentionHeadDim;  // ops.cc checks the layout against these
constexpr int kMaxBlockSize = kMaxAttentionBlockSize;
constexpr int kMaxGroup = kMaxAttentionGroup;  // query heads per KV head

// 16 elements (the first `valid`) of a K or V row as f32; int8 unscaled.
inline __m512 LoadKv(KvDType dtype, const uint8_t* row, int d, int valid) {
  const __mmask16 mask = Mask16(valid);
  switch (dtype) {
    case KvDType::kF32:
      return _mm512_maskz_loadu_ps(mask, reinterpret_cast<const float*>(row) + d);
    case KvDType::kBf16:
      return LoadBf16(reinterpret_cast<const uint16_t*>(row) + d, valid);
    case KvDType::kInt8:
      return _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_maskz_loadu_epi8(mask, row + d)));
    case KvDType::kQ4:
    case KvDType::kQ4r:
      break;  // TileGroupDotQ4
  }
  return _mm512_setzero_ps();
}

// Lane j of the result = the sum of the 16 lanes of d[j], by one fixed tree
// (pairs within 128-bit lanes, then across them): a whole block of 16 keys'
// scores for the cost of about 3 Hsum.
inline __m512 Reduce16(const __m512 d[16]) {
  __m512 s1[8], s2[4];
  for (int i = 0; i < 8; ++i)
    s1[i] = _mm512_add_ps(_mm512_unpacklo_ps(d[2 * i], d[2 * i + 1]),
                          _mm512_unpackhi_ps(d[2 * i], d[2 * i + 1]));
  for (int i = 0; i < 4; ++i) {
    const __m512d a = _mm512_castps_pd(s1[2 * i]), b = _mm512_castps_pd(s1[2 * i + 1]);
    s2[i] = _mm512_add_ps(_mm512_castpd_ps(_mm512_unpacklo_pd(a, b)),
                          _mm512_castpd_ps(_mm512_unpackhi_pd(a, b)));
  }
  const __m512 v0 = _mm512_add_ps(_mm512_shuffle_f32x4(s2[0], s2[1], 0x88),
                                  _mm512_shuffle_f32x4(s2[0], s2[1], 0xdd));
  const __m512 v1 = _mm512_add_ps(_mm512_shuffle_f32x4(s2[2], s2[3], 0x88),
                                  _mm512_shuffle_f32x4(s2[2], s2[3], 0xdd));
  return _mm512_add_ps(_mm512_shuffle_f32x4(v0, v1, 0x88), _mm512_shuffle_f32x4(v0, v1, 0xdd));
}

// Keys per online-softmax step of the dot kernels (TileGroupDot): a group
// of whole blocks at fixed positions, [g0, g0 + w) with g0 a multiple of
// w = SoftmaxGroupWidth(block_size), at least kSoftmaxKeys keys (one block
// where blocks are larger). The step's fixed costs (the max and sum
// reductions, the correction's exp, the accumulators' load, scaling and
// store) were paid every 16 keys with blocks of 16; once per 128 keys, bf16
// prefill attention at 2,048 keys took 77-79 against 106-111 ms in one
// thread (Zen 5; 64 keys: 82-90). Groups are fixed by positions alone, so
// a row's bits still depend on nothing but its own keys (decode row =
// prefill row).
constexpr int kSoftmaxKeys = 128;
constexpr int kMaxGroupBlocks = kSoftmaxKeys;  // blocks of one key each
inline int SoftmaxGroupWidth(int block_size) {
  return (kSoftmaxKeys + block_size - 1) / block_size * block_size;
}

// Query tokens per tile (attention_tiles.h): Q * G accumulator chains.
template <int G>
constexpr int kMaxTile = MaxTileTokens(G);

// Accumulator vectors a P·V pass keeps per row for `rows` rows: the largest
// of 8, 4, 2, 1 that keeps rows * u under 2 * chains, so the pass has about
// `chains` independent chains (enough to hide the latency) and never runs
// out of the 32 registers.
constexpr int PassUnroll(int rows, int chains) {
  int u = 8;
  while (u > 1 && rows * u >= 2 * chains) u /= 2;
  return u;
}

// V columns accumulated per pass of the f32 kernel: Q * G * VU FMA chains.
template <int G, int Q>
constexpr int kVecUnroll = PassUnroll(G * Q, 8);
static_assert(kVecUnroll<1, 1> == 8 && kVecUnroll<2, 1> == 4 && kVecUnroll<1, 4> == 2 &&
              kVecUnroll<2, 4> == 1 && kVecUnroll<16, 1> == 1);

// Query tokens [t0, t0 + Q) of one sequence against one KV head, for the G
// query heads of its GQA group (see attention_avx2.cc): the online-softmax
// state of the tile. Every K and V row is loaded and widened once for the
// whole tile. Per (token, head) the order is fixed by the keys alone: score
// of key j = (lanes of q * k accumulated over d in 16-lane steps, then
// Reduce16) * scale; keys in blocks of block_size in position order with an
// online softmax; acc = acc * corr, then one FMA chain over the block's keys
// in order. A token whose context ends before the tile's last token sees the
// remaining keys masked: its scores there are -inf, so corr is exp(0) = 1 and
// p = 0, and acc * 1 + 0 * v, ls * 1 + 0 and max(m, -inf) leave its state bit
// for bit as if it ran alone: nothing depends on which tokens or heads share
// the task.
template <int G, int Q>
struct Tile {
  alignas(64) float q[Q * G * kMaxHeadDim];    // [Q, G, nvec * 16], zero-padded
  alignas(64) float acc[Q * G * kMaxHeadDim];  // [Q, G, nvec * 16]
  // bf16, int8, q4 and q4r KV (TileGroupDot, TileGroupDotQ4): q rounded to
  // bf16, [Q, G, chunks * 32], zero-padded; acc then holds each 32-dim chunk
  // as the two vectors of DotUnpermute's order (q4: in dim order).
  alignas(64) uint16_t q_hi[Q * G * kMaxHeadDim];
  float ms[Q * G];
  float ls[Q * G];
  int64_t t0;
};

template <int G, int Q>
void TileInit(const KvLayout& l, int num_heads, const AttentionSeq& s, int64_t t0, int kvh,
              Tile<G, Q>* tile) {
  const int hd = l.head_dim;
  const int nvec = (hd + 15) / 16;
  tile->t0 = t0;
  for (int i = 0; i < Q * G; ++i) {
    const float* src = s.q + ((t0 + i / G) * num_heads + kvh * G + i % G) * hd;
    for (int v = 0; v < nvec; ++v) {
      _mm512_store_ps(tile->q + (i * nvec + v) * 16,
                      _mm512_maskz_loadu_ps(Mask16(hd - v * 16), src + v * 16));
      _mm512_store_ps(tile->acc + (i * nvec + v) * 16, _mm512_setzero_ps());
    }
    tile->ms[i] = -INFINITY;
    tile->ls[i] = 0.0f;
  }
}

// Which keys of the block at b0 a tile's tokens see: n keys are read (the
// block's, or up to the tile's last context), token i sees [first[i], valid[i]).
template <int Q>
struct BlockKeys {
  int n;
  int n16;  // n rounded up to whole 16-key vectors
  int valid[Q];
  int first[Q];
};

template <int Q>
BlockKeys<Q> KeysOfBlock(const AttentionSeq& s, int64_t t0, int64_t b0, int bs) {
  const int64_t ctx0 = s.start_pos + t0 + 1;  // context of the tile's first token
  const int64_t ctx_end = ctx0 + Q - 1;       // and of its last
  BlockKeys<Q> k;
  k.n = static_cast<int>(ctx_end - b0 < bs ? ctx_end - b0 : bs);
  k.n16 = (k.n + 15) & ~15;
  for (int i = 0; i < Q; ++i) {
    const int64_t v = ctx0 + i - b0;
    k.valid[i] = static_cast<int>(v < 0 ? 0 : v > k.n ? k.n : v);
    const int64_t f = AttentionWindowStart(ctx0 + i - 1, s.window) - b0;
    k.first[i] = static_cast<int>(f < 0 ? 0 : f > k.n ? k.n : f);
  }
  return k;
}

// Keys [j0, j0 + 16)'s scores of row i from their sums (lane j: key j0 +
// j's dot product with the row's q): scaled and -inf where the row does
// not see the key. int8: kscale_lanes holds K's row scales of these keys
// (KScaleLanes). j0 need not be a multiple of 16 (a softmax group of
// odd-sized blocks): lanes past the keys read are masked or overwritten by
// the next block's scores.
template <int G, int Q, bool kInt8>
inline void StoreScoreRow(int i, __m512 sums, const BlockKeys<Q>& keys, int j0, float scale,
                          __m512 kscale_lanes, float (&scores)[Q * G][kMaxBlockSize + 16]) {
  const int left = keys.valid[i / G] - j0, before = keys.first[i / G] - j0;
  const __mmask16 mask =
      static_cast<__mmask16>(Mask16(left > 0 ? left : 0) & ~Mask16(before > 0 ? before : 0));
  __m512 sc = _mm512_mul_ps(sums, _mm512_set1_ps(scale));
  if constexpr (kInt8) sc = _mm512_mul_ps(sc, kscale_lanes);
  _mm512_storeu_ps(scores[i] + j0, _mm512_mask_blend_ps(mask, _mm512_set1_ps(-INFINITY), sc));
}

// int8 KV's K row scales of the kscale_keys keys from kscale (zero past them).
inline __m512 KScaleLanes(const float* kscale, int kscale_keys) {
  return kscale != nullptr ? _mm512_maskz_loadu_ps(Mask16(kscale_keys), kscale)
                           : _mm512_setzero_ps();
}

// Keys [j0, j0 + 16)'s scores of every row from their 16 dot vectors
// (StoreScoreRow of each row's Reduce16). kscale: int8's K row scales of
// these keys, kscale_keys of them real (null for the other formats).
template <int G, int Q>
void StoreScores(const __m512 (&dots)[Q * G][16], const BlockKeys<Q>& keys, int j0, float scale,
                 const float* kscale, int kscale_keys,
                 float (&scores)[Q * G][kMaxBlockSize + 16]) {
  const __m512 kscale_lanes = KScaleLanes(kscale, kscale_keys);
  for (int i = 0; i < Q * G; ++i) {
    if (kscale != nullptr) {
      StoreScoreRow<G, Q, true>(i, Reduce16(dots[i]), keys, j0, scale, kscale_lanes, scores);
    } else {
      StoreScoreRow<G, Q, false>(i, Reduce16(dots[i]), keys, j0, scale, kscale_lanes, scores);
    }
  }
}

// Scores [n, n16) of every row set to -inf: a softmax group's last block
// need not end its 16-key vectors where the group's do.
template <int R>
inline void MaskScoresTail(float (*scores)[kMaxBlockSize + 16], int n) {
  const int tail = n & 15;
  if (tail == 0) return;
  for (int i = 0; i < R; ++i)
    _mm512_mask_storeu_ps(scores[i] + (n - tail), static_cast<__mmask16>(~Mask16(tail)),
                          _mm512_set1_ps(-INFINITY));
}

// The online softmax's step for one row over a block's scores: its new
// running max, the value subtracted from the scores, and the factor its
// earlier sums are scaled by.
struct SoftmaxStep {
  float m_new;
  float m_sub;
  float corr;
};

inline SoftmaxStep SoftmaxStepOf(float m_old, const float* scores, int n16) {
  __m512 bmax = _mm512_set1_ps(-INFINITY);
  for (int j = 0; j < n16; j += 16) bmax = _mm512_max_ps(_mm512_load_ps(scores + j), bmax);
  SoftmaxStep st;
  st.m_new = std::fmax(m_old, Hmax(bmax));
  // A row that has seen no key yet and sees none here (before its window)
  // subtracts 0: corr = exp(-inf) = 0 and p = 0 keep its state (-inf, 0, 0).
  st.m_sub = st.m_new == -INFINITY ? 0.0f : st.m_new;
  st.corr = ExpScalar(m_old - st.m_sub);
  return st;
}

// The block's online-softmax step for each of a tile's R rows: p = exp(score
// - m) over the row's n16 scores (-inf gives 0); weigh(i, j, p) stores the 16
// weights from key j on that the kernel's P·V uses and returns what l sums;
// then l = l * corr + that sum, m is the new max, and vcorr[i] is the factor
// the row's accumulators take before this block's keys.
template <int R, typename Weigh>
inline void SoftmaxRows(float (*scores)[kMaxBlockSize + 16], int n16, float* ms, float* ls,
                        __m512 (&vcorr)[R], Weigh&& weigh) {
  for (int i = 0; i < R; ++i) {
    const SoftmaxStep st = SoftmaxStepOf(ms[i], scores[i], n16);
    const __m512 vm = _mm512_set1_ps(st.m_sub);
    __m512 psum = _mm512_setzero_ps();
    for (int j = 0; j < n16; j += 16)
      psum =
          _mm512_add_ps(psum, weigh(i, j, Exp(_mm512_sub_ps(_mm512_load_ps(scores[i] + j), vm))));
    ls[i] = ls[i] * st.corr + Hsum(psum);
    ms[i] = st.m_new;
    vcorr[i] = _mm512_set1_ps(st.corr);
  }
}

// A dot kernel's P·V pass's accumulators: vectors [w0, w0 + U) of each of
// the R rows (nacc vectors a row; those past nacc are left alone), loaded
// times the row's softmax correction, and stored back once the block's keys
// are in. (The f32 kernel keeps its own copy of these loops: through these
// helpers its prefill attention measured ~45% slower, 234-273 against
// 156-175 ms at 2,048 keys in one thread, its code laid out differently.)
template <int R, int U>
inline void LoadScaledAcc(const float* acc, int nacc, int w0, const __m512 (&vcorr)[R],
                          __m512 (&a)[R][U]) {
  for (int i = 0; i < R; ++i)
    for (int u = 0; u < U; ++u)
      if (w0 + u < nacc)
        a[i][u] = _mm512_mul_ps(_mm512_load_ps(acc + (i * nacc + w0 + u) * 16), vcorr[i]);
}

template <int R, int U>
inline void StoreAcc(float* acc, int nacc, int w0, const __m512 (&a)[R][U]) {
  for (int i = 0; i < R; ++i)
    for (int u = 0; u < U; ++u)
      if (w0 + u < nacc) _mm512_store_ps(acc + (i * nacc + w0 + u) * 16, a[i][u]);
}

// One KV head's K and V planes in the block a tile reads, and in the block
// read after it (null where next_block is: there is none to fetch).
struct HeadPlanes {
  const uint8_t* k;
  const uint8_t* v;
  const uint8_t* next_k;
  const uint8_t* next_v;
};

// flatten: as Int8ScalesOf.
[[gnu::flatten]] inline HeadPlanes HeadPlanesOf(const KvLayout& l, const uint8_t* block, const uint8_t* next_block,
                               int layer, int kvh) {
  return {block + l.PlaneOffset(layer, 0, kvh), block + l.PlaneOffset(layer, 1, kvh),
          next_block != nullptr ? next_block + l.PlaneOffset(layer, 0, kvh) : nullptr,
          next_block != nullptr ? next_block + l.PlaneOffset(layer, 1, kvh) : nullptr};
}

// int8 KV's row scales of one KV head's K (kv 0) or V (kv 1) plane; null
// for the other formats. flatten: KvLayout's inline members are compiled
// into this local function, never left as weak copies built for AVX-512
// (kernels_isa_objects_have_no_weak_symbols; GCC stopped inlining them
// into the group kernels).
[[gnu::flatten]] inline const float* Int8ScalesOf(const KvLayout& l, const uint8_t* block, int layer, int kv,
                                 int kvh) {
  return l.dtype == KvDType::kInt8
             ? reinterpret_cast<const float*>(block + l.ScaleOffset(layer, kv, kvh))
             : nullptr;
}

// The block a decode-like tile asks for while it scores the block at b0:
// kPrefetchBlocks ahead, null past the tile's last context (ctx_end). Three,
// not the next one: a group's S products run block after block with no P·V
// between them, so the next block's K was still in flight when it was read
// (28 layers of decode attention at 2,048 keys over q4 KV, Zen 5: one block
// ahead 5.2-5.6 ms, two 4.8-4.9, three 4.4-4.9, four 4.9-5.7, six 5.1-6.3;
// bf16 11.4-12.5 ms with any of them).
constexpr int kPrefetchBlocks = 3;
inline const uint8_t* BlockToPrefetch(const AttentionSeq& s, int64_t b0, int bs, int64_t ctx_end) {
  const int64_t b = b0 + int64_t{kPrefetchBlocks} * bs;
  return b < ctx_end ? s.blocks[b / bs] : nullptr;
}

// Asks for bytes [from, to) of a block's K and V planes ahead of use, a
// key's share at a time while this block is scored: into L1 (T0) or into L2
// (T1). Which is faster depends on the kernel around it (why T1: TileBlock;
// why T0: TileGroupDot).
template <bool kIntoL1>
inline void PrefetchPlanes(const uint8_t* next_k, const uint8_t* next_v, size_t from, size_t to) {
  for (size_t o = from; o < to; o += 64) {
    const char* k = reinterpret_cast<const char*>(next_k + o);
    const char* v = reinterpret_cast<const char*>(next_v + o);
    if constexpr (kIntoL1) {
      _mm_prefetch(k, _MM_HINT_T0);
      _mm_prefetch(v, _MM_HINT_T0);
    } else {
      _mm_prefetch(k, _MM_HINT_T1);
      _mm_prefetch(v, _MM_HINT_T1);
    }
  }
}

}  // namespace
}  // namespace kvfork::avx512
