// K as the avx512 dot kernel (attention_avx512_dot.h) scores it: a row's
// 32-dim chunks as bf16 (DotChunk), and for spans of several tiles, a
// softmax group's K transposed once (KeysT) and scored with the keys in the
// lanes (LaneScores), in the row path's order to the bit.
// Included by attention_avx512_dot.h alone, and its names have internal
// linkage (the anonymous namespace): no function here may be merged with
// another ISA level's (kernels_isa_objects_have_no_weak_symbols).
#pragma once

#include "kernels/attention_avx512_tile.h"

namespace kvfork::avx512 {
namespace {

// Chunk c of a K or V row as 32 bf16 (kInt8: its codes converted), the
// dims past head_dim masked to 0 (mask: the chunk's real dims).
template <bool kInt8>
inline __m512i DotChunk(const uint8_t* row, int c, __mmask32 mask) {
  if constexpr (kInt8) {
    const __m256i b = _mm256_maskz_loadu_epi8(mask, row + c * 32);
    const __m512 lo = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm256_castsi256_si128(b)));
    const __m512 hi = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm256_extracti128_si256(b, 1)));
    return reinterpret_cast<__m512i>(_mm512_cvtne2ps_pbh(hi, lo));
  } else {
    return _mm512_maskz_loadu_epi16(mask, reinterpret_cast<const uint16_t*>(row) + c * 32);
  }
}

// ---- S with the keys in the lanes (prefill spans) -------------------------
//
// Reduce16 sums a key's 16 lanes of partial dots by a shuffle tree: ~45
// shuffles and adds a row per 16 keys beside its 64 dot instructions. A span
// of several tiles reads each softmax group's K once per tile, so it pays
// once to transpose the group's K (KeysT) and then scores 16 keys per
// vector: lane j of chain (c, l) is key j's pair l of chunk c, met by q's
// pair l broadcast. The lane sums are added in Reduce16's tree order, as
// vertical adds, so every score keeps its bits: (x0 + x2) + (x1 + x3) per
// quad of l, then (Q0 + Q1) + (Q2 + Q3); each x_l is the chunks' chain of
// vdpbf16ps from zero, as a row's lane l in the row path. Decode (one tile)
// keeps the row path: a transpose would cost it more than Reduce16 does.

// The K vectors of one 16-key vector of a group in KeysT: chunk c's pair l
// at [c * 16 + l], lane j = key j.
inline int KeysTVectors(int head_dim) { return (head_dim + 31) / 32 * 16; }

// Rows r[0..15] (16 dwords each) transposed into t: lane j of t[l] is
// dword l of r[j].
inline void Transpose16(const __m512i (&r)[16], __m512i* t) {
  __m512i a[16], b[16];
  for (int k = 0; k < 8; ++k) {
    a[2 * k] = _mm512_unpacklo_epi32(r[2 * k], r[2 * k + 1]);
    a[2 * k + 1] = _mm512_unpackhi_epi32(r[2 * k], r[2 * k + 1]);
  }
  // b[4k + m], 128-bit lane L: rows 4k..4k+3, dword 4L + m.
  for (int k = 0; k < 4; ++k) {
    b[4 * k] = _mm512_unpacklo_epi64(a[4 * k], a[4 * k + 2]);
    b[4 * k + 1] = _mm512_unpackhi_epi64(a[4 * k], a[4 * k + 2]);
    b[4 * k + 2] = _mm512_unpacklo_epi64(a[4 * k + 1], a[4 * k + 3]);
    b[4 * k + 3] = _mm512_unpackhi_epi64(a[4 * k + 1], a[4 * k + 3]);
  }
  for (int m = 0; m < 4; ++m) {
    const __m512i v0 = _mm512_shuffle_i32x4(b[m], b[4 + m], 0x88);
    const __m512i v1 = _mm512_shuffle_i32x4(b[m], b[4 + m], 0xdd);
    const __m512i w0 = _mm512_shuffle_i32x4(b[8 + m], b[12 + m], 0x88);
    const __m512i w1 = _mm512_shuffle_i32x4(b[8 + m], b[12 + m], 0xdd);
    t[m] = _mm512_shuffle_i32x4(v0, w0, 0x88);
    t[m + 8] = _mm512_shuffle_i32x4(v0, w0, 0xdd);
    t[m + 4] = _mm512_shuffle_i32x4(v1, w1, 0x88);
    t[m + 12] = _mm512_shuffle_i32x4(v1, w1, 0xdd);
  }
}

