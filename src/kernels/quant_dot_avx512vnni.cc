// AVX512-VNNI dot kernels of every quantized format (quant_isa.h), on
// vpdpbusd: unsigned weight codes times signed activation codes, four
// products summed into each 32-bit lane. A format's code offset (q - 8,
// q - 32, ...) enters as the lane's starting value, offset * nsum4 (quant.h),
// so each lane holds the exact sum of four (q - offset) * x; signed Q8_0
// codes are biased by +128 the same way. Sub-block scales multiply the int32
// lanes. K formats: a super-block's lanes go to float once, times d_w * d_x,
// into a float accumulator per row, summed by halves at the end. 32-block
// formats: a block's lanes are summed to one exact int32 first, which goes to
// float times d_w * d_x into one float chain per output (Dot32Blocks), the
// sequence the AMX-INT8 prefill reproduces. The order depends on nothing but
// the row, so every M, chunking and thread count gives the same bits.
// GCC 12 AVX-512 intrinsic headers build some results from _mm512_undefined_*
// and warn about them (a known false positive, as in matmul_avx512.cc).
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"

#include <cpuid.h>
#include <immintrin.h>

#include <algorithm>
#include <cstring>

#include "core/cpu_features.h"
#include "kernels/quant_blocks.h"
#include "kernels/quant_codes32_avx512.h"
#include "kernels/quant_isa.h"
#include "kernels/quant_kscales_simd.h"

