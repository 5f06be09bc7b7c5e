// AVX-512 (F/BW/VL/DQ + BF16) building blocks shared by the *_avx512.cc files.
// Include only from translation units compiled with the AVX-512 flags.
// Everything here has internal linkage so no out-of-line copy can leak to a
// caller on a CPU without AVX-512.
#pragma once

#include <immintrin.h>

#include <cstdint>
#include <cstring>

namespace kvfork::avx512 {
namespace {

// Mask of the first n lanes (n may exceed the lane count).
inline __mmask16 Mask16(int64_t n) {
  return n >= 16 ? static_cast<__mmask16>(0xffff) : static_cast<__mmask16>((1u << n) - 1u);
}
inline __mmask32 Mask32(int64_t n) {
  return n >= 32 ? static_cast<__mmask32>(0xffffffffu) : static_cast<__mmask32>((1u << n) - 1u);
}

// The one horizontal sum every AVX-512 kernel uses: halves, then quarters, ...
inline float Hsum(__m512 v) {
  __m256 h = _mm256_add_ps(_mm512_castps512_ps256(v),
                           _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v), 1)));
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(h), _mm256_extractf128_ps(h, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_shuffle_ps(s, s, 1));
  return _mm_cvtss_f32(s);
}

inline float Hmax(__m512 v) {
  __m256 h = _mm256_max_ps(_mm512_castps512_ps256(v),
                           _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v), 1)));
  __m128 s = _mm_max_ps(_mm256_castps256_ps128(h), _mm256_extractf128_ps(h, 1));
  s = _mm_max_ps(s, _mm_movehl_ps(s, s));
  s = _mm_max_ss(s, _mm_shuffle_ps(s, s, 1));
  return _mm_cvtss_f32(s);
}

// 16 bf16 (the first `n` of them, the rest 0) -> 16 f32, exact.
inline __m512 LoadBf16(const uint16_t* p, int64_t n = 16) {
  __m256i h = _mm256_maskz_loadu_epi16(Mask16(n), p);
  return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
}

// f32 -> bf16 bits in the low half of each lane: round to nearest even, NaN
// kept quiet, denormals kept (vcvtneps2bf16 would flush them), so the bits
// equal F32ToBf16 in core/bf16.h.
inline __m512i F32ToBf16Lanes(__m512 v) {
  __m512i bits = _mm512_castps_si512(v);
  __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(bits, 16), _mm512_set1_epi32(1));
  __m512i rounded = _mm512_srli_epi32(
      _mm512_add_epi32(bits, _mm512_add_epi32(lsb, _mm512_set1_epi32(0x7fff))), 16);
  __m512i abs = _mm512_and_si512(bits, _mm512_set1_epi32(0x7fffffff));
  __mmask16 is_nan = _mm512_cmpgt_epi32_mask(abs, _mm512_set1_epi32(0x7f800000));
  __m512i nan = _mm512_or_si512(_mm512_srli_epi32(bits, 16), _mm512_set1_epi32(0x40));
  return _mm512_mask_blend_epi32(is_nan, rounded, nan);
}

inline __m512 RoundToBf16(__m512 v) {
  return _mm512_castsi512_ps(_mm512_slli_epi32(F32ToBf16Lanes(v), 16));
}

// The first n of 16 bf16 from F32ToBf16Lanes.
inline void StoreBf16(uint16_t* p, __m512i lanes, int64_t n = 16) {
  _mm512_mask_cvtepi32_storeu_epi16(p, Mask16(n), lanes);
}

inline __m512bh AsBf16x32(__m512i v) {
  __m512bh r;
  std::memcpy(&r, &v, sizeof(r));
  return r;
}

