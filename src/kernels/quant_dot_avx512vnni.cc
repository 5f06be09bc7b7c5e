// AVX512-VNNI dot kernels of every quantized format (quant_isa.h), on
// vpdpbusd: unsigned weight codes times signed activation codes, four
// products summed into each 32-bit lane. A format's code offset (q - 8,
// q - 32, ...) enters as the lane's starting value, offset * nsum4 (quant.h),
// so each lane holds the exact sum of four (q - offset) * x; signed Q8_0
// codes are biased by +128 the same way. Sub-block scales multiply the int32
// lanes; a (super-)block's lanes then go to float once, times d_w * d_x, into
// one float accumulator per row (two for the 32-blocks, even and odd blocks),
// summed by halves at the end. The order depends on nothing but the row, so
// every M, chunking and thread count gives the same bits.
// GCC 12 AVX-512 intrinsic headers build some results from _mm512_undefined_*
// and warn about them (a known false positive, as in matmul_avx512.cc).
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"

#include <immintrin.h>

#include <cstring>

#include "core/cpu_features.h"
#include "kernels/quant_blocks.h"
#include "kernels/quant_isa.h"

namespace kvfork::avx512 {
namespace {

inline float F16(uint16_t h) { return _cvtsh_ss(h); }

inline float Hsum8(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_shuffle_ps(s, s, 1));
  return _mm_cvtss_f32(s);
}
inline float Hsum16(__m512 v) {
  return Hsum8(_mm256_add_ps(_mm512_castps512_ps256(v),
                             _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v), 1))));
}

inline __m256i Load256(const void* p) { return _mm256_loadu_si256(static_cast<const __m256i*>(p)); }
inline __m512i Load512(const void* p) { return _mm512_loadu_si512(p); }

// The 32 codes of a 4-bit block, element order: low nibbles then high ones.
inline __m256i Nibbles32(const uint8_t* qs) {
  const __m128i v = _mm_loadu_si128(reinterpret_cast<const __m128i*>(qs));
  const __m128i m4 = _mm_set1_epi8(0x0f);
  return _mm256_inserti128_si256(_mm256_castsi128_si256(_mm_and_si128(v, m4)),
                                 _mm_and_si128(_mm_srli_epi16(v, 4), m4), 1);
}
// Adds 16 to the codes whose bit is set in the block's 32 high bits.
inline __m256i AddHighBits(__m256i q, const uint8_t* qh) {
  uint32_t bits;
  std::memcpy(&bits, qh, 4);
  return _mm256_mask_add_epi8(q, static_cast<__mmask32>(bits), q, _mm256_set1_epi8(16));
}

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
template <typename Block>
constexpr int OffsetShift() {
  if constexpr (std::is_same_v<Block, BlockQ8_0>) return 7;
  if constexpr (std::is_same_v<Block, BlockQ4_0>) return 3;
  if constexpr (std::is_same_v<Block, BlockQ5_0>) return 4;
  return -1;  // *_1: no offset, a min instead
}
template <typename Block>
constexpr bool kHasMin = std::is_same_v<Block, BlockQ4_1> || std::is_same_v<Block, BlockQ5_1>;

// The kernels below take R rows at once (R = 1..kMaxRows) so the rows share
// the activation loads and their chains overlap; every step of a row is the
// same for any R, so a row's bits do not depend on how many rows a call or a
// task covers. w[r] is row r.
constexpr int kMaxRows = 4;

template <typename Block, int R>
void Dot32Blocks(const uint8_t* const* w, const Q8Row& x, float* y) {
  const int64_t nb = x.cols / 32;
  __m256 acc[R];
  float mins[R];
  for (int r = 0; r < R; ++r) {
    acc[r] = _mm256_setzero_ps();
    mins[r] = 0.0f;
  }
  constexpr int kShift = OffsetShift<Block>();
  for (int64_t i = 0; i < nb; ++i) {
    const __m256i xv = Load256(x.qs + 32 * i);
    const __m256i init =
        kShift < 0 ? _mm256_setzero_si256() : _mm256_slli_epi32(Load256(x.nsum4 + 8 * i), kShift);
    for (int r = 0; r < R; ++r) {
      const Block& b = reinterpret_cast<const Block*>(w[r])[i];
      const __m256i dot = _mm256_dpbusd_epi32(init, Codes(b), xv);
      acc[r] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(dot), _mm256_set1_ps(F16(b.d) * x.d[i]), acc[r]);
      if constexpr (kHasMin<Block>) mins[r] += F16(b.m) * x.d[i] * static_cast<float>(x.sum32[i]);
    }
  }
  for (int r = 0; r < R; ++r) y[r] = Hsum8(acc[r]) + mins[r];
}

