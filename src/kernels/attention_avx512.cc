// AVX-512 KV writes and paged attention: the AVX2 file's algorithms at 16
// lanes (see attention_avx2.cc for why the order is chunking-invariant), with
// scores reduced 16 keys at a time and K/V rows read once per GQA group.
// f32 KV runs f32 FMAs on its rows (TileBlock); bf16 and int8 KV run both
// products as bf16 dot products (vdpbf16ps) on K and V as stored (int8 codes
// converted in registers), with q and p rounded to bf16 (TileBlockDot).
// q4 / q4r KV (kv_layout.h) runs the same dot path on its codes, converted
// to bf16 integers in registers, with each 32-dim group's scale applied to
// the group's partial score and to p (TileBlockDotQ4).
// GCC 12's AVX-512 intrinsic headers build some results from _mm512_undefined_*
// and then warn about them (a known false positive).
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"

#include <cmath>
#include <cstring>

#include "kernels/attention_tiles.h"
#include "kernels/ops_isa.h"
#include "kernels/scratch.h"
#include "kernels/simd_avx512.h"

namespace kvfork::avx512 {
namespace {

constexpr int kMaxHeadDim = kMaxAttentionHeadDim;  // ops.cc checks the layout against these
constexpr int kMaxBlockSize = kMaxAttentionBlockSize;
constexpr int kMaxGroup = kMaxAttentionGroup;  // query heads per KV head

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
    case KvDType::kQ4:
    case KvDType::kQ4r:
      break;  // ops.cc writes q4 rows (WriteKvQ4, kv_q4_isa.h)
  }
}

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
      break;  // TileBlockDotQ4
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

// Query tokens per tile (attention_tiles.h): Q * G accumulator chains.
template <int G>
constexpr int kMaxTile = MaxTileTokens(G);

// V columns accumulated per pass: Q * G * VU independent FMA chains, enough
// to hide the FMA latency without running out of the 32 registers.
template <int G, int Q>
constexpr int kVecUnroll = G* Q >= 8   ? 1
                           : G* Q >= 4 ? 2
                           : G* Q >= 2 ? 4
                                       : 8;

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
  // bf16, int8, q4 and q4r KV (TileBlockDot, TileBlockDotQ4): q rounded to
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