// exp(x) for every lane by the same code: the AVX2 path's Cephes polynomial
// at 16 lanes. Below -87.34 the result is 0, so exp(-inf) == 0.
inline __m512 Exp(__m512 x) {
  const __m512 lo = _mm512_set1_ps(-87.3365478515625f);
  const __m512 hi = _mm512_set1_ps(88.0f);
  __m512 xc = _mm512_min_ps(_mm512_max_ps(x, lo), hi);
  __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(xc, _mm512_set1_ps(1.44269504088896341f)),
                                  _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693359375f), xc);
  r = _mm512_fnmadd_ps(n, _mm512_set1_ps(-2.12194440e-4f), r);
  __m512 p = _mm512_set1_ps(1.9875691500e-4f);
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.3981999507e-3f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(8.3334519073e-3f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(4.1665795894e-2f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.6666665459e-1f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(5.0000001201e-1f));
  p = _mm512_fmadd_ps(_mm512_mul_ps(p, r), r, _mm512_add_ps(r, _mm512_set1_ps(1.0f)));
  // p * 2^n in one VSCALEFPS: n is in [-126, 127] after the clamp, so this is
  // the AVX2 path's multiply by 2^n built in the exponent bits, bit for bit
  // (checked over all 2^32 inputs), in one instruction instead of four.
  return _mm512_maskz_mov_ps(_mm512_cmp_ps_mask(x, lo, _CMP_NLT_UQ), _mm512_scalef_ps(p, n));
}

// In-place transpose of a 16x16 matrix of 32-bit lanes held as 16 rows:
// afterwards r[j] lane i is what r[i] lane j was. Pure data movement.
inline void Transpose16x16(__m512 r[16]) {
  __m512 t[16];
  for (int i = 0; i < 16; i += 2) {
    t[i] = _mm512_unpacklo_ps(r[i], r[i + 1]);
    t[i + 1] = _mm512_unpackhi_ps(r[i], r[i + 1]);
  }
  for (int i = 0; i < 16; i += 4) {
    const __m512d a = _mm512_castps_pd(t[i]), b = _mm512_castps_pd(t[i + 1]);
    const __m512d c = _mm512_castps_pd(t[i + 2]), d = _mm512_castps_pd(t[i + 3]);
    r[i] = _mm512_castpd_ps(_mm512_unpacklo_pd(a, c));
    r[i + 1] = _mm512_castpd_ps(_mm512_unpackhi_pd(a, c));
    r[i + 2] = _mm512_castpd_ps(_mm512_unpacklo_pd(b, d));
    r[i + 3] = _mm512_castpd_ps(_mm512_unpackhi_pd(b, d));
  }
  // r[4q + s] now holds, in each 128-bit lane L, rows 4L'.. of column group s:
  // combine the four 128-bit lanes across row groups q.
  for (int s = 0; s < 4; ++s) {
    t[s] = _mm512_shuffle_f32x4(r[s], r[4 + s], 0x88);
    t[4 + s] = _mm512_shuffle_f32x4(r[s], r[4 + s], 0xdd);
    t[8 + s] = _mm512_shuffle_f32x4(r[8 + s], r[12 + s], 0x88);
    t[12 + s] = _mm512_shuffle_f32x4(r[8 + s], r[12 + s], 0xdd);
  }
  for (int s = 0; s < 8; ++s) {
    r[s] = _mm512_shuffle_f32x4(t[s], t[8 + s], 0x88);
    r[8 + s] = _mm512_shuffle_f32x4(t[s], t[8 + s], 0xdd);
  }
}

inline float ExpScalar(float x) { return _mm512_cvtss_f32(Exp(_mm512_set1_ps(x))); }

// silu(g) * u lane by lane: SiluMul's math, shared with the AMX MatMulSiluMul
// epilogue so the fused and the separate forms give the same bits.
inline __m512 SiluMulLanes(__m512 g, __m512 u) {
  const __m512 e = Exp(_mm512_xor_ps(g, _mm512_set1_ps(-0.0f)));
  return _mm512_mul_ps(_mm512_div_ps(g, _mm512_add_ps(_mm512_set1_ps(1.0f), e)), u);
}

}  // namespace
}  // namespace kvfork::avx512