namespace kvfork::avx512 {
namespace {

inline float F16(uint16_t h) { return _cvtsh_ss(h); }

// Decode streams W from DRAM in row order, a group of rows side by side; the
// hardware prefetchers alone left a 1-thread Q4_K GEMV at 10 GB/s where the
// same loop from L2 reads 24 (qwen3-0.6b's 2048 x 1024, Zen 5 VM). Each block
// a kernel reads asks for the lines kPrefetchBytes further on, as the bf16
// decode path does (matmul_avx512.cc), into L2 (T1) rather than L1 (T0):
// on the Sapphire Rapids VM, qwen3-0.6b decode alternated T0 / T1 in one
// quiet run rose in 11 of 12 rounds (Q4_K_M 62.7% -> 67.3% of the limit,
// Q8_0 56.0% -> 59.1%; docs/kernels.md). Prefetches change no bits.
constexpr int64_t kPrefetchBytes = 4096;
template <int kBytes>
inline void PrefetchAhead(const void* block) {
  const char* p = static_cast<const char*>(block) + kPrefetchBytes;
  for (int off = 0; off < kBytes; off += 64) _mm_prefetch(p + off, _MM_HINT_T1);
}

inline __m256i Load256(const void* p) { return _mm256_loadu_si256(static_cast<const __m256i*>(p)); }
inline __m512i Load512(const void* p) { return _mm512_loadu_si512(p); }

// Where the CPU has GFNI (HasGfni below), the 4- and 6-bit kernels unpack
// codes with vgf2p8affineqb: each byte of x times the 8 x 8 bit matrix of its
// qword's lane in m (result bit i = parity(m.byte[7 - i] & x)), so one op
// moves and masks a byte's bits where a shift and an and took two. Written
// as asm, not the intrinsic: the intrinsic needs the gfni target on every
// function it is inlined into, and the same kernels must also run (and be
// compiled) for AVX512-VNNI CPUs without GFNI (Cascade Lake). The codes are
// the same bytes either way, so the outputs' bits do not depend on it.
inline __m512i Gf2p8Affine(__m512i x, __m512i m) {
  __m512i r;
  __asm__("vgf2p8affineqb $0, %2, %1, %0" : "=v"(r) : "v"(x), "v"(m));
  return r;
}
// Bit matrices (one per qword) for Gf2p8Affine.
constexpr int64_t kLowNibble = 0x0102040800000000;       // bits 0-3 stay, 4-7 cleared
constexpr int64_t kHighNibbleDown = 0x1020408000000000;  // bits 4-7 to 0-3, 4-7 cleared
// Bits (2s, 2s + 1) of a Q6_K qh byte to bits 4 and 5, the rest cleared.
constexpr int64_t kQ6HighBits[4] = {0x0000000001020000, 0x0000000004080000,
                                    0x0000000010200000, 0x0000000040800000};

// Codes (unsigned) and offset shift of block i of a 32-block format.
template <typename Block>
inline __m256i Codes(const Block& b) {
  if constexpr (std::is_same_v<Block, BlockQ8_0>) {
    return _mm256_xor_si256(Load256(b.qs), _mm256_set1_epi8(static_cast<char>(0x80)));
  } else if constexpr (std::is_same_v<Block, BlockQ4_0> || std::is_same_v<Block, BlockQ4_1>) {
    return Nibbles32(b.qs);
  } else {
    return AddHighBits(Nibbles32(b.qs), b.qh);
  }
}
// Codes of blocks b0 (lanes 0-7) and b1 (8-15) in one zmm. Q8_0 biases its
// codes after joining the two halves: one 512-bit xor where two 256-bit ones
// took a vector ALU op each (the same bytes).
template <typename Block>
inline __m512i Codes2(const Block& b0, const Block& b1) {
  if constexpr (std::is_same_v<Block, BlockQ8_0>) {
    return _mm512_xor_si512(
        _mm512_inserti64x4(_mm512_castsi256_si512(Load256(b0.qs)), Load256(b1.qs), 1),
        _mm512_set1_epi8(static_cast<char>(0x80)));
  } else {
    return _mm512_inserti64x4(_mm512_castsi256_si512(Codes(b0)), Codes(b1), 1);
  }
}
template <typename Block>
constexpr int OffsetShift() {
  if constexpr (std::is_same_v<Block, BlockQ8_0>) return 7;
  if constexpr (std::is_same_v<Block, BlockQ4_0>) return 3;
  if constexpr (std::is_same_v<Block, BlockQ5_0>) return 4;
  return -1;  // *_1: no offset, a min instead
}
template <typename Block>
constexpr bool kHasMin = std::is_same_v<Block, BlockQ4_1> || std::is_same_v<Block, BlockQ5_1>;

// The kernels below take a tile of RW W rows by RX x rows: decode (one x
// row) runs 4 x 1 tiles, so four rows share each activation load; prefill
// runs 1 x 4 tiles, so each W block is unpacked once for four x rows. Every
// (W row, x row) pair takes the same steps in every tile shape, so its bits
// do not depend on the tiling, M or the task (invariant 1). w[r] is W row r,
// x[c] x row c, and y[c * ldy + r] their product.
constexpr int kTileRows = 4;

// Per 128-bit quarter q, lane p (p < 4): the sum of dots[p]'s four int32
// lanes in quarter q. Integer adds, so the order of the tree is immaterial.
inline __m512i QuarterSums(const __m512i* dots) {
  // Per quarter: lane p = dots[p]'s lanes 0 + 2 (p = 0, 1) then 1 + 3.
  const __m512i a = _mm512_add_epi32(_mm512_unpacklo_epi32(dots[0], dots[1]),
                                     _mm512_unpackhi_epi32(dots[0], dots[1]));
  const __m512i b = _mm512_add_epi32(_mm512_unpacklo_epi32(dots[2], dots[3]),
                                     _mm512_unpackhi_epi32(dots[2], dots[3]));
  return _mm512_add_epi32(_mm512_unpacklo_epi64(a, b), _mm512_unpackhi_epi64(a, b));
}

// Pair p's exact int32 sum over each of two 32-blocks, for up to four
// (W row, x row) pairs: dots[p] holds pair p's vpdpbusd lanes, lanes 0-7
// block i and 8-15 block i + 1. Lane p of *even is the block i sum, of *odd
// the block i + 1 one.
inline void BlockSums(const __m512i* dots, __m128i* even, __m128i* odd) {
  const __m512i c = QuarterSums(dots);
  // Quarters 0 + 1 (block i) and 2 + 3 (block i + 1).
  const __m512i d = _mm512_add_epi32(c, _mm512_shuffle_i64x2(c, c, _MM_SHUFFLE(2, 3, 0, 1)));
  *even = _mm512_castsi512_si128(d);
  *odd = _mm512_extracti32x4_epi32(d, 2);
}

// The same over four 32-blocks: lo[p] holds pair p's lanes of blocks i and
// i + 1, hi[p] of blocks i + 2 and i + 3. Quarter j of the result is block
// i + j, its lane p pair p's sum. One tree for the four blocks (21 vector
// ops), then one conversion and three extracts, where two BlockSums took 24
// and four conversions.
inline __m512i BlockSums4(const __m512i* lo, const __m512i* hi) {
  const __m512i c_lo = QuarterSums(lo), c_hi = QuarterSums(hi);
  return _mm512_add_epi32(_mm512_shuffle_i64x2(c_lo, c_hi, _MM_SHUFFLE(2, 0, 2, 0)),
                          _mm512_shuffle_i64x2(c_lo, c_hi, _MM_SHUFFLE(3, 1, 3, 1)));
}

// Lane p: the sum of v[p]'s 16 int32 lanes, p < 4.
inline __m128i LaneTotals(const __m512i* v) {
  __m128i even, odd;
  BlockSums(v, &even, &odd);
  return _mm_add_epi32(even, odd);
}

// x rows' scales at (super-)block i, lane c for x row c < RX (0 above).
// Built in registers: narrow stores read back as a vector stall the load
// (store forwarding fails), which cost decode ~20% in Dot32Blocks.
template <int RX>
inline __m128 XScales(const Q8Row* const* x, int64_t i) {
  const float dx1 = RX > 1 ? x[RX > 1 ? 1 : 0]->d[i] : 0.0f;
  const float dx2 = RX > 2 ? x[RX > 2 ? 2 : 0]->d[i] : 0.0f;
  const float dx3 = RX > 3 ? x[RX > 3 ? 3 : 0]->d[i] : 0.0f;
  return _mm_setr_ps(x[0]->d[i], dx1, dx2, dx3);
}

// The 32-block formats. Each output is one float chain, blocks in order:
// acc = fma(float(block's exact int32 sum), d_w * d_x, acc) from acc = 0,
// then (the *_1 formats) + the min terms' own chain. The AMX-INT8 prefill
// (quant_matmul_amx.cc) takes the same chain from its C tiles, so a row's
// bits do not depend on which of the two ran it (invariant 1). The tile's
// up to four (W row, x row) pairs share one xmm accumulator, a lane each.
// Two blocks per zmm (lanes 0-7 block i, 8-15 block i + 1), four blocks a
// step (two zmm per pair, summed by one tree), then pairs, then an odd
// last block alone: every step makes the same int32 per (pair, block) and
// takes the same fmas in block order, so the bits do not depend on which
// step a block falls in.
template <typename Block, int RW, int RX>
void Dot32Blocks(const uint8_t* const* w, const Q8Row* const* x, float* y, int64_t ldy) {
  static_assert(RW * RX <= 4, "one xmm lane per (W row, x row) pair");
  const int64_t nb = x[0]->cols / 32;
  constexpr int kShift = OffsetShift<Block>();
  const Block* rows[RW];
  for (int r = 0; r < RW; ++r) rows[r] = reinterpret_cast<const Block*>(w[r]);
  __m128 acc = _mm_setzero_ps();
  float mins[RW][RX] = {};
  auto add_mins = [&](const Block& b, int64_t i, int r, int c) {
    if constexpr (kHasMin<Block>) {
      mins[r][c] += F16(b.m) * x[c]->d[i] * static_cast<float>(x[c]->sum32[i]);
    }
  };
  // Lane r * RX + c: d_w of W row r times d_x of x row c at block i, built
  // in registers (XScales).
  auto scales = [&](int64_t i) {
    if constexpr (RW == 1) {
      return _mm_mul_ps(_mm_set1_ps(F16(rows[0][i].d)), XScales<RX>(x, i));
    } else {
      uint64_t d16 = 0;
      for (int r = 0; r < RW; ++r) d16 |= uint64_t{rows[r][i].d} << (16 * r);
      return _mm_mul_ps(_mm_cvtph_ps(_mm_cvtsi64_si128(static_cast<int64_t>(d16))),
                        _mm_set1_ps(x[0]->d[i]));
    }
  };
  // vpdpbusd's starting lanes for x row c at block i: the code offset times
  // the lanes' x sums (zero for the *_1 formats).
  auto init512 = [&](int c, int64_t i) {
    return kShift < 0 ? _mm512_setzero_si512()
                      : _mm512_slli_epi32(Load512(x[c]->nsum4 + 8 * i), kShift);
  };
  int64_t i = 0;
  // The *_1 formats stay on pair steps: their scalar min chain beside four
  // blocks a step measured ~7% slower at decode (Q5_1) than pairs.
  constexpr int kQuadSteps = kHasMin<Block> ? 0 : 1;
  for (; kQuadSteps && i + 3 < nb; i += 4) {
    __m512i xv[RX][2], init[RX][2];
    for (int c = 0; c < RX; ++c) {
      for (int h = 0; h < 2; ++h) {
        xv[c][h] = Load512(x[c]->qs + 32 * (i + 2 * h));
        init[c][h] = init512(c, i + 2 * h);
      }
    }
    __m512i lo[4], hi[4];  // pair p's lanes of blocks i, i + 1 and of i + 2, i + 3
    for (int p = 0; p < 4; ++p) lo[p] = hi[p] = _mm512_setzero_si512();
    for (int r = 0; r < RW; ++r) {
      const Block* b = rows[r] + i;
      PrefetchAhead<4 * sizeof(Block)>(b);
      const __m512i q01 = Codes2(b[0], b[1]);
      const __m512i q23 = Codes2(b[2], b[3]);
      for (int c = 0; c < RX; ++c) {
        lo[r * RX + c] = _mm512_dpbusd_epi32(init[c][0], q01, xv[c][0]);
        hi[r * RX + c] = _mm512_dpbusd_epi32(init[c][1], q23, xv[c][1]);
        for (int j = 0; j < 4; ++j) add_mins(b[j], i + j, r, c);
      }
    }
    const __m512 sums = _mm512_cvtepi32_ps(BlockSums4(lo, hi));
    acc = _mm_fmadd_ps(_mm512_castps512_ps128(sums), scales(i), acc);
    acc = _mm_fmadd_ps(_mm512_extractf32x4_ps(sums, 1), scales(i + 1), acc);
    acc = _mm_fmadd_ps(_mm512_extractf32x4_ps(sums, 2), scales(i + 2), acc);
    acc = _mm_fmadd_ps(_mm512_extractf32x4_ps(sums, 3), scales(i + 3), acc);
  }
  while (i + 1 < nb) {
    __m512i xv[RX], init[RX];
    for (int c = 0; c < RX; ++c) {
      xv[c] = Load512(x[c]->qs + 32 * i);
      init[c] = init512(c, i);
    }
    __m512i dots[4] = {_mm512_setzero_si512(), _mm512_setzero_si512(), _mm512_setzero_si512(),
                       _mm512_setzero_si512()};
    for (int r = 0; r < RW; ++r) {
      const Block& b0 = rows[r][i];
      const Block& b1 = rows[r][i + 1];
      PrefetchAhead<2 * sizeof(Block)>(&b0);
      const __m512i q = Codes2(b0, b1);
      for (int c = 0; c < RX; ++c) {
        dots[r * RX + c] = _mm512_dpbusd_epi32(init[c], q, xv[c]);
        add_mins(b0, i, r, c);
        add_mins(b1, i + 1, r, c);
      }
    }
    __m128i even, odd;
    BlockSums(dots, &even, &odd);
    acc = _mm_fmadd_ps(_mm_cvtepi32_ps(even), scales(i), acc);
    acc = _mm_fmadd_ps(_mm_cvtepi32_ps(odd), scales(i + 1), acc);
    i += 2;
  }
  if (i < nb) {
    __m512i dots[4] = {_mm512_setzero_si512(), _mm512_setzero_si512(), _mm512_setzero_si512(),
                       _mm512_setzero_si512()};
    for (int r = 0; r < RW; ++r) {
      const Block& b = rows[r][i];
      const __m256i q = Codes(b);
      for (int c = 0; c < RX; ++c) {
        const __m256i init = kShift < 0 ? _mm256_setzero_si256()
                                        : _mm256_slli_epi32(Load256(x[c]->nsum4 + 8 * i), kShift);
        dots[r * RX + c] =
            _mm512_zextsi256_si512(_mm256_dpbusd_epi32(init, q, Load256(x[c]->qs + 32 * i)));
        add_mins(b, i, r, c);
      }
    }
    __m128i even, odd;
    BlockSums(dots, &even, &odd);
    acc = _mm_fmadd_ps(_mm_cvtepi32_ps(even), scales(i), acc);
  }
  alignas(16) float out[4];
  _mm_store_ps(out, acc);
  for (int r = 0; r < RW; ++r) {
    for (int c = 0; c < RX; ++c) {
      if constexpr (kHasMin<Block>) {
        y[c * ldy + r] = out[r * RX + c] + mins[r][c];
      } else {
        y[c * ldy + r] = out[r * RX + c];
      }
    }
  }
}

// Words of `words` (a zmm whose low 128 bits hold 8 16-bit scales) spread
// so that word w of the result is scale idx[w]; idx built from int32 lanes
// of two equal words each.
inline __m512i SpreadWords(__m512i idx, __m128i words) {
  return _mm512_permutexvar_epi16(idx, _mm512_zextsi128_si512(words));
}

// Q4_K / Q5_K. Chunk c's 32 qs bytes, broadcast to both halves of a zmm,
// give sub-block 2c as low nibbles (bytes 0-31) and 2c + 1 as high ones
// (bytes 32-63, one masked 16-bit shift): 64 codes in element order against
// x's next 64 bytes. vpmaddubsw makes pairs of code x activation (at most
// 2 * 31 * 127, no saturation), vpdpwssd adds each pair times its sub-block's
// scale into lane l (elements 4l..4l+3): the exact int32 of the scaled dot
// the lane held when it was vpdpbusd then vpmulld, one multiply fewer.
// Per output and super-block, the 16 lanes are summed to one exact int32
// (sum_j scale_j <q, x>_j) and the mins' lanes to another (sum_j min_j
// sum32_j); then acc = fma(float(sum), d * d_x, acc) and min_acc =
// fma(float(mins), dmin * d_x, min_acc), super-blocks in order, and y =
// acc - min_acc: the sequence the AMX-INT8 prefill reproduces.
// This is the 1 x RX tile (one W row, w); the 4 x 1 one is DotK45Rows4.
template <bool kQ5, bool kGfni, int RX>
void DotK45(const uint8_t* w, const Q8Row* const* x, float* y, int64_t ldy) {
  static_assert(RX <= 4, "one xmm lane per x row");
  using Block = std::conditional_t<kQ5, BlockQ5_K, BlockQ4_K>;
  const __m512i m4 = _mm512_set1_epi8(0x0f);
  constexpr __mmask32 kHighHalf = 0xffff0000u;  // words 16-31: bytes 32-63
  // GFNI: bytes 0-31 keep their low nibble, bytes 32-63 take their high one.
  const __m512i nibbles = _mm512_inserti64x4(_mm512_set1_epi64(kLowNibble),
                                             _mm256_set1_epi64x(kHighNibbleDown), 1);
  __m512i chunk_scale[4];                       // words 0-15: scale 2c, 16-31: scale 2c + 1
  for (int c = 0; c < 4; ++c)
    chunk_scale[c] = _mm512_inserti64x4(_mm512_set1_epi16(static_cast<int16_t>(2 * c)),
                                        _mm256_set1_epi16(static_cast<int16_t>(2 * c + 1)), 1);
  // Lane c: the (W row, x row c) pair's chains (K45 order above).
  __m128 acc = _mm_setzero_ps(), min_acc = _mm_setzero_ps();
  for (int64_t i = 0; i < x[0]->cols / kQK; ++i) {
    __m512i sums[4], min_sums[4];
    for (int p = 0; p < 4; ++p) sums[p] = min_sums[p] = _mm512_setzero_si512();
    const Block& b = reinterpret_cast<const Block*>(w)[i];
    PrefetchAhead<sizeof(Block)>(&b);
    const __m128i scales_mins = DecodeKScalesSimd(b.scales);
    const __m128i scales16 = _mm_cvtepu8_epi16(scales_mins);
    const __m256i mins = _mm256_cvtepu8_epi32(_mm_unpackhi_epi64(scales_mins, scales_mins));
    __m512i qh;
    if constexpr (kQ5) qh = _mm512_broadcast_i64x4(Load256(b.qh));
    __m512i q[4], spread[4];  // chunk c's codes in element order; their scales per word
    for (int c = 0; c < 4; ++c) {
      const __m512i v = _mm512_broadcast_i64x4(Load256(b.qs + 32 * c));
      q[c] = kGfni ? Gf2p8Affine(v, nibbles)
                   : _mm512_and_si512(_mm512_mask_srli_epi16(v, kHighHalf, v, 4), m4);
      if constexpr (kQ5) {
        // Bit 2c of qh[l] tops bytes 0-31, bit 2c + 1 bytes 32-63.
        const __m512i bit = _mm512_inserti64x4(
            _mm512_castsi256_si512(_mm256_set1_epi8(static_cast<char>(1 << (2 * c)))),
            _mm256_set1_epi8(static_cast<char>(1 << (2 * c + 1))), 1);
        q[c] =
            _mm512_mask_add_epi8(q[c], _mm512_test_epi8_mask(qh, bit), q[c], _mm512_set1_epi8(16));
      }
      spread[c] = SpreadWords(chunk_scale[c], scales16);
    }
    for (int c = 0; c < RX; ++c) {
      const int8_t* xq = x[c]->qs + kQK * i;
      __m512i sum = _mm512_setzero_si512();
      for (int j = 0; j < 4; ++j)
        sum = _mm512_dpwssd_epi32(sum, _mm512_maddubs_epi16(q[j], Load512(xq + 64 * j)), spread[j]);
      sums[c] = sum;
      min_sums[c] = _mm512_zextsi256_si512(_mm256_mullo_epi32(mins, Load256(x[c]->sum32 + 8 * i)));
    }
    // Lane c: d * d_x and dmin * d_x of x row c, built in registers (XScales).
    const __m128 dx = XScales<RX>(x, i);
    acc = _mm_fmadd_ps(_mm_cvtepi32_ps(LaneTotals(sums)), _mm_mul_ps(_mm_set1_ps(F16(b.d)), dx),
                       acc);
    min_acc = _mm_fmadd_ps(_mm_cvtepi32_ps(LaneTotals(min_sums)),
                           _mm_mul_ps(_mm_set1_ps(F16(b.dmin)), dx), min_acc);
  }
  alignas(16) float out[4], out_min[4];
  _mm_store_ps(out, acc);
  _mm_store_ps(out_min, min_acc);
  for (int c = 0; c < RX; ++c) y[c * ldy] = out[c] - out_min[c];
}

// Q4_K / Q5_K at decode, the 4 x 1 tile: each W row takes DotK45's steps
// on the codes (the same int32 lanes, the same float operations in the same
// order, so the same bits), but what depends only on a block's 16 header
// bytes is done for the four rows at once. DotK45<4, 1> spent about 28 of its
// 44 ns per row (k = 1,024, one thread, Sapphire Rapids) unpacking: per row
// and super-block a 10-op scale decode, two scalar f16 conversions, products
// and broadcasts for d and dmin, and a vpmulld (two uops) and its own float
// ops for the mins. Here, per super-block of four rows: one scale decode of
// the four headers (DecodeKScales4), one vcvtph2ps of the eight d and dmin
// values times dx, the mins of two rows per zmm (vpmaddwd: a min times a
// 32-sum is exact in 16-bit factors), and each row's scale words spread
// straight from the decoded bytes widened once per two rows. About 30 vector
// ops per row and super-block where DotK45<4, 1> took about 50.
template <bool kQ5, bool kGfni>
void DotK45Rows4(const uint8_t* const* w, const Q8Row& x, float* y) {
  using Block = std::conditional_t<kQ5, BlockQ5_K, BlockQ4_K>;
  const __m512i m4 = _mm512_set1_epi8(0x0f);
  constexpr __mmask32 kHighHalf = 0xffff0000u;  // words 16-31: bytes 32-63
  const __m512i nibbles = _mm512_inserti64x4(_mm512_set1_epi64(kLowNibble),
                                             _mm256_set1_epi64x(kHighNibbleDown), 1);
  // Two rows' decoded bytes widened to words: row 2p + q's scales are words
  // 16q..16q+7 of words[p], its mins 16q+8..16q+15. Chunk c of row 2p + q
  // takes scale 2c (words 0-15) and 2c + 1 (16-31): spread_idx[q][c].
  __m512i spread_idx[2][4];
  for (int q = 0; q < 2; ++q)
    for (int c = 0; c < 4; ++c)
      spread_idx[q][c] =
          _mm512_inserti64x4(_mm512_set1_epi16(static_cast<int16_t>(16 * q + 2 * c)),
                             _mm256_set1_epi16(static_cast<int16_t>(16 * q + 2 * c + 1)), 1);
  // Int32 lane l of a row pair's mins: min l of row 2p (word 8 + l) for
  // l < 8, min l - 8 of row 2p + 1 (word 24 + l - 8) above; the odd words
  // are zeroed, so each lane is the min, zero-extended.
  const __m512i min_idx =
      _mm512_set_epi32(31, 30, 29, 28, 27, 26, 25, 24, 15, 14, 13, 12, 11, 10, 9, 8);
  constexpr __mmask32 kEvenWords = 0x55555555u;
  // (d, dmin) of each row: int32 lane 0 of each 128-bit lane of the headers.
  const __m512i dd_idx = _mm512_set_epi32(0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 12, 8, 4, 0);
  // d0 dmin0 d1 dmin1 ... to d0 d1 d2 d3 (low 128 bits), dmin0-3 (high).
  const __m256i d_then_dmin = _mm256_setr_epi32(0, 2, 4, 6, 1, 3, 5, 7);
  // Lane r: row r's chains (DotK45's order, one lane per row).
  __m128 acc = _mm_setzero_ps(), min_acc = _mm_setzero_ps();
  for (int64_t i = 0; i < x.cols / kQK; ++i) {
    const Block* b[4];
    for (int r = 0; r < 4; ++r) {
      b[r] = reinterpret_cast<const Block*>(w[r]) + i;
      PrefetchAhead<sizeof(Block)>(b[r]);
    }
    __m512i heads = _mm512_castsi128_si512(_mm_loadu_si128(reinterpret_cast<const __m128i*>(b[0])));
    heads = _mm512_inserti32x4(heads, _mm_loadu_si128(reinterpret_cast<const __m128i*>(b[1])), 1);
    heads = _mm512_inserti32x4(heads, _mm_loadu_si128(reinterpret_cast<const __m128i*>(b[2])), 2);
    heads = _mm512_inserti32x4(heads, _mm_loadu_si128(reinterpret_cast<const __m128i*>(b[3])), 3);
    const __m512i scales_mins = DecodeKScales4(heads);
    const __m512i words[2] = {
        _mm512_cvtepu8_epi16(_mm512_castsi512_si256(scales_mins)),
        _mm512_cvtepu8_epi16(_mm512_extracti64x4_epi64(scales_mins, 1))};
    // d0 dmin0 d1 dmin1 ... as f32, each times dx: the products DotK45 takes.
    const __m256 d_dx = _mm256_mul_ps(
        _mm256_cvtph_ps(_mm512_castsi512_si128(_mm512_permutexvar_epi32(dd_idx, heads))),
        _mm256_set1_ps(x.d[i]));
    const __m256 d4_dmin4 = _mm256_permutexvar_ps(d_then_dmin, d_dx);
    // The 32-sums in both halves: each row pair's mins times them (lanes
    // 0-7 row 2p, 8-15 row 2p + 1), summed per row.
    const __m512i sum32 = _mm512_broadcast_i64x4(Load256(x.sum32 + 8 * i));
    __m512i min_pairs[4] = {_mm512_setzero_si512(), _mm512_setzero_si512(),
                            _mm512_setzero_si512(), _mm512_setzero_si512()};
    for (int p = 0; p < 2; ++p) {
      const __m512i mins = _mm512_maskz_permutexvar_epi16(kEvenWords, min_idx, words[p]);
      min_pairs[p] = _mm512_madd_epi16(mins, sum32);
    }
    __m128i rows02, rows13;
    BlockSums(min_pairs, &rows02, &rows13);
    min_acc = _mm_fmadd_ps(_mm_cvtepi32_ps(_mm_unpacklo_epi32(rows02, rows13)),
                           _mm256_extractf128_ps(d4_dmin4, 1), min_acc);
    __m512i sums[4];
    __m512i xv[4];
    for (int c = 0; c < 4; ++c) xv[c] = Load512(x.qs + kQK * i + 64 * c);
    for (int r = 0; r < 4; ++r) {
      __m512i qh;
      if constexpr (kQ5) qh = _mm512_broadcast_i64x4(Load256(b[r]->qh));
      __m512i sum = _mm512_setzero_si512();
      for (int c = 0; c < 4; ++c) {
        const __m512i v = _mm512_broadcast_i64x4(Load256(b[r]->qs + 32 * c));
        __m512i q = kGfni ? Gf2p8Affine(v, nibbles)
                          : _mm512_and_si512(_mm512_mask_srli_epi16(v, kHighHalf, v, 4), m4);
        if constexpr (kQ5) {
          const __m512i bit = _mm512_inserti64x4(
              _mm512_castsi256_si512(_mm256_set1_epi8(static_cast<char>(1 << (2 * c)))),
              _mm256_set1_epi8(static_cast<char>(1 << (2 * c + 1))), 1);
          q = _mm512_mask_add_epi8(q, _mm512_test_epi8_mask(qh, bit), q, _mm512_set1_epi8(16));
        }
        const __m512i spread = _mm512_permutexvar_epi16(spread_idx[r & 1][c], words[r >> 1]);
        sum = _mm512_dpwssd_epi32(sum, _mm512_maddubs_epi16(q, xv[c]), spread);
      }
      sums[r] = sum;
    }
    acc = _mm_fmadd_ps(_mm_cvtepi32_ps(LaneTotals(sums)), _mm256_castps256_ps128(d4_dmin4), acc);
  }
  alignas(16) float out[4], out_min[4];
  _mm_store_ps(out, acc);
  _mm_store_ps(out_min, min_acc);
  for (int r = 0; r < 4; ++r) y[r] = out[r] - out_min[r];
}

// Q6_K. Half h's 64 ql bytes give elements [0, 64) of the half as low
// nibbles and [64, 128) as high ones, in order; the two high bits come from
// the half's 32 qh bytes, shifted per 32-element quarter (16-bit shifts; the
// 0x30 mask drops what crosses a byte), joined to the nibbles by one
// vpternlog. vpdpbusd makes each lane l (elements 4l..4l+3 of the 64) the
// sum of its four (q - 32) * x, starting from -32 * their x sum (x's nsum4,
// shared by a tile's W rows); that sum fits 16 bits (at most 4 * 32 * 127),
// so vpdpwssd adds it times the sub-block's scale, held in the lane's low
// word (high word 0). Each int32 lane holds exactly what it held when pairs
// of q * x and of 32 * x were made by vpmaddubsw and subtracted (one
// operation more per 64 elements), so the bits are those. Per output and
// super-block the 16 lanes are summed to one exact int32, then acc =
// fma(float(sum), d * d_x, acc), super-blocks in order: the sequence the
// AMX-INT8 prefill reproduces.
template <bool kGfni, int RW, int RX>
void DotQ6_K(const uint8_t* const* w, const Q8Row* const* x, float* y, int64_t ldy) {
  const __m512i m4 = _mm512_set1_epi8(0x0f), m30 = _mm512_set1_epi8(0x30);
  const __m512i shift_lo = _mm512_inserti64x4(_mm512_set1_epi16(4), _mm256_set1_epi16(2), 1);
  const __m512i shift_hi = _mm512_inserti64x4(_mm512_setzero_si512(), _mm256_set1_epi16(2), 1);
  constexpr int kOr = 0xea;  // vpternlog: (a & b) | c
  // GFNI: the high bits of quarters 0, 1 (lo) and 2, 3 (hi) of a half, one op each.
  const __m512i high_bits_lo = _mm512_inserti64x4(_mm512_set1_epi64(kQ6HighBits[0]),
                                                  _mm256_set1_epi64x(kQ6HighBits[1]), 1);
  const __m512i high_bits_hi = _mm512_inserti64x4(_mm512_set1_epi64(kQ6HighBits[2]),
                                                  _mm256_set1_epi64x(kQ6HighBits[3]), 1);
  // Group g (elements [64 g, 64 g + 64)): int32 lane l takes the scale of
  // sub-block 4 g + l / 4 in its low word; the high words are zeroed.
  constexpr __mmask32 kEvenWords = 0x55555555u;
  __m512i group_scale[4];
  for (int g = 0; g < 4; ++g)
    group_scale[g] = _mm512_set_epi32(4 * g + 3, 4 * g + 3, 4 * g + 3, 4 * g + 3, 4 * g + 2,
                                      4 * g + 2, 4 * g + 2, 4 * g + 2, 4 * g + 1, 4 * g + 1,
                                      4 * g + 1, 4 * g + 1, 4 * g, 4 * g, 4 * g, 4 * g);
  static_assert((RW == kTileRows && RX == 1) || (RW == 1 && RX <= 4), "the 4 x 1 and 1 x RX tiles");
  __m128 acc = _mm_setzero_ps();  // lane r * RX + c: the pair's chain
  for (int64_t i = 0; i < x[0]->cols / kQK; ++i) {
    __m512i sums[4] = {_mm512_setzero_si512(), _mm512_setzero_si512(), _mm512_setzero_si512(),
                       _mm512_setzero_si512()};
    // -32 * each lane's x sum, per x row and group, shared by the tile's W rows.
    __m512i x_init[RX][4];
    for (int c = 0; c < RX; ++c)
      for (int g = 0; g < 4; ++g)
        x_init[c][g] = _mm512_slli_epi32(Load512(x[c]->nsum4 + kQK / 4 * i + 16 * g), 5);
    // Lane r * RX + c: d of W row r times d_x of x row c, built in registers.
    // The 4 x 1 tile converts its rows' four f16 d at once and multiplies
    // them by dx as one vector; a 1 x RX tile multiplies its row's d by the
    // x rows' scales (XScales): the products each pair took alone.
    __m128 scale;
    if constexpr (RW == kTileRows && RX == 1) {
      const BlockQ6_K* b0 = reinterpret_cast<const BlockQ6_K*>(w[0]) + i;
      const BlockQ6_K* b1 = reinterpret_cast<const BlockQ6_K*>(w[1]) + i;
      const BlockQ6_K* b2 = reinterpret_cast<const BlockQ6_K*>(w[2]) + i;
      const BlockQ6_K* b3 = reinterpret_cast<const BlockQ6_K*>(w[3]) + i;
      const __m128i d16 = _mm_setr_epi16(static_cast<int16_t>(b0->d), static_cast<int16_t>(b1->d),
                                         static_cast<int16_t>(b2->d), static_cast<int16_t>(b3->d),
                                         0, 0, 0, 0);
      scale = _mm_mul_ps(_mm_cvtph_ps(d16), _mm_set1_ps(x[0]->d[i]));
    } else {
      const BlockQ6_K& b = reinterpret_cast<const BlockQ6_K*>(w[0])[i];
      scale = _mm_mul_ps(_mm_set1_ps(F16(b.d)), XScales<RX>(x, i));
    }
    for (int r = 0; r < RW; ++r) {
      const BlockQ6_K& b = reinterpret_cast<const BlockQ6_K*>(w[r])[i];
      PrefetchAhead<sizeof(BlockQ6_K)>(&b);
      const __m512i scales16 = _mm512_zextsi256_si512(
          _mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(b.scales))));
      __m512i sum[RX];
      for (int c = 0; c < RX; ++c) sum[c] = _mm512_setzero_si512();
      for (int h = 0; h < 2; ++h) {
        const __m512i v = Load512(b.ql + 64 * h);
        const __m512i qh = _mm512_broadcast_i64x4(Load256(b.qh + 32 * h));
        const __m512i hb[2] = {
            kGfni ? Gf2p8Affine(qh, high_bits_lo)
                  : _mm512_and_si512(_mm512_sllv_epi16(qh, shift_lo), m30),
            kGfni ? Gf2p8Affine(qh, high_bits_hi)
                  : _mm512_and_si512(_mm512_srlv_epi16(qh, shift_hi), m30)};
        const __m512i q[2] = {_mm512_ternarylogic_epi64(v, m4, hb[0], kOr),
                              _mm512_ternarylogic_epi64(_mm512_srli_epi16(v, 4), m4, hb[1], kOr)};
        for (int s = 0; s < 2; ++s) {  // elements [64 s, 64 s + 64) of half h
          const int g = 2 * h + s;
          const __m512i spread =
              _mm512_maskz_permutexvar_epi16(kEvenWords, group_scale[g], scales16);
          for (int c = 0; c < RX; ++c) {
            const __m512i xv = Load512(x[c]->qs + kQK * i + 64 * g);
            const __m512i lanes = _mm512_dpbusd_epi32(x_init[c][g], q[s], xv);
            sum[c] = _mm512_dpwssd_epi32(sum[c], lanes, spread);
          }
        }
      }
      for (int c = 0; c < RX; ++c) sums[r * RX + c] = sum[c];
    }
    acc = _mm_fmadd_ps(_mm_cvtepi32_ps(LaneTotals(sums)), scale, acc);
  }
  alignas(16) float out[4];
  _mm_store_ps(out, acc);
  for (int r = 0; r < RW; ++r)
    for (int c = 0; c < RX; ++c) y[c * ldy + r] = out[r * RX + c];
}

