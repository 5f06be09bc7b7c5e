// The avx512 attention kernel over q4 and q4r KV: attention_avx512_dot.h's
// path on 4-bit codes converted in registers, with each 32-dim group's
// scale on the group's partial score and on p.
// Included by attention_avx512.cc alone, and its names have internal
// linkage (the anonymous namespace): no function here may be merged with
// another ISA level's (kernels_isa_objects_have_no_weak_symbols).
#pragma once

#include <algorithm>

#include "kernels/attention_avx512_dot.h"

namespace kvfork::avx512 {
namespace {

// ---- q4 and q4r KV on vdpbf16ps -------------------------------------------
//
// A 32-dim chunk is exactly one q4 group (kv_layout.h), so the codes go in
// as the bf16 integers c - 8 (exact) and each group's scale d is applied
// where it is constant, as the amx level does; no value is rounded but q and
// the weights, as on the bf16 path. (Rounding (c - 8) * d to bf16 instead
// would keep bf16's per-row costs but add a rounding to every K and V value.)
//
// S: per key and group g, one vdpbf16ps of the row's q_hi chunk with the
// codes into a zeroed vector, folded into the key's score chain by one FMA
// with d_k[g], groups in order; then Reduce16 and the scale as the other
// paths. P·V: l sums p itself (as int8 does with its row scale); the
// weights of group g are bf16(p_j * d_v[j][g]), met by the pair's codes
// interleaved by key (Q4PairCodes: the code bytes interleaved before
// widening, so dims stay in order and TileFinish stores them as they are):
// acc = acc * corr, then one vdpbf16ps per key pair in order.
//
// Invariance as for bf16: each row's operations depend only on its own q and
// p and the keys' codes and scales, in an order fixed by positions (groups,
// then keys in pairs); a key the row does not see has p = 0, weight 0, and
// the half pair past the block's keys reads codes of value 0.

// The 16 levels c - 8 of a nibble c as bf16 words, twice (32 words): vpermw
// reads 5 bits of an index, so a code byte's low nibble needs no mask.
inline __m512i Q4LevelsBf16() {
  const __m512 levels = _mm512_setr_ps(-8, -7, -6, -5, -4, -3, -2, -1, 0, 1, 2, 3, 4, 5, 6, 7);
  return reinterpret_cast<__m512i>(_mm512_cvtne2ps_pbh(levels, levels));  // exact: small integers
}

// Dims [32 c, 32 c + 32) of a q4 row as 32 bf16 integers c - 8 in dim order:
// the group's 16 code bytes widened to words, the low nibbles (dims 32 c + i)
// then the high ones (32 c + 16 + i) looked up.
inline __m512bh Q4ChunkCodes(const uint8_t* codes, int c, __m512i levels) {
  const __m256i b =
      _mm256_cvtepu8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(codes + c * 16)));
  const __m512i idx = _mm512_inserti64x4(_mm512_castsi256_si512(b), _mm256_srli_epi16(b, 4), 1);
  return reinterpret_cast<__m512bh>(_mm512_permutexvar_epi16(idx, levels));
}

// Dims [32 c, 32 c + 32) of the q4 V rows of keys a and b (b nullptr: past
// the keys read, codes of value 0) by key pairs: words 2i and 2i + 1 are a's
// and b's dim 32 c + i (*lo) and 32 c + 16 + i (*hi).
inline void Q4PairCodes(const uint8_t* a, const uint8_t* b, int c, __m512i levels, __m512bh* lo,
                        __m512bh* hi) {
  const __m128i x = _mm_loadu_si128(reinterpret_cast<const __m128i*>(a + c * 16));
  const __m128i y = b ? _mm_loadu_si128(reinterpret_cast<const __m128i*>(b + c * 16))
                      : _mm_set1_epi8(static_cast<char>(0x88));  // both nibbles 8: 0
  const __m512i w = _mm512_cvtepu8_epi16(_mm256_inserti128_si256(
      _mm256_castsi128_si256(_mm_unpacklo_epi8(x, y)), _mm_unpackhi_epi8(x, y), 1));
  *lo = reinterpret_cast<__m512bh>(_mm512_permutexvar_epi16(w, levels));
  *hi = reinterpret_cast<__m512bh>(_mm512_permutexvar_epi16(_mm512_srli_epi16(w, 4), levels));
}