// Keys [j0, j0 + 16)'s scores of every row from their 16 dot vectors: reduced,
// scaled (int8: times K's row scales) and -inf where the row does not see the key.
template <int G, int Q>
void StoreScores(const __m512 (&dots)[Q * G][16], const BlockKeys<Q>& keys, int j0, float scale,
                 bool int8, const float* kscale, float (&scores)[Q * G][kMaxBlockSize + 16]) {
  const __m512 neg_inf = _mm512_set1_ps(-INFINITY);
  const __m512 kscale_lanes =
      int8 ? _mm512_maskz_loadu_ps(Mask16(keys.n - j0), kscale + j0) : _mm512_setzero_ps();
  for (int i = 0; i < Q * G; ++i) {
    const int left = keys.valid[i / G] - j0, before = keys.first[i / G] - j0;
    const __mmask16 mask =
        static_cast<__mmask16>(Mask16(left > 0 ? left : 0) & ~Mask16(before > 0 ? before : 0));
    __m512 sc = _mm512_mul_ps(Reduce16(dots[i]), _mm512_set1_ps(scale));
    if (int8) sc = _mm512_mul_ps(sc, kscale_lanes);
    _mm512_store_ps(scores[i] + j0, _mm512_mask_blend_ps(mask, neg_inf, sc));
  }
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

// The keys of the block at position b0 (b0 < the tile's last context).
// kPrefetch: next_block (not null) is the block read after this one.
template <int G, int Q, bool kPrefetch>
void TileBlock(const KvLayout& l, int layer, float scale, const AttentionSeq& s, int kvh,
               int64_t b0, const uint8_t* next_block, Tile<G, Q>* tile) {
  constexpr int VU = kVecUnroll<G, Q>;
  const int hd = l.head_dim, bs = l.block_size;
  const int nvec = (hd + 15) / 16;
  const size_t row_bytes = l.RowBytes();
  const bool int8 = l.dtype == KvDType::kInt8;
  const float* q = tile->q;
  float* acc = tile->acc;
  float* ms = tile->ms;
  float* ls = tile->ls;

  alignas(64) float scores[Q * G][kMaxBlockSize + 16];
  __m512 dots[Q * G][16];
  const uint8_t* block = s.blocks[b0 / bs];
  const BlockKeys<Q> keys = KeysOfBlock<Q>(s, tile->t0, b0, bs);
  const int n = keys.n, n16 = keys.n16;
  const uint8_t* kplane = block + l.PlaneOffset(layer, 0, kvh);
  const uint8_t* vplane = block + l.PlaneOffset(layer, 1, kvh);
  const float* kscale =
      int8 ? reinterpret_cast<const float*>(block + l.ScaleOffset(layer, 0, kvh)) : nullptr;
  const float* vscale =
      int8 ? reinterpret_cast<const float*>(block + l.ScaleOffset(layer, 1, kvh)) : nullptr;
  // The next block's K and V rows, fetched while this block's keys are scored:
  // each 16-key plane is its own 4 KB page (bf16, head_dim 128), which the
  // hardware prefetchers do not enter before the first demand miss. Into L2
  // (T1): on a Zen 4 VM, 28 layers of decode attention took 2.5-3.0 ms at
  // 512 keys against 3.2-3.5 with T0 (into L1, whose few miss buffers the
  // 128 lines of a block fill), and decode after 2,048 tokens ran 30 against
  // 22-24 tok/s; two blocks ahead was no better.
  const uint8_t* next_k = kPrefetch ? next_block + l.PlaneOffset(layer, 0, kvh) : nullptr;
  const uint8_t* next_v = kPrefetch ? next_block + l.PlaneOffset(layer, 1, kvh) : nullptr;
  // Scores, 16 keys at a time (keys past n give zero vectors, masked below).
  for (int j0 = 0; j0 < n; j0 += 16) {
    for (int jj = 0; jj < 16; ++jj) {
      const int j = j0 + jj;
      __m512 dot[Q * G];
      for (int i = 0; i < Q * G; ++i) dot[i] = _mm512_setzero_ps();
      if (kPrefetch && j < bs) {
        for (size_t o = 0; o < row_bytes; o += 64) {
          _mm_prefetch(reinterpret_cast<const char*>(next_k + j * row_bytes + o), _MM_HINT_T1);
          _mm_prefetch(reinterpret_cast<const char*>(next_v + j * row_bytes + o), _MM_HINT_T1);
        }
      }
      if (j < n) {
        const uint8_t* krow = kplane + j * row_bytes;
        for (int v = 0; v < nvec; ++v) {
          const __m512 kv = LoadKv(l.dtype, krow, v * 16, hd - v * 16);
          for (int i = 0; i < Q * G; ++i)
            dot[i] = _mm512_fmadd_ps(_mm512_load_ps(q + (i * nvec + v) * 16), kv, dot[i]);
        }
      }
      for (int i = 0; i < Q * G; ++i) dots[i][jj] = dot[i];
    }
    StoreScores<G, Q>(dots, keys, j0, scale, int8, kscale, scores);
  }
  // Online softmax per (token, head); -inf scores give p = 0.
  __m512 vcorr[Q * G];
  for (int i = 0; i < Q * G; ++i) {
    const SoftmaxStep st = SoftmaxStepOf(ms[i], scores[i], n16);
    const __m512 vm = _mm512_set1_ps(st.m_sub);
    __m512 psum = _mm512_setzero_ps();
    for (int j = 0; j < n16; j += 16) {
      __m512 p = Exp(_mm512_sub_ps(_mm512_load_ps(scores[i] + j), vm));
      psum = _mm512_add_ps(psum, p);
      if (int8) p = _mm512_mul_ps(p, _mm512_maskz_loadu_ps(Mask16(n - j), vscale + j));
      _mm512_store_ps(scores[i] + j, p);
    }
    ls[i] = ls[i] * st.corr + Hsum(psum);
    ms[i] = st.m_new;
    vcorr[i] = _mm512_set1_ps(st.corr);
  }
  // acc = acc * corr + sum over the block's keys in order of p[j] * V[j].
  for (int v0 = 0; v0 < nvec; v0 += VU) {
    __m512 a[Q * G][VU];
    for (int i = 0; i < Q * G; ++i)
      for (int u = 0; u < VU; ++u)
        if (v0 + u < nvec)
          a[i][u] = _mm512_mul_ps(_mm512_load_ps(acc + (i * nvec + v0 + u) * 16), vcorr[i]);
    const uint8_t* vrow = vplane;
    for (int j = 0; j < n; ++j, vrow += row_bytes) {
      __m512 vv[VU];
      for (int u = 0; u < VU; ++u)
        if (v0 + u < nvec) vv[u] = LoadKv(l.dtype, vrow, (v0 + u) * 16, hd - (v0 + u) * 16);
      for (int i = 0; i < Q * G; ++i) {
        const __m512 p = _mm512_set1_ps(scores[i][j]);
        for (int u = 0; u < VU; ++u)
          if (v0 + u < nvec) a[i][u] = _mm512_fmadd_ps(p, vv[u], a[i][u]);
      }
    }
    for (int i = 0; i < Q * G; ++i)
      for (int u = 0; u < VU; ++u)
        if (v0 + u < nvec) _mm512_store_ps(acc + (i * nvec + v0 + u) * 16, a[i][u]);
  }
}

template <int G, int Q>
void TileFinish(const KvLayout& l, int num_heads, const AttentionSeq& s, int kvh,
                const Tile<G, Q>& tile) {
  const int hd = l.head_dim;
  const int nvec = (hd + 15) / 16;
  const int64_t t0 = tile.t0;
  const float* acc = tile.acc;
  const float* ls = tile.ls;
  for (int i = 0; i < Q * G; ++i) {
    float* out = s.out + ((t0 + i / G) * num_heads + kvh * G + i % G) * hd;
    const __m512 vl = _mm512_set1_ps(ls[i]);
    for (int v = 0; v < nvec; ++v)
      _mm512_mask_storeu_ps(out + v * 16, Mask16(hd - v * 16),
                            _mm512_div_ps(_mm512_load_ps(acc + (i * nvec + v) * 16), vl));
  }
}

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
// PV: keys go in pairs (j, j + 1) of the block (the pair's second key is
// zero past the keys read); the pair's V rows are interleaved by
// vpunpck{l,h}wd into 16 lanes of (v_j, v_j+1) for dims in DotUnpermute's
// order, met by the broadcast pair (p_j, p_j+1): acc = acc * corr, then one
// vdpbf16ps per pair (and one for P's lo) in key order.
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

// Dims [32 c, 32 c + 32) of a bf16 row whose chunk c has `left` dims (the
// rest read as 0); a whole chunk takes a plain load.
inline __m512i LoadBf16Chunk(const uint16_t* chunk, int left) {
  return left >= 32 ? _mm512_loadu_si512(chunk) : _mm512_maskz_loadu_epi16(Mask32(left), chunk);
}

// Dims [32 c, 32 c + 32) of an int8 row (chunk c has `left` dims) as bf16:
// the codes, integers in [-127, 127], are exact in bf16 (the row's scale is
// applied to the score or to p).
inline __m512i Int8ChunkToBf16(const int8_t* chunk, int left) {
  const __m256i b = _mm256_maskz_loadu_epi8(Mask32(left), chunk);
  const __m512 lo = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm256_castsi256_si128(b)));
  const __m512 hi = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm256_extracti128_si256(b, 1)));
  return reinterpret_cast<__m512i>(_mm512_cvtne2ps_pbh(hi, lo));
}

