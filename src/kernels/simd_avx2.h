// AVX2 + FMA building blocks shared by the *_avx2.cc files. Include only from
// translation units compiled with -mavx2 -mfma -mf16c. Everything here has
// internal linkage so no out-of-line copy can leak to a scalar caller.
#pragma once

#include <immintrin.h>

#include <cstdint>

namespace kvfork::avx2 {
namespace {

// Mask of the first n (0..8) lanes, for maskload/maskstore of row tails: tails
// go through the same vector math as full vectors, so an element's result never
// depends on where in a row it sits.
inline __m256i TailMask(int64_t n) {
  const __m256i idx = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
  return _mm256_cmpgt_epi32(_mm256_set1_epi32(static_cast<int>(n)), idx);
}

// The one horizontal sum every kernel uses: ((l0+l4)+(l2+l6)) + ((l1+l5)+(l3+l7)).
inline float Hsum(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_shuffle_ps(s, s, 1));
  return _mm_cvtss_f32(s);
}

inline float Hmax(__m256 v) {
  __m128 s = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_max_ps(s, _mm_movehl_ps(s, s));
  s = _mm_max_ss(s, _mm_shuffle_ps(s, s, 1));
  return _mm_cvtss_f32(s);
}

// Pins v to a register where it stands: GCC 12 otherwise re-reads a value
// used by several FMAs from memory as each one's operand (Dots' q rows: 10
// loads per 8 FMAs where 6 suffice, and Zen 3 retires two 256-bit loads a
// cycle). Emits nothing.
inline void InRegister(__m256& v) { __asm__("" : "+x"(v)); }

// 8 bf16 -> 8 f32 (exact: bf16 is the top half of an f32).
inline __m256 LoadBf16(const uint16_t* p) {
  __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
  return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
}

// Round 8 f32 to bf16 bits (in the low 16 bits of each 32-bit lane), round to
// nearest even, NaN kept quiet: the same bits as F32ToBf16 in core/bf16.h.
inline __m256i F32ToBf16Lanes(__m256 v) {
  __m256i bits = _mm256_castps_si256(v);
  __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(bits, 16), _mm256_set1_epi32(1));
  __m256i rounded =
      _mm256_srli_epi32(_mm256_add_epi32(bits, _mm256_add_epi32(lsb, _mm256_set1_epi32(0x7fff))), 16);
  __m256i abs = _mm256_and_si256(bits, _mm256_set1_epi32(0x7fffffff));
  __m256i is_nan = _mm256_cmpgt_epi32(abs, _mm256_set1_epi32(0x7f800000));
  __m256i nan = _mm256_or_si256(_mm256_srli_epi32(bits, 16), _mm256_set1_epi32(0x40));
  return _mm256_blendv_epi8(rounded, nan, is_nan);
}

// f32 -> bf16 -> f32, the rounding MatMul applies to x for bf16 weights.
inline __m256 RoundToBf16(__m256 v) {
  return _mm256_castsi256_ps(_mm256_slli_epi32(F32ToBf16Lanes(v), 16));
}

// Stores 8 bf16 from F32ToBf16Lanes.
inline void StoreBf16(uint16_t* p, __m256i lanes) {
  __m128i lo = _mm256_castsi256_si128(lanes), hi = _mm256_extracti128_si256(lanes, 1);
  _mm_storeu_si128(reinterpret_cast<__m128i*>(p), _mm_packus_epi32(lo, hi));
}

// exp(x) for every lane by the same code (Cephes expf polynomial, ~1 ulp on
// the clamped range). Below -87.34 the result is 0, so exp(-inf) == 0.
// Not bit-equal to std::exp; equal to itself for equal inputs in any lane.
inline __m256 Exp(__m256 x) {
  const __m256 lo = _mm256_set1_ps(-87.3365478515625f);
  const __m256 hi = _mm256_set1_ps(88.0f);
  __m256 xc = _mm256_min_ps(_mm256_max_ps(x, lo), hi);
  __m256 n = _mm256_round_ps(_mm256_mul_ps(xc, _mm256_set1_ps(1.44269504088896341f)),
                             _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693359375f), xc);
  r = _mm256_fnmadd_ps(n, _mm256_set1_ps(-2.12194440e-4f), r);
  __m256 p = _mm256_set1_ps(1.9875691500e-4f);
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.3981999507e-3f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(8.3334519073e-3f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(4.1665795894e-2f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.6666665459e-1f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(5.0000001201e-1f));
  p = _mm256_fmadd_ps(_mm256_mul_ps(p, r), r, _mm256_add_ps(r, _mm256_set1_ps(1.0f)));
  __m256i e = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
  __m256 res = _mm256_mul_ps(p, _mm256_castsi256_ps(e));
  return _mm256_andnot_ps(_mm256_cmp_ps(x, lo, _CMP_LT_OQ), res);
}

inline float ExpScalar(float x) { return _mm256_cvtss_f32(Exp(_mm256_set1_ps(x))); }

}  // namespace
}  // namespace kvfork::avx2
