// AVX2 dot kernels of Q8_0, Q4_0, Q4_K, Q5_K and Q6_K (quant_isa.h), on
// vpmaddubsw: unsigned weight codes times signed activation codes, pairs
// summed to int16 (no saturation: codes < 64, or |w| <= 128 against
// |x| <= 127 for Q8_0, whose sign moves onto x), then vpmaddwd sums pairs of
// those into int32 lanes, by 1 or by the sub-block's scale. Each (super-)block's
// lanes go to float once, times d_w * d_x, into the row's float accumulator;
// the order depends on nothing but the row (invariant 1).
#include <immintrin.h>

#include <cstring>
#include <type_traits>

#include "kernels/quant_blocks.h"
#include "kernels/quant_isa.h"

namespace kvfork::avx2 {
namespace {

inline float F16(uint16_t h) { return _cvtsh_ss(h); }

inline float Hsum8(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_shuffle_ps(s, s, 1));
  return _mm_cvtss_f32(s);
}

inline __m256i Load256(const void* p) { return _mm256_loadu_si256(static_cast<const __m256i*>(p)); }

// int32 lanes: sum over 4 consecutive elements of w * x * scale.
inline __m256i Dot4(__m256i w_u8, __m256i x_s8, __m256i scale16) {
  return _mm256_madd_epi16(_mm256_maddubs_epi16(w_u8, x_s8), scale16);
}

// Four blocks a step, each as the one-block step below and in its order,
// but their f16 weight scales convert as one vector and multiply the x scales
// as one (scalar conversions and broadcasts per block cost about as much as
// the block's integer product).
float DotQ8_0(const uint8_t* row, const Q8Row& x) {
  const BlockQ8_0* b = reinterpret_cast<const BlockQ8_0*>(row);
  const __m256i ones = _mm256_set1_epi16(1);
  __m256 acc[2] = {_mm256_setzero_ps(), _mm256_setzero_ps()};
  const int64_t nb = x.cols / 32;
  int64_t i = 0;
  for (; i + 3 < nb; i += 4) {
    const uint64_t d16 = uint64_t{b[i].d} | uint64_t{b[i + 1].d} << 16 |
                         uint64_t{b[i + 2].d} << 32 | uint64_t{b[i + 3].d} << 48;
    const __m128 s4 = _mm_mul_ps(_mm_cvtph_ps(_mm_cvtsi64_si128(static_cast<int64_t>(d16))),
                                 _mm_loadu_ps(x.d + i));
    const __m256 s8 = _mm256_castps128_ps256(s4);
    for (int j = 0; j < 4; ++j) {
      const __m256i w = Load256(b[i + j].qs);
      const __m256i xs = _mm256_sign_epi8(Load256(x.qs + 32 * (i + j)), w);
      const __m256i dot = Dot4(_mm256_abs_epi8(w), xs, ones);
      const __m256 scale = _mm256_permutevar8x32_ps(s8, _mm256_set1_epi32(j));
      acc[j & 1] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(dot), scale, acc[j & 1]);
    }
  }
  for (; i < nb; ++i) {
    const __m256i w = Load256(b[i].qs);
    const __m256i xs = _mm256_sign_epi8(Load256(x.qs + 32 * i), w);
    const __m256i dot = Dot4(_mm256_abs_epi8(w), xs, ones);
    acc[i & 1] =
        _mm256_fmadd_ps(_mm256_cvtepi32_ps(dot), _mm256_set1_ps(F16(b[i].d) * x.d[i]), acc[i & 1]);
  }
  return Hsum8(_mm256_add_ps(acc[0], acc[1]));
}

float DotQ4_0(const uint8_t* row, const Q8Row& x) {
  const BlockQ4_0* b = reinterpret_cast<const BlockQ4_0*>(row);
  const __m256i ones = _mm256_set1_epi16(1);
  const __m128i m4 = _mm_set1_epi8(0x0f);
  __m256 acc[2] = {_mm256_setzero_ps(), _mm256_setzero_ps()};
  for (int64_t i = 0; i < x.cols / 32; ++i) {
    const __m128i v = _mm_loadu_si128(reinterpret_cast<const __m128i*>(b[i].qs));
    const __m256i q =
        _mm256_set_m128i(_mm_and_si128(_mm_srli_epi16(v, 4), m4), _mm_and_si128(v, m4));
    // q - 8: the offset's share of each lane is 8 * nsum4.
    const __m256i dot = _mm256_add_epi32(Dot4(q, Load256(x.qs + 32 * i), ones),
                                         _mm256_slli_epi32(Load256(x.nsum4 + 8 * i), 3));
    acc[i & 1] =
        _mm256_fmadd_ps(_mm256_cvtepi32_ps(dot), _mm256_set1_ps(F16(b[i].d) * x.d[i]), acc[i & 1]);
  }
  return Hsum8(_mm256_add_ps(acc[0], acc[1]));
}