// x rows [c0, c0 + RX) against every W row, one W row at a time.
template <template <int, int> class Kernel, int RX>
void DownRows(const uint8_t* w, size_t row_bytes, int64_t rows, const Q8Row* x, float* y,
              int64_t ldy) {
  const Q8Row* xs[RX];
  for (int c = 0; c < RX; ++c) xs[c] = &x[c];
  for (int64_t r = 0; r < rows; ++r) {
    const uint8_t* wr = w + r * row_bytes;
    Kernel<1, RX>::Run(&wr, xs, y + r, ldy);
  }
}

// Every (W row, x row) pair of rows x nx by tiles: x rows in groups of up to
// four, each W row unpacked once per group; a single x row takes W rows four
// at a time (4 x 1), the last ones alone.
template <template <int, int> class Kernel>
void Tiles(const uint8_t* w, size_t row_bytes, int64_t rows, const Q8Row* x, int64_t nx, float* y,
           int64_t ldy) {
  int64_t c0 = 0;
  for (; nx - c0 >= 2; c0 += std::min<int64_t>(kTileRows, nx - c0)) {
    float* yc = y + c0 * ldy;
    switch (std::min<int64_t>(kTileRows, nx - c0)) {
      case 2:
        DownRows<Kernel, 2>(w, row_bytes, rows, x + c0, yc, ldy);
        break;
      case 3:
        DownRows<Kernel, 3>(w, row_bytes, rows, x + c0, yc, ldy);
        break;
      default:
        DownRows<Kernel, kTileRows>(w, row_bytes, rows, x + c0, yc, ldy);
        break;
    }
  }
  if (c0 == nx) return;
  const Q8Row* xs = &x[c0];
  float* yc = y + c0 * ldy;
  int64_t r = 0;
  for (; r + kTileRows <= rows; r += kTileRows) {
    const uint8_t* wr[kTileRows];
    for (int j = 0; j < kTileRows; ++j) wr[j] = w + (r + j) * row_bytes;
    Kernel<kTileRows, 1>::Run(wr, &xs, yc + r, ldy);
  }
  for (; r < rows; ++r) {
    const uint8_t* wr = w + r * row_bytes;
    Kernel<1, 1>::Run(&wr, &xs, yc + r, ldy);
  }
}

