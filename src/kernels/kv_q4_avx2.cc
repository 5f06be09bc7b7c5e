// AVX2 copies of the q4 row quantizer and q4r's rotation (kv_q4_isa.h): a
// 32-dim group is four vectors; the rotation's stages below 8 dims exchange
// lanes inside a vector, the others whole vectors.
#include <immintrin.h>

#include <cmath>

#include "kernels/kv_layout.h"
#include "kernels/kv_q4.h"
#include "kernels/kv_q4_isa.h"

namespace kvfork::avx2 {
namespace {

// The nibbles c + 8 of x * inv: rounded in the current mode without the
// inexact flag (std::nearbyint's contract), then max(q, -8) (vmaxps returns
// its second operand for a NaN, as std::max(-8, NaN) returns -8), min(q, 7).
inline __m256i Nibbles(__m256 x, __m256 inv) {
  __m256 q = _mm256_round_ps(_mm256_mul_ps(x, inv), _MM_FROUND_CUR_DIRECTION | _MM_FROUND_NO_EXC);
  q = _mm256_min_ps(_mm256_max_ps(q, _mm256_set1_ps(-8.0f)), _mm256_set1_ps(7.0f));
  return _mm256_add_epi32(_mm256_cvtps_epi32(q), _mm256_set1_epi32(8));
}

}  // namespace

void QuantizeQ4Row(const float* x, int head_dim, uint8_t* codes, f16_t* scales) {
  const __m256 abs_mask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
  const __m256 zero = _mm256_setzero_ps();
  for (int g = 0; g < head_dim / kQ4Group; ++g) {
    const float* xg = x + g * kQ4Group;
    __m256 xv[4], a[4];
    for (int k = 0; k < 4; ++k) {
      xv[k] = _mm256_loadu_ps(xg + 8 * k);
      a[k] = _mm256_and_ps(xv[k], abs_mask);
    }
    // max(a, 0) drops NaN lanes (vmaxps returns the second operand), so the
    // reduction sees numbers only, whose maximum does not depend on order.
    __m256 mx = _mm256_max_ps(_mm256_max_ps(_mm256_max_ps(a[0], zero), _mm256_max_ps(a[1], zero)),
                              _mm256_max_ps(_mm256_max_ps(a[2], zero), _mm256_max_ps(a[3], zero)));
    __m128 h = _mm_max_ps(_mm256_castps256_ps128(mx), _mm256_extractf128_ps(mx, 1));
    h = _mm_max_ps(h, _mm_movehl_ps(h, h));
    h = _mm_max_ss(h, _mm_shuffle_ps(h, h, 1));
    const float amax = _mm_cvtss_f32(h);
    float m = 0.0f;
    if (amax > 0.0f) {
      // The first value of that magnitude, as the scalar loop's strict > keeps.
      const __m256 va = _mm256_set1_ps(amax);
      uint32_t hits = 0;
      for (int k = 0; k < 4; ++k)
        hits |= static_cast<uint32_t>(_mm256_movemask_ps(_mm256_cmp_ps(a[k], va, _CMP_EQ_OQ)))
                << (8 * k);
      m = xg[__builtin_ctz(hits)];
    }
    float inv;
    scales[g] = Q4GroupScale(m, amax, &inv);
    const __m256 vinv = _mm256_set1_ps(inv);
    // Byte i: dim i's nibble low, dim 16 + i's high; values <= 255, so the
    // saturating packs keep them. packs_epi32 interleaves 128-bit halves:
    // the 64-bit permute puts dims 0-7 before 8-15.
    const __m256i lo = _mm256_or_si256(Nibbles(xv[0], vinv), _mm256_slli_epi32(Nibbles(xv[2], vinv), 4));
    const __m256i hi = _mm256_or_si256(Nibbles(xv[1], vinv), _mm256_slli_epi32(Nibbles(xv[3], vinv), 4));
    const __m256i words = _mm256_permute4x64_epi64(_mm256_packs_epi32(lo, hi), 0xD8);
    const __m128i bytes =
        _mm_packus_epi16(_mm256_castsi256_si128(words), _mm256_extracti128_si256(words, 1));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(codes + g * 16), bytes);
  }
}

void HadamardRotate(float* x, int head_dim) {
  const int n = HadamardBlock(head_dim);
  if (n < 8) return kvfork::HadamardRotate(x, head_dim);  // not a q4 head_dim
  const __m256 norm =
      _mm256_set1_ps(static_cast<float>(1.0 / std::sqrt(static_cast<double>(n))));
  for (int b = 0; b < head_dim; b += n) {
    float* xb = x + b;
    // Stages 1, 2, 4: lane i pairs with lane i ^ len; the lower lane of a
    // pair takes a + c (x + p), the upper a - c (p - x), the scalar's adds.
    for (int v = 0; v < n; v += 8) {
      __m256 t = _mm256_loadu_ps(xb + v);
      __m256 p = _mm256_permute_ps(t, 0xB1);  // lanes 1 0 3 2 ...
      t = _mm256_blend_ps(_mm256_add_ps(t, p), _mm256_sub_ps(p, t), 0xAA);
      p = _mm256_permute_ps(t, 0x4E);  // 2 3 0 1 ...
      t = _mm256_blend_ps(_mm256_add_ps(t, p), _mm256_sub_ps(p, t), 0xCC);
      p = _mm256_permute2f128_ps(t, t, 0x01);  // 128-bit halves swapped
      t = _mm256_blend_ps(_mm256_add_ps(t, p), _mm256_sub_ps(p, t), 0xF0);
      _mm256_storeu_ps(xb + v, t);
    }
    // Stages 8 .. n / 2: whole vectors, in the scalar's stage order.
    for (int len = 8; len < n; len <<= 1) {
      for (int i = 0; i < n; i += 2 * len) {
        for (int j = i; j < i + len; j += 8) {
          const __m256 a = _mm256_loadu_ps(xb + j), c = _mm256_loadu_ps(xb + j + len);
          _mm256_storeu_ps(xb + j, _mm256_add_ps(a, c));
          _mm256_storeu_ps(xb + j + len, _mm256_sub_ps(a, c));
        }
      }
    }
    for (int i = 0; i < n; i += 8) _mm256_storeu_ps(xb + i, _mm256_mul_ps(_mm256_loadu_ps(xb + i), norm));
  }
}

}  // namespace kvfork::avx2
