// The avx512 attention kernel over bf16 and int8 KV: both products as bf16
// dot products (vdpbf16ps) on K and V as stored.
// Included by attention_avx512.cc alone, and its names have internal
// linkage (the anonymous namespace): no function here may be merged with
// another ISA level's (kernels_isa_objects_have_no_weak_symbols).
#pragma once

#include "kernels/attention_avx512_keys.h"

namespace kvfork::avx512 {
namespace {

// ---- bf16 and int8 KV on vdpbf16ps ----------------------------------------
//
// bf16 KV runs both products as bf16 dot products (vdpbf16ps: per f32 lane,
// two bf16 products, exact in f32, added to the lane in a fixed order), so
// neither K nor V is widened and each instruction does twice an f32 FMA's
// work. Q and P are rounded once to bf16 (hi = bf16(x)); K and V are bf16
// already, so the products are exact
// (vdpbf16ps reads denormal bf16 as 0 and flushes denormal results: the
// same on every call, so it changes no bit between calls). int8 KV's codes
// are integers in [-127, 127], exact in bf16: K's row scale multiplies the
// score and V's multiplies p before it is rounded, as in the f32 path.
//
// S: key j's dot with row i is the 32-dim chunks in order, each one
// vdpbf16ps of q_hi, then Reduce16 over the 16 lanes, as the f32 path.
// PV: keys go in pairs (j, j + 1) of a block (the pair's second key is
// zero past the block's keys read); the pair's V rows are interleaved by
// vpunpck{l,h}wd into 16 lanes of (v_j, v_j+1) for dims in DotUnpermute's
// order, met by the broadcast pair (p_j, p_j+1): acc = acc * corr once per
// softmax group (SoftmaxGroupWidth), then one vdpbf16ps per pair in key
// order.
//
// Invariance as for the f32 path: a row's operations depend only on its own
// q and p and the keys' values; a key it does not see has p = 0 exactly, and
// 0 * v adds +-0 to an accumulator that starts at +0 and so is never -0.

// Why no hi/lo split of q and p (the amx level's choice, about 16 bits of
// each): two vdpbf16ps where one does, as many dot instructions as the f32
// path's FMAs, and measured no faster than it (session 20, docs/kernels.md).
// Rounded once, as llama.cpp rounds q to its K type: prefill attention
// 1.35-1.7x faster than the f32 path, and on the trained model bf16 KV's KL
// against f32 KV moved from 4.75e-6 to 5.19e-6 with the same top-1.

// 16 bf16 of a __m256bh / the low or high half of 32 as exact f32.
inline __m512 Bf16ToF32(__m256i h) {
  return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
}

// Lane k of a chunk's vector h (0: vpunpcklwd, 1: vpunpckhwd) holds dim
// 8 (k / 4) + 4 h + k % 4 of the chunk; DotUnpermute's index vectors put dims
// [0, 16) and [16, 32) back in order from the (lo, hi) pair.
inline __m512i DotUnpermute(int half) {
  return half == 0
             ? _mm512_setr_epi32(0, 1, 2, 3, 16, 17, 18, 19, 4, 5, 6, 7, 20, 21, 22, 23)
             : _mm512_setr_epi32(8, 9, 10, 11, 24, 25, 26, 27, 12, 13, 14, 15, 28, 29, 30, 31);
}

// 16-lane accumulator vectors per PV pass of the dot kernels: Q * G * DU
// vdpbf16ps chains in registers (twice the f32 kernel's: a dot's two
// products per lane make each chain half as long).
template <int G, int Q>
constexpr int kDotUnroll = PassUnroll(G * Q, 16);
static_assert(kDotUnroll<1, 1> == 8 && kDotUnroll<1, 4> == 4 && kDotUnroll<2, 4> == 2 &&
              kDotUnroll<4, 4> == 1 && kDotUnroll<3, 1> == 8 && kDotUnroll<5, 1> == 4);

// A row's accumulator vectors in TileGroupDot: 2 per 32-dim chunk, padded
// to whole P·V passes (the padding's V reads are masked to 0 and never
// stored out), so no pass tests which of its vectors are real.
template <int G, int Q>
int DotAccStride(int head_dim) {
  constexpr int DU = kDotUnroll<G, Q>;
  return (2 * ((head_dim + 31) / 32) + DU - 1) / DU * DU;
}

// q rounded to bf16 and the accumulators zeroed; acc_stride: each row's
// accumulator vectors (DotAccStride; q4: 2 per group).
template <int G, int Q>
void TileInitDot(const KvLayout& l, int num_heads, const AttentionSeq& s, int64_t t0, int kvh,
                 int acc_stride, Tile<G, Q>* tile) {
  const int hd = l.head_dim;
  const int chunks = (hd + 31) / 32;
  tile->t0 = t0;
  for (int i = 0; i < Q * G; ++i) {
    const float* src = s.q + ((t0 + i / G) * num_heads + kvh * G + i % G) * hd;
    for (int c = 0; c < chunks; ++c) {
      const __m512 x0 = _mm512_maskz_loadu_ps(Mask16(hd - c * 32), src + c * 32);
      const int left = hd - c * 32;  // dims of this chunk, 1 to 32 of them real
      const __m512 x1 = _mm512_maskz_loadu_ps(Mask16(left > 16 ? left - 16 : 0), src + c * 32 + 16);
      const __m512i hi = reinterpret_cast<__m512i>(_mm512_cvtne2ps_pbh(x1, x0));
      _mm512_store_si512(tile->q_hi + (i * chunks + c) * 32, hi);
    }
    for (int w = 0; w < acc_stride; ++w)
      _mm512_store_ps(tile->acc + (i * acc_stride + w) * 16, _mm512_setzero_ps());
    tile->ms[i] = -INFINITY;
    tile->ls[i] = 0.0f;
  }
}

// The keys [g0, g0 + w) over bf16 (kInt8 false) or int8 KV, w =
// SoftmaxGroupWidth (keys past the tile's last context are not read): the S
// products block by block, then one online-softmax step for the whole group,
// then P·V block by block into accumulators loaded and stored once.
// kPrefetch: each block's planes ask for the next block's while it is
// scored (decode-like spans). keys_t: the group's K from KeysT (at least the
// tile's keys), or null to score K's rows as stored.
template <int G, int Q, bool kPrefetch, bool kInt8>
void TileGroupDot(const KvLayout& l, int layer, float scale, const AttentionSeq& s, int kvh,
                  int64_t g0, int w, const __m512i* keys_t, Tile<G, Q>* tile) {
  constexpr int R = Q * G;  // rows
  constexpr int DU = kDotUnroll<G, Q>;
  const int hd = l.head_dim, bs = l.block_size;
  const int chunks = (hd + 31) / 32;
  const int stride = DotAccStride<G, Q>(hd);  // accumulator vectors per row
  const size_t row_bytes = l.RowBytes();
  float* acc = tile->acc;
  const uint16_t* q_hi = tile->q_hi;

  alignas(64) float scores[R][kMaxBlockSize + 16];
  alignas(64) uint16_t p_hi[R][kMaxBlockSize + 16];
  alignas(64) float vscales[kMaxBlockSize + 16];  // int8: the group's V row scales
  const uint8_t* vplanes[kMaxGroupBlocks];
  // Chunk c's real dims, for every chunk a pass reads (none in the padding).
  __mmask32 cmask[kMaxHeadDim / 32 + DU];
  for (int c = 0; c < (stride + 1) / 2; ++c) cmask[c] = Mask32(hd - c * 32 > 0 ? hd - c * 32 : 0);
  __m512 dots[R][16];
  const BlockKeys<Q> keys = KeysOfBlock<Q>(s, tile->t0, g0, w);
  const int n = keys.n, n16 = keys.n16;
  const int64_t ctx_end = s.start_pos + tile->t0 + Q;  // the tile's last context
  for (int o = 0; o < n; o += bs) {
    const int64_t b0 = g0 + o;
    const int nb = n - o < bs ? n - o : bs;  // keys read in this block
    const uint8_t* next_block = kPrefetch ? BlockToPrefetch(s, b0, bs, ctx_end) : nullptr;
    const auto [kplane, vplane, next_k, next_v] =
        HeadPlanesOf(l, s.blocks[b0 / bs], next_block, layer, kvh);
    vplanes[o / bs] = vplane;
    const float* kscale = nullptr;
    if constexpr (kInt8) {
      kscale = Int8ScalesOf(l, s.blocks[b0 / bs], layer, 0, kvh);
      std::memcpy(vscales + o, Int8ScalesOf(l, s.blocks[b0 / bs], layer, 1, kvh),
                  static_cast<size_t>(nb) * sizeof(float));
    }
    if (keys_t != nullptr) {  // blocks of whole 16-key vectors (KeysT)
      for (int j0 = 0; j0 < nb; j0 += 16) {
        const int kc = nb - j0 < 16 ? nb - j0 : 16;
        LaneScores<G, Q, kInt8>(keys_t + (o + j0) / 16 * KeysTVectors(hd), q_hi, chunks, keys,
                                o + j0, scale, KScaleLanes(kInt8 ? kscale + j0 : nullptr, kc),
                                scores);
      }
      continue;
    }
    for (int j0 = 0; j0 < nb; j0 += 16) {
      const int kc = nb - j0 < 16 ? nb - j0 : 16;  // keys of this vector read
      for (int jj = 0; jj < 16; ++jj) {
        const int j = j0 + jj;
        // bf16 into L1: 28 layers of decode attention from DRAM (2 threads,
        // Zen 5, alternated in three rounds) took 15.5-17.4 ms at 3,400 keys
        // against 16.9-18.4 into L2, 8.8-9.5 against 10.7 at 2,048, 2.4
        // against 2.7-2.8 at 512. int8 (half the lines) was no faster in
        // L1 (12.6-13.3 ms in L2, 13.7 in L1 at 3,400): it keeps L2.
        if (kPrefetch && next_k != nullptr && j < bs)
          PrefetchPlanes</*kIntoL1=*/!kInt8>(next_k, next_v, j * row_bytes, (j + 1) * row_bytes);
        __m512 d[R];
        for (int i = 0; i < R; ++i) d[i] = _mm512_setzero_ps();
        if (jj < kc) {
          const uint8_t* krow = kplane + j * row_bytes;
          for (int c = 0; c < chunks; ++c) {
            const __m512bh k = reinterpret_cast<__m512bh>(DotChunk<kInt8>(krow, c, cmask[c]));
            for (int i = 0; i < R; ++i)
              d[i] = _mm512_dpbf16_ps(
                  d[i], reinterpret_cast<__m512bh>(_mm512_load_si512(q_hi + (i * chunks + c) * 32)),
                  k);
          }
        }
        for (int i = 0; i < R; ++i) dots[i][jj] = d[i];
      }
      StoreScores<G, Q>(dots, keys, o + j0, scale, kInt8 ? kscale + j0 : nullptr, kc, scores);
    }
  }
  MaskScoresTail<R>(scores, n);
  // Online softmax per row, P stored as bf16.
  __m512 vcorr[R];
  SoftmaxRows(scores, n16, tile->ms, tile->ls, vcorr, [&](int i, int j, __m512 p) {
    // int8: V's row scale goes on p (l sums p itself), as the f32 path.
    const __m512 pv = kInt8 ? _mm512_mul_ps(p, _mm512_maskz_loadu_ps(Mask16(n - j), vscales + j)) : p;
    const __m256i hi = reinterpret_cast<__m256i>(_mm512_cvtneps_pbh(pv));
    _mm256_store_si256(reinterpret_cast<__m256i*>(p_hi[i] + j), hi);
    // bf16: l sums the weights P·V uses.
    return kInt8 ? p : Bf16ToF32(hi);
  });
  // acc = acc * corr, then per key pair of each block in order one vdpbf16ps
  // per accumulator vector; vector u of a pass holds the pair's (lo: u even,
  // hi: odd) interleave of chunk (w0 + u) / 2.
  for (int w0 = 0; w0 < stride; w0 += DU) {
    __m512 a[R][DU];
    LoadScaledAcc(acc, stride, w0, vcorr, a);
    // One key pair; r1 null: half a pair (the block's last key), whose
    // second weight is the next block's or past the scores written (NaN * 0
    // would not be 0), so it is cleared and the second key reads as 0.
    auto pair_step = [&](const uint8_t* r0, const uint8_t* r1, int at) {
      __m512bh vp[DU];
      for (int u = 0; u < DU; ++u) {
        const int c = (w0 + u) / 2;
        const __m512i v0 = DotChunk<kInt8>(r0, c, cmask[c]);
        const __m512i v1 =
            r1 != nullptr ? DotChunk<kInt8>(r1, c, cmask[c]) : _mm512_setzero_si512();
        vp[u] = reinterpret_cast<__m512bh>(((w0 + u) & 1) != 0 ? _mm512_unpackhi_epi16(v0, v1)
                                                               : _mm512_unpacklo_epi16(v0, v1));
      }
      for (int i = 0; i < R; ++i) {
        uint32_t pair;
        std::memcpy(&pair, p_hi[i] + at, sizeof(pair));
        if (r1 == nullptr) pair &= 0xffffu;
        const __m512bh ph = reinterpret_cast<__m512bh>(_mm512_set1_epi32(static_cast<int>(pair)));
        for (int u = 0; u < DU; ++u) a[i][u] = _mm512_dpbf16_ps(a[i][u], ph, vp[u]);
      }
    };
    for (int o = 0; o < n; o += bs) {
      const int nb = n - o < bs ? n - o : bs;
      const uint8_t* vplane = vplanes[o / bs];
      int j = 0;
      for (; j + 1 < nb; j += 2)
        pair_step(vplane + j * row_bytes, vplane + (j + 1) * row_bytes, o + j);
      if (j < nb) pair_step(vplane + j * row_bytes, nullptr, o + j);
    }
    StoreAcc(acc, stride, w0, a);
  }
}

template <int G, int Q>
void TileFinishDot(const KvLayout& l, int num_heads, const AttentionSeq& s, int kvh,
                   const Tile<G, Q>& tile) {
  const int hd = l.head_dim;
  const int chunks = (hd + 31) / 32;
  const int stride = DotAccStride<G, Q>(hd);
  for (int i = 0; i < Q * G; ++i) {
    float* out = s.out + ((tile.t0 + i / G) * num_heads + kvh * G + i % G) * hd;
    const __m512 vl = _mm512_set1_ps(tile.ls[i]);
    for (int c = 0; c < chunks; ++c) {
      const __m512 lo = _mm512_load_ps(tile.acc + (i * stride + 2 * c) * 16);
      const __m512 hi = _mm512_load_ps(tile.acc + (i * stride + 2 * c + 1) * 16);
      const int left = hd - c * 32;
      for (int h = 0; h < 2 && h * 16 < left; ++h)
        _mm512_mask_storeu_ps(out + c * 32 + h * 16, Mask16(left - h * 16),
                              _mm512_div_ps(_mm512_permutex2var_ps(lo, DotUnpermute(h), hi), vl));
    }
  }
}

}  // namespace
}  // namespace kvfork::avx512