// Chunk c of a bf16 or int8 K or V row as 32 bf16.
inline __m512bh LoadDotChunk(bool int8, const uint8_t* row, int c, int left) {
  return reinterpret_cast<__m512bh>(
      int8 ? Int8ChunkToBf16(reinterpret_cast<const int8_t*>(row) + c * 32, left)
           : LoadBf16Chunk(reinterpret_cast<const uint16_t*>(row) + c * 32, left));
}

// 16-lane accumulator vectors per PV pass: Q * G * DU chains in registers.
template <int G, int Q>
constexpr int kDotUnroll = G* Q >= 16  ? 1
                           : G* Q >= 8 ? 2
                           : G* Q >= 4 ? 4
                                       : 8;

template <int G, int Q>
void TileInitDot(const KvLayout& l, int num_heads, const AttentionSeq& s, int64_t t0, int kvh,
                 Tile<G, Q>* tile) {
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
      _mm512_store_ps(tile->acc + (i * 2 * chunks + 2 * c) * 16, _mm512_setzero_ps());
      _mm512_store_ps(tile->acc + (i * 2 * chunks + 2 * c + 1) * 16, _mm512_setzero_ps());
    }
    tile->ms[i] = -INFINITY;
    tile->ls[i] = 0.0f;
  }
}