template <typename Block>
struct Blocks32 {
  template <int RW, int RX>
  struct K {
    static void Run(const uint8_t* const* w, const Q8Row* const* x, float* y, int64_t ldy) {
      Dot32Blocks<Block, RW, RX>(w, x, y, ldy);
    }
  };
};
template <bool kQ5, bool kGfni>
struct K45 {
  template <int RW, int RX>
  struct K {
    static void Run(const uint8_t* const* w, const Q8Row* const* x, float* y, int64_t ldy) {
      if constexpr (RW == kTileRows && RX == 1) {
        DotK45Rows4<kQ5, kGfni>(w, *x[0], y);  // one x row: y[r] for W row r
      } else {
        static_assert(RW == 1, "Tiles runs 4 x 1 and 1 x RX tiles");
        DotK45<kQ5, kGfni, RX>(w[0], x, y, ldy);
      }
    }
  };
};
template <bool kGfni>
struct Q6K {
  template <int RW, int RX>
  struct K {
    static void Run(const uint8_t* const* w, const Q8Row* const* x, float* y, int64_t ldy) {
      DotQ6_K<kGfni, RW, RX>(w, x, y, ldy);
    }
  };
};

// CPUID leaf 7, ECX bit 8. Read here rather than in CpuFeatures: only these
// kernels use it, and only on the AVX512-VNNI level, whose zmm state the
// caller has already checked.
bool HasGfni() {
  static const bool gfni = [] {
    unsigned a, b, c, d;
    return __get_cpuid_count(7, 0, &a, &b, &c, &d) && ((c >> 8) & 1) != 0;
  }();
  return gfni;
}

}  // namespace