// Scales per q4 row at most (head_dim <= kMaxHeadDim).
constexpr int kMaxQ4Groups = kMaxHeadDim / kQ4Group;

// The f16 scales of keys [j0, j0 + 16) of a q4 plane ([key][group]) as f32,
// out[jj * groups + g]; keys at or past n read 0.
inline void Q4SliceScales(const uint16_t* scales, int groups, int j0, int n, float* out) {
  const int words = (n - j0 < 16 ? n - j0 : 16) * groups;
  for (int o = 0; o < 16 * groups; o += 16)
    _mm512_store_ps(out + o, _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(
                                 Mask16(words > o ? words - o : 0), scales + j0 * groups + o)));
}

// The keys [g0, g0 + w) over q4 or q4r KV (TileGroupDot's contract; q4r's
// rotations are ops.cc's).
template <int G, int Q, bool kPrefetch>
void TileGroupDotQ4(const KvLayout& l, int layer, float scale, const AttentionSeq& s, int kvh,
                    int64_t g0, int w, Tile<G, Q>* tile) {
  constexpr int DU = kDotUnroll<G, Q>;
  // Groups a PV pass covers (a group is two accumulator vectors; DU = 1
  // covers half a group per pass, its weights computed on the first).
  constexpr int GP = DU >= 2 ? DU / 2 : 1;
  const int hd = l.head_dim, bs = l.block_size;
  const int groups = hd / kQ4Group;
  const int nacc = 2 * groups;
  const size_t row_bytes = l.RowBytes();
  const __m512i levels = Q4LevelsBf16();
  float* acc = tile->acc;
  float* ms = tile->ms;
  float* ls = tile->ls;

  alignas(64) float scores[Q * G][kMaxBlockSize + 16];     // then p
  alignas(64) uint16_t pw[Q * G][GP][kMaxBlockSize + 16];  // the pass's weights, bf16
  alignas(64) float slice_scales[16 * kMaxQ4Groups];
  const uint8_t* vplanes[kMaxGroupBlocks];
  const uint16_t* vscales[kMaxGroupBlocks];
  __m512 dots[Q * G][16];
  const BlockKeys<Q> keys = KeysOfBlock<Q>(s, tile->t0, g0, w);
  const int n = keys.n, n16 = keys.n16;
  const int64_t ctx_end = s.start_pos + tile->t0 + Q;  // the tile's last context
  // The next block's planes (codes and scales, contiguous) are fetched a few
  // lines per key, so all its lines are asked for over the block.
  const size_t plane_bytes = l.PlaneBytes();
  const size_t pf_bytes = (plane_bytes + bs * 64 - 1) / (bs * 64) * 64;
  for (int o = 0; o < n; o += bs) {
    const int64_t b0 = g0 + o;
    const int nb = n - o < bs ? n - o : bs;  // keys read in this block
    const uint8_t* block = s.blocks[b0 / bs];
    const uint8_t* next_block = kPrefetch ? BlockToPrefetch(s, b0, bs, ctx_end) : nullptr;
    const auto [kplane, vplane, next_k, next_v] =
        HeadPlanesOf(l, block, next_block, layer, kvh);
    const uint16_t* kscales =
        reinterpret_cast<const uint16_t*>(block + l.Q4ScaleOffset(layer, 0, kvh));
    vplanes[o / bs] = vplane;
    vscales[o / bs] = reinterpret_cast<const uint16_t*>(block + l.Q4ScaleOffset(layer, 1, kvh));
    for (int j0 = 0; j0 < nb; j0 += 16) {
      Q4SliceScales(kscales, groups, j0, nb, slice_scales);
      for (int jj = 0; jj < 16; ++jj) {
        const int j = j0 + jj;
        __m512 dot[Q * G];
        for (int i = 0; i < Q * G; ++i) dot[i] = _mm512_setzero_ps();
        if (kPrefetch && next_k != nullptr && j < bs)
          PrefetchPlanes</*kIntoL1=*/false>(next_k, next_v, j * pf_bytes,
                                            std::min((j + 1) * pf_bytes, plane_bytes));
        if (j < nb) {
          const uint8_t* krow = kplane + j * row_bytes;
          for (int g = 0; g < groups; ++g) {
            const __m512bh k = Q4ChunkCodes(krow, g, levels);
            const __m512 d = _mm512_set1_ps(slice_scales[jj * groups + g]);
            for (int i = 0; i < Q * G; ++i) {
              const __m512 part = _mm512_dpbf16_ps(
                  _mm512_setzero_ps(),
                  reinterpret_cast<__m512bh>(_mm512_load_si512(tile->q_hi + (i * groups + g) * 32)),
                  k);
              dot[i] = _mm512_fmadd_ps(part, d, dot[i]);
            }
          }
        }
        for (int i = 0; i < Q * G; ++i) dots[i][jj] = dot[i];
      }
      StoreScores<G, Q>(dots, keys, o + j0, scale, nullptr, 0, scores);
    }
  }
  MaskScoresTail<Q * G>(scores, n);
  // Online softmax per row; p stays f32 and l sums it.
  __m512 vcorr[Q * G];
  SoftmaxRows(scores, n16, ms, ls, vcorr, [&](int i, int j, __m512 p) {
    _mm512_store_ps(scores[i] + j, p);
    return p;
  });
  const __m512i key_lanes =
      _mm512_mullo_epi32(_mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15),
                         _mm512_set1_epi32(groups));
  for (int w0 = 0; w0 < nacc; w0 += DU) {
    const int g0v = w0 / 2;  // the pass's first group
    if ((w0 & 1) == 0) {
      // Weights of groups [g0v, g0v + GP): bf16(p_j * d_v[j][g]), block by
      // block (0 past a block's keys, then overwritten by the next block's).
      for (int o = 0; o < n; o += bs) {
        const int nb = n - o < bs ? n - o : bs;
        for (int j = 0; j < nb; j += 16) {
          Q4SliceScales(vscales[o / bs], groups, j, nb, slice_scales);
          for (int gp = 0; gp < GP && g0v + gp < groups; ++gp) {
            const __m512 d = _mm512_i32gather_ps(
                _mm512_add_epi32(key_lanes, _mm512_set1_epi32(g0v + gp)), slice_scales, 4);
            for (int i = 0; i < Q * G; ++i)
              _mm256_storeu_si256(reinterpret_cast<__m256i*>(pw[i][gp] + o + j),
                                  reinterpret_cast<__m256i>(_mm512_cvtneps_pbh(
                                      _mm512_mul_ps(_mm512_loadu_ps(scores[i] + o + j), d))));
          }
        }
      }
    }
    __m512 a[Q * G][DU];
    LoadScaledAcc(acc, nacc, w0, vcorr, a);
    // One key pair; r1 null: half a pair, as TileGroupDot's.
    auto pair_step = [&](const uint8_t* r0, const uint8_t* r1, int at) {
      __m512bh vp[DU];
      if constexpr (DU >= 2) {  // w0 even: vectors (w0 + u, w0 + u + 1) are group g0v + u / 2
        for (int u = 0; u < DU; u += 2)
          if (w0 + u < nacc) Q4PairCodes(r0, r1, g0v + u / 2, levels, &vp[u], &vp[u + 1]);
      } else {
        __m512bh lo, hi;
        Q4PairCodes(r0, r1, g0v, levels, &lo, &hi);
        vp[0] = (w0 & 1) != 0 ? hi : lo;
      }
      for (int i = 0; i < Q * G; ++i)
        for (int u = 0; u < DU; u += (DU >= 2 ? 2 : 1)) {
          if (w0 + u >= nacc) continue;
          uint32_t pair;
          std::memcpy(&pair, pw[i][u / 2] + at, sizeof(pair));
          if (r1 == nullptr) pair &= 0xffffu;
          const __m512bh ph = reinterpret_cast<__m512bh>(_mm512_set1_epi32(static_cast<int>(pair)));
          a[i][u] = _mm512_dpbf16_ps(a[i][u], ph, vp[u]);
          if constexpr (DU >= 2) a[i][u + 1] = _mm512_dpbf16_ps(a[i][u + 1], ph, vp[u + 1]);
        }
    };
    for (int o = 0; o < n; o += bs) {
      const int nb = n - o < bs ? n - o : bs;
      const uint8_t* vplane = vplanes[o / bs];
      int j = 0;
      for (; j + 1 < nb; j += 2) pair_step(vplane + j * row_bytes, vplane + (j + 1) * row_bytes, o + j);
      if (j < nb) pair_step(vplane + j * row_bytes, nullptr, o + j);
    }
    StoreAcc(acc, nacc, w0, a);
  }
}

}  // namespace
}  // namespace kvfork::avx512