// The keys of the block at position b0 over bf16 or int8 KV (TileBlock's
// contract).
template <int G, int Q, bool kPrefetch>
void TileBlockDot(const KvLayout& l, int layer, float scale, const AttentionSeq& s, int kvh,
                  int64_t b0, const uint8_t* next_block, Tile<G, Q>* tile) {
  constexpr int DU = kDotUnroll<G, Q>;
  const int hd = l.head_dim, bs = l.block_size;
  const int chunks = (hd + 31) / 32;
  const int nacc = 2 * chunks;  // 16-lane accumulator vectors per row
  const size_t row_bytes = l.RowBytes();
  const bool int8 = l.dtype == KvDType::kInt8;
  float* acc = tile->acc;
  float* ms = tile->ms;
  float* ls = tile->ls;

  alignas(64) float scores[Q * G][kMaxBlockSize + 16];
  alignas(64) uint16_t p_hi[Q * G][kMaxBlockSize + 16];
  __m512 dots[Q * G][16];
  const uint8_t* block = s.blocks[b0 / bs];
  const BlockKeys<Q> keys = KeysOfBlock<Q>(s, tile->t0, b0, bs);
  const int n = keys.n, n16 = keys.n16;
  const uint8_t* kplane = block + l.PlaneOffset(layer, 0, kvh);
  const uint8_t* vplane = block + l.PlaneOffset(layer, 1, kvh);
  const float* kscale =
      int8 ? reinterpret_cast<const float*>(block + l.ScaleOffset(layer, 0, kvh)) : nullptr;
  const float* vscale =
      int8 ? reinterpret_cast<const float*>(block + l.ScaleOffset(layer, 1, kvh)) : nullptr;
  const uint8_t* next_k = kPrefetch ? next_block + l.PlaneOffset(layer, 0, kvh) : nullptr;
  const uint8_t* next_v = kPrefetch ? next_block + l.PlaneOffset(layer, 1, kvh) : nullptr;
  for (int j0 = 0; j0 < n; j0 += 16) {
    for (int jj = 0; jj < 16; ++jj) {
      const int j = j0 + jj;
      __m512 dh[Q * G];
      for (int i = 0; i < Q * G; ++i) dh[i] = _mm512_setzero_ps();
      if (kPrefetch && j < bs) {
        for (size_t o = 0; o < row_bytes; o += 64) {
          _mm_prefetch(reinterpret_cast<const char*>(next_k + j * row_bytes + o), _MM_HINT_T1);
          _mm_prefetch(reinterpret_cast<const char*>(next_v + j * row_bytes + o), _MM_HINT_T1);
        }
      }
      if (j < n) {
        const uint8_t* krow = kplane + j * row_bytes;
        for (int c = 0; c < chunks; ++c) {
          const __m512bh k = LoadDotChunk(int8, krow, c, hd - c * 32);
          for (int i = 0; i < Q * G; ++i)
            dh[i] = _mm512_dpbf16_ps(
                dh[i],
                reinterpret_cast<__m512bh>(_mm512_load_si512(tile->q_hi + (i * chunks + c) * 32)),
                k);
        }
      }
      for (int i = 0; i < Q * G; ++i) dots[i][jj] = dh[i];
    }
    StoreScores<G, Q>(dots, keys, j0, scale, int8, kscale, scores);
  }
  // Online softmax per row, P stored as bf16.
  __m512 vcorr[Q * G];
  for (int i = 0; i < Q * G; ++i) {
    const SoftmaxStep st = SoftmaxStepOf(ms[i], scores[i], n16);
    const __m512 vm = _mm512_set1_ps(st.m_sub);
    __m512 psum = _mm512_setzero_ps();
    for (int j = 0; j < n16; j += 16) {
      const __m512 p = Exp(_mm512_sub_ps(_mm512_load_ps(scores[i] + j), vm));
      // int8: V's row scale goes on p (l sums p itself), as the f32 path.
      const __m512 pv =
          int8 ? _mm512_mul_ps(p, _mm512_maskz_loadu_ps(Mask16(n - j), vscale + j)) : p;
      const __m256i hi = reinterpret_cast<__m256i>(_mm512_cvtneps_pbh(pv));
      _mm256_store_si256(reinterpret_cast<__m256i*>(p_hi[i] + j), hi);
      // bf16: l sums the weights P·V uses.
      psum = _mm512_add_ps(psum, int8 ? p : Bf16ToF32(hi));
    }
    ls[i] = ls[i] * st.corr + Hsum(psum);
    ms[i] = st.m_new;
    vcorr[i] = _mm512_set1_ps(st.corr);
  }
  // acc = acc * corr, then per key pair in order one vdpbf16ps.
  for (int w0 = 0; w0 < nacc; w0 += DU) {
    __m512 a[Q * G][DU];
    for (int i = 0; i < Q * G; ++i)
      for (int u = 0; u < DU; ++u)
        if (w0 + u < nacc)
          a[i][u] = _mm512_mul_ps(_mm512_load_ps(acc + (i * nacc + w0 + u) * 16), vcorr[i]);
    for (int j = 0; j < n; j += 2) {
      const uint8_t* r0 = vplane + j * row_bytes;
      const uint8_t* r1 = r0 + row_bytes;
      const int has1 = j + 1 < n;  // the pair's second key, zero past the keys read
      __m512bh vp[DU];
      for (int u = 0; u < DU; ++u) {
        const int w = w0 + u, c = w / 2;
        if (w >= nacc) continue;
        const __m512i v0 = reinterpret_cast<__m512i>(LoadDotChunk(int8, r0, c, hd - c * 32));
        const __m512i v1 = has1 ? reinterpret_cast<__m512i>(LoadDotChunk(int8, r1, c, hd - c * 32))
                                : _mm512_setzero_si512();
        vp[u] = reinterpret_cast<__m512bh>((w & 1) != 0 ? _mm512_unpackhi_epi16(v0, v1)
                                                        : _mm512_unpacklo_epi16(v0, v1));
      }
      for (int i = 0; i < Q * G; ++i) {
        uint32_t pair;
        std::memcpy(&pair, p_hi[i] + j, sizeof(pair));
        const __m512bh ph = reinterpret_cast<__m512bh>(_mm512_set1_epi32(static_cast<int>(pair)));
        for (int u = 0; u < DU; ++u)
          if (w0 + u < nacc) a[i][u] = _mm512_dpbf16_ps(a[i][u], ph, vp[u]);
      }
    }
    for (int i = 0; i < Q * G; ++i)
      for (int u = 0; u < DU; ++u)
        if (w0 + u < nacc) _mm512_store_ps(acc + (i * nacc + w0 + u) * 16, a[i][u]);
  }
}

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