// The first n keys of the group at g0 (block_size a multiple of 16), K as
// the dot kernel reads it (DotChunk), transposed 16 keys at a time into kt
// (KeysTVectors per 16 keys); keys past n read as 0.
template <bool kInt8>
void KeysT(const KvLayout& l, const AttentionSeq& s, int layer, int kvh, int64_t g0, int n,
           __m512i* kt) {
  const int hd = l.head_dim, bs = l.block_size;
  const int chunks = (hd + 31) / 32;
  const size_t row_bytes = l.RowBytes();
  for (int j0 = 0; j0 < n; j0 += 16) {
    const int64_t b0 = g0 + j0;
    const uint8_t* kplane = s.blocks[b0 / bs] + l.PlaneOffset(layer, 0, kvh);
    const uint8_t* first = kplane + (b0 % bs) * row_bytes;
    const int kc = n - j0 < 16 ? n - j0 : 16;
    for (int c = 0; c < chunks; ++c) {
      const __mmask32 mask = Mask32(hd - c * 32);
      __m512i r[16];
      for (int j = 0; j < 16; ++j)
        r[j] = DotChunk<kInt8>(first + j * row_bytes, c, j < kc ? mask : 0);
      Transpose16(r, kt + (j0 / 16) * KeysTVectors(hd) + c * 16);
    }
  }
}

// The sums of RB rows from i0 for the 16 keys of kt (KeysT), in Reduce16's
// order (dims past head_dim are 0 in q_hi and in kt).
template <int RB>
inline void LaneSums(const __m512i* kt, const uint16_t* q_hi, int chunks, int i0,
                     __m512 (&sums)[RB]) {
  const auto* qd = reinterpret_cast<const int*>(q_hi);  // row i chunk c pair l: (i * chunks + c) * 16 + l
  __m512 half[RB];
  for (int k = 0; k < 4; ++k) {  // quads of l: 128-bit lanes of the row path
    __m512 x[RB][4];
    for (int i = 0; i < RB; ++i)
      for (int m = 0; m < 4; ++m) x[i][m] = _mm512_setzero_ps();
    for (int c = 0; c < chunks; ++c) {
      for (int m = 0; m < 4; ++m) {
        const __m512bh kv = reinterpret_cast<__m512bh>(_mm512_load_si512(kt + c * 16 + 4 * k + m));
        for (int i = 0; i < RB; ++i) {
          const __m512bh qv = reinterpret_cast<__m512bh>(
              _mm512_set1_epi32(qd[((i0 + i) * chunks + c) * 16 + 4 * k + m]));
          x[i][m] = _mm512_dpbf16_ps(x[i][m], qv, kv);
        }
      }
    }
    for (int i = 0; i < RB; ++i) {
      const __m512 quad = _mm512_add_ps(_mm512_add_ps(x[i][0], x[i][2]),
                                        _mm512_add_ps(x[i][1], x[i][3]));
      if (k == 0 || k == 2) {
        half[i] = quad;
      } else if (k == 1) {
        sums[i] = _mm512_add_ps(half[i], quad);
      } else {
        sums[i] = _mm512_add_ps(sums[i], _mm512_add_ps(half[i], quad));
      }
    }
  }
}

// Rows [i0, i0 + RB) of a tile's scores for keys [j0, j0 + 16) (kt: their
// KeysT vectors).
template <int G, int Q, bool kInt8, int RB>
inline void LaneScoreRows(const __m512i* kt, const uint16_t* q_hi, int chunks, int i0,
                          const BlockKeys<Q>& keys, int j0, float scale, __m512 kscale_lanes,
                          float (&scores)[Q * G][kMaxBlockSize + 16]) {
  __m512 sums[RB];
  LaneSums<RB>(kt, q_hi, chunks, i0, sums);
  for (int i = 0; i < RB; ++i)
    StoreScoreRow<G, Q, kInt8>(i0 + i, sums[i], keys, j0, scale, kscale_lanes, scores);
}

// Every row's scores for keys [j0, j0 + 16), 4 rows at a time (their 16
// chains and the tree's partial sums stay in registers). kInt8: K's row
// scales in kscale_lanes go on the scores.
template <int G, int Q, bool kInt8>
inline void LaneScores(const __m512i* kt, const uint16_t* q_hi, int chunks,
                       const BlockKeys<Q>& keys, int j0, float scale, __m512 kscale_lanes,
                       float (&scores)[Q * G][kMaxBlockSize + 16]) {
  constexpr int R = Q * G;
  int i0 = 0;
  for (; i0 + 4 <= R; i0 += 4)
    LaneScoreRows<G, Q, kInt8, 4>(kt, q_hi, chunks, i0, keys, j0, scale, kscale_lanes, scores);
  if constexpr (R % 4 != 0)
    LaneScoreRows<G, Q, kInt8, R % 4>(kt, q_hi, chunks, i0, keys, j0, scale, kscale_lanes,
                                      scores);
}

}  // namespace
}  // namespace kvfork::avx512