// Lane l of the result is lane (l / 8 + 2 * pair) of v (pair of sub-blocks of 32).
inline __m512i SpreadPairs(__m512i v, int pair) {
  return _mm512_permutexvar_epi32(
      _mm512_set_epi32(2 * pair + 1, 2 * pair + 1, 2 * pair + 1, 2 * pair + 1, 2 * pair + 1,
                       2 * pair + 1, 2 * pair + 1, 2 * pair + 1, 2 * pair, 2 * pair, 2 * pair,
                       2 * pair, 2 * pair, 2 * pair, 2 * pair, 2 * pair),
      v);
}

// Q4_K / Q5_K. 64 bytes of qs hold four sub-blocks of 32 as [low nibbles of
// chunk c | low of c + 1] and [high of c | high of c + 1]; one 64-bit
// permute each puts them in element order [2c | 2c + 1] and [2c + 2 | 2c + 3].
template <bool kQ5, int R>
void DotK45(const uint8_t* const* w, const Q8Row& x, float* y) {
  using Block = std::conditional_t<kQ5, BlockQ5_K, BlockQ4_K>;
  const __m512i m4 = _mm512_set1_epi8(0x0f);
  const __m512i first = _mm512_set_epi64(11, 10, 9, 8, 3, 2, 1, 0);
  const __m512i second = _mm512_set_epi64(15, 14, 13, 12, 7, 6, 5, 4);
  __m512 acc[R];
  __m256 min_acc[R];
  for (int r = 0; r < R; ++r) {
    acc[r] = _mm512_setzero_ps();
    min_acc[r] = _mm256_setzero_ps();
  }
  for (int64_t i = 0; i < x.cols / kQK; ++i) {
    const int8_t* xq = x.qs + kQK * i;
    const __m256i sum32 = Load256(x.sum32 + 8 * i);
    for (int r = 0; r < R; ++r) {
      const Block& b = reinterpret_cast<const Block*>(w[r])[i];
      const KScales k = DecodeKScales(b.scales);
      const __m512i scales =
          _mm512_cvtepu8_epi32(_mm_cvtsi64_si128(static_cast<int64_t>(k.scales)));
      __m512i qh;
      if constexpr (kQ5) qh = _mm512_broadcast_i64x4(Load256(b.qh));
      __m512i sum = _mm512_setzero_si512();
      for (int half = 0; half < 2; ++half) {
        const __m512i v = Load512(b.qs + 64 * half);
        const __m512i lo = _mm512_and_si512(v, m4);
        const __m512i hi = _mm512_and_si512(_mm512_srli_epi16(v, 4), m4);
        for (int p = 0; p < 2; ++p) {
          const int pair = 2 * half + p;  // sub-blocks 2 pair, 2 pair + 1
          __m512i q = _mm512_permutex2var_epi64(lo, p == 0 ? first : second, hi);
          if constexpr (kQ5) {
            // Bit 2 pair of qh[l] tops bytes 0-31, bit 2 pair + 1 bytes 32-63.
            const __m512i bit = _mm512_inserti64x4(
                _mm512_castsi256_si512(_mm256_set1_epi8(static_cast<char>(1 << (2 * pair)))),
                _mm256_set1_epi8(static_cast<char>(1 << (2 * pair + 1))), 1);
            q = _mm512_mask_add_epi8(q, _mm512_test_epi8_mask(qh, bit), q, _mm512_set1_epi8(16));
          }
          const __m512i dot =
              _mm512_dpbusd_epi32(_mm512_setzero_si512(), q, Load512(xq + 64 * pair));
          sum = _mm512_add_epi32(sum, _mm512_mullo_epi32(dot, SpreadPairs(scales, pair)));
        }
      }
      acc[r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(sum), _mm512_set1_ps(F16(b.d) * x.d[i]), acc[r]);
      const __m256i mins = _mm256_mullo_epi32(
          _mm256_cvtepu8_epi32(_mm_cvtsi64_si128(static_cast<int64_t>(k.mins))), sum32);
      min_acc[r] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(mins), _mm256_set1_ps(F16(b.dmin) * x.d[i]),
                                   min_acc[r]);
    }
  }
  for (int r = 0; r < R; ++r) y[r] = Hsum16(acc[r]) - Hsum8(min_acc[r]);
}