// Q4_K / Q5_K: chunk c's 32 qs bytes are sub-blocks 2c (low nibbles) and
// 2c + 1 (high), each already in element order (Q5_K: plus bits 2c and
// 2c + 1 of qh[l] as bit 4); vpmaddwd applies the 6-bit scales.
template <bool kQ5>
float DotK45(const uint8_t* row, const Q8Row& x) {
  using Block = std::conditional_t<kQ5, BlockQ5_K, BlockQ4_K>;
  const Block* b = reinterpret_cast<const Block*>(row);
  const __m256i m4 = _mm256_set1_epi8(0x0f), bit4 = _mm256_set1_epi8(0x10);
  __m256 acc = _mm256_setzero_ps(), min_acc = _mm256_setzero_ps();
  for (int64_t i = 0; i < x.cols / kQK; ++i) {
    const KScales k = DecodeKScales(b[i].scales);
    const int8_t* xq = x.qs + kQK * i;
    __m256i qh;
    if constexpr (kQ5) qh = Load256(b[i].qh);
    __m256i sum = _mm256_setzero_si256();
    for (int c = 0; c < 4; ++c) {
      const __m256i v = Load256(b[i].qs + 32 * c);
      __m256i lo = _mm256_and_si256(v, m4);
      __m256i hi = _mm256_and_si256(_mm256_srli_epi16(v, 4), m4);
      if constexpr (kQ5) {
        // Bit 2c (2c + 1) of each byte moved to bit 4; 16-bit shifts, so
        // the mask drops what crosses a byte.
        const __m256i top =
            2 * c <= 4 ? _mm256_slli_epi16(qh, 4 - 2 * c) : _mm256_srli_epi16(qh, 2 * c - 4);
        lo = _mm256_or_si256(lo, _mm256_and_si256(top, bit4));
        hi = _mm256_or_si256(hi, _mm256_and_si256(_mm256_srli_epi16(top, 1), bit4));
      }
      sum =
          _mm256_add_epi32(sum, Dot4(lo, Load256(xq + 64 * c), _mm256_set1_epi16(k.scale(2 * c))));
      sum = _mm256_add_epi32(
          sum, Dot4(hi, Load256(xq + 64 * c + 32), _mm256_set1_epi16(k.scale(2 * c + 1))));
    }
    acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(sum), _mm256_set1_ps(F16(b[i].d) * x.d[i]), acc);
    const __m256i mins =
        _mm256_mullo_epi32(_mm256_cvtepu8_epi32(_mm_cvtsi64_si128(static_cast<int64_t>(k.mins))),
                           Load256(x.sum32 + 8 * i));
    min_acc =
        _mm256_fmadd_ps(_mm256_cvtepi32_ps(mins), _mm256_set1_ps(F16(b[i].dmin) * x.d[i]), min_acc);
  }
  return Hsum8(acc) - Hsum8(min_acc);
}

// Q6_K: 32 elements (two sub-blocks of 16) per step; pairs of (q - 32) * x
// as q * x - 32 * x, both without saturation, then the two scales by vpmaddwd.
float DotQ6_K(const uint8_t* row, const Q8Row& x) {
  const BlockQ6_K* b = reinterpret_cast<const BlockQ6_K*>(row);
  const __m256i m4 = _mm256_set1_epi8(0x0f), m3 = _mm256_set1_epi8(3);
  const __m256i k32 = _mm256_set1_epi8(32);
  __m256 acc = _mm256_setzero_ps();
  for (int64_t i = 0; i < x.cols / kQK; ++i) {
    const int8_t* xq = x.qs + kQK * i;
    __m256i sum = _mm256_setzero_si256();
    for (int h = 0; h < 2; ++h) {
      const __m256i qh = Load256(b[i].qh + 32 * h);
      for (int s = 0; s < 4; ++s) {  // quarter s: elements 32 s + l of the half
        const __m256i v = Load256(b[i].ql + 64 * h + 32 * (s & 1));
        const __m256i nib =
            s < 2 ? _mm256_and_si256(v, m4) : _mm256_and_si256(_mm256_srli_epi16(v, 4), m4);
        const __m256i high = _mm256_and_si256(_mm256_srli_epi16(qh, 2 * s), m3);
        const __m256i q = _mm256_or_si256(nib, _mm256_slli_epi16(high, 4));
        const __m256i xv = Load256(xq + 128 * h + 32 * s);
        const __m256i pairs =
            _mm256_sub_epi16(_mm256_maddubs_epi16(q, xv), _mm256_maddubs_epi16(k32, xv));
        const int j = 8 * h + 2 * s;  // sub-blocks j, j + 1
        const __m256i scale =
            _mm256_set_m128i(_mm_set1_epi16(b[i].scales[j + 1]), _mm_set1_epi16(b[i].scales[j]));
        sum = _mm256_add_epi32(sum, _mm256_madd_epi16(pairs, scale));
      }
    }
    acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(sum), _mm256_set1_ps(F16(b[i].d) * x.d[i]), acc);
  }
  return Hsum8(acc);
}

template <float (*Dot)(const uint8_t*, const Q8Row&)>
void Rows(const uint8_t* w, size_t row_bytes, int64_t rows, const Q8Row* x, int64_t nx, float* y,
          int64_t ldy) {
  for (int64_t c = 0; c < nx; ++c)
    for (int64_t r = 0; r < rows; ++r) y[c * ldy + r] = Dot(w + r * row_bytes, x[c]);
}

}  // namespace

QuantDotFn QuantDotKernel(DType weights) {
  switch (weights) {
    case DType::kQ8_0:
      return Rows<DotQ8_0>;
    case DType::kQ4_0:
      return Rows<DotQ4_0>;
    case DType::kQ4_K:
      return Rows<DotK45<false>>;
    case DType::kQ5_K:
      return Rows<DotK45<true>>;
    case DType::kQ6_K:
      return Rows<DotQ6_K>;
    default:
      return nullptr;
  }
}

}  // namespace kvfork::avx2