QuantDotFn QuantDotKernel(DType weights) { return QuantDotKernel(weights, HasGfni()); }

QuantDotFn QuantDotKernel(DType weights, bool gfni) {
  if (!DetectCpuFeatures().avx512_vnni || (gfni && !HasGfni())) return nullptr;
  switch (weights) {
    case DType::kQ8_0:
      return Tiles<Blocks32<BlockQ8_0>::K>;
    case DType::kQ4_0:
      return Tiles<Blocks32<BlockQ4_0>::K>;
    case DType::kQ4_1:
      return Tiles<Blocks32<BlockQ4_1>::K>;
    case DType::kQ5_0:
      return Tiles<Blocks32<BlockQ5_0>::K>;
    case DType::kQ5_1:
      return Tiles<Blocks32<BlockQ5_1>::K>;
    case DType::kQ4_K:
      return gfni ? Tiles<K45<false, true>::K> : Tiles<K45<false, false>::K>;
    case DType::kQ5_K:
      return gfni ? Tiles<K45<true, true>::K> : Tiles<K45<true, false>::K>;
    case DType::kQ6_K:
      return gfni ? Tiles<Q6K<true>::K> : Tiles<Q6K<false>::K>;
    default:
      return nullptr;
  }
}

}  // namespace kvfork::avx512