// Q6_K. Half h's 64 ql bytes give elements [0, 64) of the half as low
// nibbles and [64, 128) as high ones, in order; the two high bits come from
// the half's 32 qh bytes, shifted per 32-element quarter (16-bit shifts; the
// 0x30 mask drops what crosses a byte).
template <int R>
void DotQ6_K(const uint8_t* const* w, const Q8Row& x, float* y) {
  const __m512i m4 = _mm512_set1_epi8(0x0f), m30 = _mm512_set1_epi8(0x30);
  const __m512i shift_lo = _mm512_inserti64x4(_mm512_set1_epi16(4), _mm256_set1_epi16(2), 1);
  const __m512i shift_hi = _mm512_inserti64x4(_mm512_setzero_si512(), _mm256_set1_epi16(2), 1);
  __m512 acc[R];
  for (int r = 0; r < R; ++r) acc[r] = _mm512_setzero_ps();
  for (int64_t i = 0; i < x.cols / kQK; ++i) {
    __m512i sum[R];
    __m512i scales[R];
    for (int r = 0; r < R; ++r) {
      sum[r] = _mm512_setzero_si512();
      scales[r] = _mm512_cvtepi8_epi32(_mm_loadu_si128(
          reinterpret_cast<const __m128i*>(reinterpret_cast<const BlockQ6_K*>(w[r])[i].scales)));
    }
    for (int h = 0; h < 2; ++h) {
      for (int s = 0; s < 2; ++s) {  // elements [64 s, 64 s + 64) of half h
        const int64_t e = kQK * i + 128 * h + 64 * s;
        const __m512i xv = Load512(x.qs + e);
        const __m512i init = _mm512_slli_epi32(Load512(x.nsum4 + e / 4), 5);
        // Lane l: sub-block of 16 number 4 (2 h + s) + l / 4.
        const int c = 2 * h + s;
        const __m512i spread = _mm512_set_epi32(
            4 * c + 3, 4 * c + 3, 4 * c + 3, 4 * c + 3, 4 * c + 2, 4 * c + 2, 4 * c + 2, 4 * c + 2,
            4 * c + 1, 4 * c + 1, 4 * c + 1, 4 * c + 1, 4 * c, 4 * c, 4 * c, 4 * c);
        for (int r = 0; r < R; ++r) {
          const BlockQ6_K& b = reinterpret_cast<const BlockQ6_K*>(w[r])[i];
          const __m512i v = Load512(b.ql + 64 * h);
          const __m512i qh = _mm512_broadcast_i64x4(Load256(b.qh + 32 * h));
          const __m512i q =
              s == 0 ? _mm512_or_si512(_mm512_and_si512(v, m4),
                                       _mm512_and_si512(_mm512_sllv_epi16(qh, shift_lo), m30))
                     : _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi16(v, 4), m4),
                                       _mm512_and_si512(_mm512_srlv_epi16(qh, shift_hi), m30));
          const __m512i dot = _mm512_dpbusd_epi32(init, q, xv);
          sum[r] = _mm512_add_epi32(
              sum[r], _mm512_mullo_epi32(dot, _mm512_permutexvar_epi32(spread, scales[r])));
        }
      }
    }
    for (int r = 0; r < R; ++r) {
      const float d = F16(reinterpret_cast<const BlockQ6_K*>(w[r])[i].d) * x.d[i];
      acc[r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(sum[r]), _mm512_set1_ps(d), acc[r]);
    }
  }
  for (int r = 0; r < R; ++r) y[r] = Hsum16(acc[r]);
}

// Rows in groups of kMaxRows, the rest one at a time.
template <template <int> class Kernel>
void Rows(const uint8_t* w, size_t row_bytes, int64_t rows, const Q8Row& x, float* y) {
  int64_t r = 0;
  for (; r + kMaxRows <= rows; r += kMaxRows) {
    const uint8_t* wr[kMaxRows];
    for (int j = 0; j < kMaxRows; ++j) wr[j] = w + (r + j) * row_bytes;
    Kernel<kMaxRows>::Run(wr, x, y + r);
  }
  for (; r < rows; ++r) {
    const uint8_t* wr = w + r * row_bytes;
    Kernel<1>::Run(&wr, x, y + r);
  }
}

template <typename Block>
struct Blocks32 {
  template <int R>
  struct K {
    static void Run(const uint8_t* const* w, const Q8Row& x, float* y) {
      Dot32Blocks<Block, R>(w, x, y);
    }
  };
};
template <bool kQ5>
struct K45 {
  template <int R>
  struct K {
    static void Run(const uint8_t* const* w, const Q8Row& x, float* y) { DotK45<kQ5, R>(w, x, y); }
  };
};
template <int R>
struct Q6K {
  static void Run(const uint8_t* const* w, const Q8Row& x, float* y) { DotQ6_K<R>(w, x, y); }
};

}  // namespace

QuantDotFn QuantDotKernel(DType weights) {
  if (!DetectCpuFeatures().avx512_vnni) return nullptr;
  switch (weights) {
    case DType::kQ8_0:
      return Rows<Blocks32<BlockQ8_0>::K>;
    case DType::kQ4_0:
      return Rows<Blocks32<BlockQ4_0>::K>;
    case DType::kQ4_1:
      return Rows<Blocks32<BlockQ4_1>::K>;
    case DType::kQ5_0:
      return Rows<Blocks32<BlockQ5_0>::K>;
    case DType::kQ5_1:
      return Rows<Blocks32<BlockQ5_1>::K>;
    case DType::kQ4_K:
      return Rows<K45<false>::K>;
    case DType::kQ5_K:
      return Rows<K45<true>::K>;
    case DType::kQ6_K:
      return Rows<Q6K>;
    default:
      return nullptr;
  }
}

}  // namespace kvfork::avx512