// The keys of the block at position b0 over q4 or q4r KV (TileBlock's
// contract; q4r's rotations are ops.cc's).
template <int G, int Q, bool kPrefetch>
void TileBlockDotQ4(const KvLayout& l, int layer, float scale, const AttentionSeq& s, int kvh,
                    int64_t b0, const uint8_t* next_block, Tile<G, Q>* tile) {
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
  __m512 dots[Q * G][16];
  const uint8_t* block = s.blocks[b0 / bs];
  const BlockKeys<Q> keys = KeysOfBlock<Q>(s, tile->t0, b0, bs);
  const int n = keys.n, n16 = keys.n16;
  const uint8_t* kplane = block + l.PlaneOffset(layer, 0, kvh);
  const uint8_t* vplane = block + l.PlaneOffset(layer, 1, kvh);
  const uint16_t* kscales =
      reinterpret_cast<const uint16_t*>(block + l.Q4ScaleOffset(layer, 0, kvh));
  const uint16_t* vscales =
      reinterpret_cast<const uint16_t*>(block + l.Q4ScaleOffset(layer, 1, kvh));
  // The next block's planes (codes and scales, contiguous) are fetched a few
  // lines per key, so all its lines are asked for over the block.
  const size_t plane_bytes = l.PlaneBytes();
  const size_t pf_bytes = (plane_bytes + bs * 64 - 1) / (bs * 64) * 64;
  const uint8_t* next_k = kPrefetch ? next_block + l.PlaneOffset(layer, 0, kvh) : nullptr;
  const uint8_t* next_v = kPrefetch ? next_block + l.PlaneOffset(layer, 1, kvh) : nullptr;
  for (int j0 = 0; j0 < n; j0 += 16) {
    Q4SliceScales(kscales, groups, j0, n, slice_scales);
    for (int jj = 0; jj < 16; ++jj) {
      const int j = j0 + jj;
      __m512 dot[Q * G];
      for (int i = 0; i < Q * G; ++i) dot[i] = _mm512_setzero_ps();
      if (kPrefetch && j < bs) {
        for (size_t o = j * pf_bytes; o < (j + 1) * pf_bytes && o < plane_bytes; o += 64) {
          _mm_prefetch(reinterpret_cast<const char*>(next_k + o), _MM_HINT_T1);
          _mm_prefetch(reinterpret_cast<const char*>(next_v + o), _MM_HINT_T1);
        }
      }
      if (j < n) {
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
    StoreScores<G, Q>(dots, keys, j0, scale, false, nullptr, scores);
  }
  // Online softmax per row; p stays f32 and l sums it.
  __m512 vcorr[Q * G];
  for (int i = 0; i < Q * G; ++i) {
    const SoftmaxStep st = SoftmaxStepOf(ms[i], scores[i], n16);
    const __m512 vm = _mm512_set1_ps(st.m_sub);
    __m512 psum = _mm512_setzero_ps();
    for (int j = 0; j < n16; j += 16) {
      const __m512 p = Exp(_mm512_sub_ps(_mm512_load_ps(scores[i] + j), vm));
      psum = _mm512_add_ps(psum, p);
      _mm512_store_ps(scores[i] + j, p);
    }
    ls[i] = ls[i] * st.corr + Hsum(psum);
    ms[i] = st.m_new;
    vcorr[i] = _mm512_set1_ps(st.corr);
  }
  const __m512i key_lanes =
      _mm512_mullo_epi32(_mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15),
                         _mm512_set1_epi32(groups));
  for (int w0 = 0; w0 < nacc; w0 += DU) {
    const int g0 = w0 / 2;  // the pass's first group
    if ((w0 & 1) == 0) {
      // Weights of groups [g0, g0 + GP): bf16(p_j * d_v[j][g]) (0 past n).
      for (int j = 0; j < n16; j += 16) {
        Q4SliceScales(vscales, groups, j, n, slice_scales);
        for (int gp = 0; gp < GP && g0 + gp < groups; ++gp) {
          const __m512 d = _mm512_i32gather_ps(
              _mm512_add_epi32(key_lanes, _mm512_set1_epi32(g0 + gp)), slice_scales, 4);
          for (int i = 0; i < Q * G; ++i)
            _mm256_store_si256(reinterpret_cast<__m256i*>(pw[i][gp] + j),
                               reinterpret_cast<__m256i>(_mm512_cvtneps_pbh(
                                   _mm512_mul_ps(_mm512_load_ps(scores[i] + j), d))));
        }
      }
    }
    __m512 a[Q * G][DU];
    for (int i = 0; i < Q * G; ++i)
      for (int u = 0; u < DU; ++u)
        if (w0 + u < nacc)
          a[i][u] = _mm512_mul_ps(_mm512_load_ps(acc + (i * nacc + w0 + u) * 16), vcorr[i]);
    for (int j = 0; j < n; j += 2) {
      const uint8_t* r0 = vplane + j * row_bytes;
      const uint8_t* r1 = j + 1 < n ? r0 + row_bytes : nullptr;
      __m512bh vp[DU];
      if constexpr (DU >= 2) {  // w0 even: vectors (w0 + u, w0 + u + 1) are group g0 + u / 2
        for (int u = 0; u < DU; u += 2)
          if (w0 + u < nacc) Q4PairCodes(r0, r1, g0 + u / 2, levels, &vp[u], &vp[u + 1]);
      } else {
        __m512bh lo, hi;
        Q4PairCodes(r0, r1, g0, levels, &lo, &hi);
        vp[0] = (w0 & 1) != 0 ? hi : lo;
      }
      for (int i = 0; i < Q * G; ++i)
        for (int u = 0; u < DU; u += (DU >= 2 ? 2 : 1)) {
          if (w0 + u >= nacc) continue;
          uint32_t pair;
          std::memcpy(&pair, pw[i][u / 2] + j, sizeof(pair));
          const __m512bh ph = reinterpret_cast<__m512bh>(_mm512_set1_epi32(static_cast<int>(pair)));
          a[i][u] = _mm512_dpbf16_ps(a[i][u], ph, vp[u]);
          if constexpr (DU >= 2) a[i][u + 1] = _mm512_dpbf16_ps(a[i][u + 1], ph, vp[u + 1]);
        }
    }
    for (int i = 0; i < Q * G; ++i)
      for (int u = 0; u < DU; ++u)
        if (w0 + u < nacc) _mm512_store_ps(acc + (i * nacc + w0 + u) * 16, a[i][u]);
  }
}

template <int G, int Q>
void TileFinishDot(const KvLayout& l, int num_heads, const AttentionSeq& s, int kvh,
                   const Tile<G, Q>& tile) {
  const int hd = l.head_dim;
  const int chunks = (hd + 31) / 32;
  for (int i = 0; i < Q * G; ++i) {
    float* out = s.out + ((tile.t0 + i / G) * num_heads + kvh * G + i % G) * hd;
    const __m512 vl = _mm512_set1_ps(tile.ls[i]);
    for (int c = 0; c < chunks; ++c) {
      const __m512 lo = _mm512_load_ps(tile.acc + (i * 2 * chunks + 2 * c) * 16);
      const __m512 hi = _mm512_load_ps(tile.acc + (i * 2 * chunks + 2 * c + 1) * 16);
      const int left = hd - c * 32;
      for (int h = 0; h < 2 && h * 16 < left; ++h)
        _mm512_mask_storeu_ps(out + c * 32 + h * 16, Mask16(left - h * 16),
                              _mm512_div_ps(_mm512_permutex2var_ps(lo, DotUnpermute(h), hi), vl));
    }
  }
}

// Tiles [0, ntiles) of Q tokens from t0 against KV head kvh. Each tile's
// state sees the same operations in the same order as if it ran alone.
template <int G, int Q>
void AttendSpan(const KvLayout& l, int layer, int num_heads, float scale, const AttentionSeq& s,
                int64_t t0, int ntiles, int kvh) {
  auto* tiles = static_cast<Tile<G, Q>*>(
      ThreadScratch(kScratchTask, static_cast<size_t>(ntiles) * sizeof(Tile<G, Q>)));
  // vdpbf16ps (TileBlockDot, TileBlockDotQ4); f32 KV keeps the f32 FMAs.
  const bool q4 = IsQ4(l.dtype);
  const bool dot = l.dtype != KvDType::kF32;
  for (int k = 0; k < ntiles; ++k) {
    if (dot) {
      TileInitDot(l, num_heads, s, t0 + k * Q, kvh, &tiles[k]);
    } else {
      TileInit(l, num_heads, s, t0 + k * Q, kvh, &tiles[k]);
    }
  }
  const int64_t last_ctx_end = s.start_pos + t0 + int64_t{ntiles} * Q;
  // Blocks wholly before the first query's window are seen by no row.
  const int64_t first_key = AttentionWindowStart(s.start_pos + t0, s.window);
  for (int64_t b0 = first_key / l.block_size * l.block_size; b0 < last_ctx_end;
       b0 += l.block_size) {
    for (int k = 0; k < ntiles; ++k)
      if (b0 < s.start_pos + tiles[k].t0 + Q &&
          b0 + l.block_size > AttentionWindowStart(s.start_pos + tiles[k].t0, s.window)) {
        // Decode-like spans read each block once: prefetch the next one.
        const int64_t next = b0 + l.block_size;
        const bool prefetch = ntiles == 1 && next < s.start_pos + tiles[k].t0 + Q;
        if (q4 && prefetch) {
          TileBlockDotQ4<G, Q, true>(l, layer, scale, s, kvh, b0, s.blocks[next / l.block_size],
                                     &tiles[k]);
        } else if (q4) {
          TileBlockDotQ4<G, Q, false>(l, layer, scale, s, kvh, b0, nullptr, &tiles[k]);
        } else if (dot && prefetch) {
          TileBlockDot<G, Q, true>(l, layer, scale, s, kvh, b0, s.blocks[next / l.block_size],
                                   &tiles[k]);
        } else if (dot) {
          TileBlockDot<G, Q, false>(l, layer, scale, s, kvh, b0, nullptr, &tiles[k]);
        } else if (prefetch) {
          TileBlock<G, Q, true>(l, layer, scale, s, kvh, b0, s.blocks[next / l.block_size],
                                &tiles[k]);
        } else {
          TileBlock<G, Q, false>(l, layer, scale, s, kvh, b0, nullptr, &tiles[k]);
        }
      }
  }
  for (int k = 0; k < ntiles; ++k) {
    if (dot && !q4) {  // q4's accumulators keep the dims in order
      TileFinishDot(l, num_heads, s, kvh, tiles[k]);
    } else {
      TileFinish(l, num_heads, s, kvh, tiles[k]);
    }
  }
}

using AttendFn = void (*)(const KvLayout&, int, int, float, const AttentionSeq&, int64_t, int, int);

// Kernels for 1, 2 and 4 query tokens (index 0, 1, 2) for group size G.
template <int G>
struct TileKernels {
  static constexpr AttendFn kFns[3] = {AttendSpan<G, 1>, AttendSpan<G, (kMaxTile<G> >= 2 ? 2 : 1)>,
                                       AttendSpan<G, kMaxTile<G>>};
};

struct Attend {
  const AttendFn* fns = nullptr;  // by tile index: 1, 2, 4 tokens (or 1 where G > 4)
  int max_tile = 1;
};

// The group size is the layout's (num_heads / num_kv_heads), not the batch's.
template <int G>
Attend AttendForG() {
  return {TileKernels<G>::kFns, kMaxTile<G>};
}

Attend AttendFor(int group) {
  switch (group) {
    case 1:
      return AttendForG<1>();
    case 2:
      return AttendForG<2>();
    case 3:
      return AttendForG<3>();
    case 4:
      return AttendForG<4>();
    case 5:
      return AttendForG<5>();
    case 6:
      return AttendForG<6>();
    case 7:
      return AttendForG<7>();
    case 8:
      return AttendForG<8>();
    case 9:
      return AttendForG<9>();
    case 10:
      return AttendForG<10>();
    case 11:
      return AttendForG<11>();
    case 12:
      return AttendForG<12>();
    case 13:
      return AttendForG<13>();
    case 14:
      return AttendForG<14>();
    case 15:
      return AttendForG<15>();
    default:
      static_assert(kMaxGroup == 16, "one case per group size up to kMaxGroup");
      return AttendForG<kMaxGroup>();  // ops.cc checks group <= 16
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
  const Attend attend = AttendFor(num_heads / layout.num_kv_heads);
  int64_t total = 0;
  for (size_t i = 0; i < seqs.size(); ++i) total += seqs[i].num_tokens * layout.num_kv_heads;
  if (total == 0) return;
  auto* tasks = static_cast<AttentionTask*>(
      ThreadScratch(kScratchCaller, static_cast<size_t>(total) * sizeof(AttentionTask)));
  const int64_t n = PlanAttentionTasks(seqs, layout.num_kv_heads, attend.max_tile, tasks);
  pool.ParallelFor(n, [&](int64_t i) {
    const AttentionTask& task = tasks[i];
    attend.fns[task.tile](layout, layer, num_heads, scale, *task.seq, task.t, task.ntiles,
                          task.kvh);
  });
}

}  // namespace kvfork::avx512
