// AVX-512 copies of the q4 row quantizer and q4r's rotation (kv_q4_isa.h):
// a 32-dim group is two vectors; the rotation's stages below 16 dims
// exchange lanes inside a vector, the others whole vectors.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"

#include <immintrin.h>

#include <cmath>

#include "kernels/kv_layout.h"
#include "kernels/kv_q4.h"
#include "kernels/kv_q4_isa.h"

namespace kvfork::avx512 {
namespace {

// The nibbles c + 8 of x * inv: rounded in the current mode without the
// inexact flag (std::nearbyint's contract), then max(q, -8) (vmaxps returns
// its second operand for a NaN, as std::max(-8, NaN) returns -8), min(q, 7).
inline __m512i Nibbles(__m512 x, __m512 inv) {
  __m512 q = _mm512_roundscale_ps(_mm512_mul_ps(x, inv), _MM_FROUND_CUR_DIRECTION | _MM_FROUND_NO_EXC);
  q = _mm512_min_ps(_mm512_max_ps(q, _mm512_set1_ps(-8.0f)), _mm512_set1_ps(7.0f));
  return _mm512_add_epi32(_mm512_cvtps_epi32(q), _mm512_set1_epi32(8));
}

}  // namespace

void QuantizeQ4Row(const float* x, int head_dim, uint8_t* codes, f16_t* scales) {
  for (int g = 0; g < head_dim / kQ4Group; ++g) {
    const float* xg = x + g * kQ4Group;
    const __m512 x0 = _mm512_loadu_ps(xg), x1 = _mm512_loadu_ps(xg + 16);
    const __m512 a0 = _mm512_abs_ps(x0), a1 = _mm512_abs_ps(x1);
    // max(a, 0) drops NaN lanes (vmaxps returns the second operand), so the
    // reduction sees numbers only, whose maximum does not depend on order.
    const __m512 zero = _mm512_setzero_ps();
    const float amax =
        _mm512_reduce_max_ps(_mm512_max_ps(_mm512_max_ps(a0, zero), _mm512_max_ps(a1, zero)));
    float m = 0.0f;
    if (amax > 0.0f) {
      // The first value of that magnitude, as the scalar loop's strict > keeps.
      const __m512 va = _mm512_set1_ps(amax);
      const uint32_t hits = static_cast<uint32_t>(_mm512_cmp_ps_mask(a0, va, _CMP_EQ_OQ)) |
                            static_cast<uint32_t>(_mm512_cmp_ps_mask(a1, va, _CMP_EQ_OQ)) << 16;
      m = xg[__builtin_ctz(hits)];
    }
    float inv;
    scales[g] = Q4GroupScale(m, amax, &inv);
    const __m512 vinv = _mm512_set1_ps(inv);
    // Byte i: dim i's nibble low, dim 16 + i's high.
    const __m512i packed =
        _mm512_or_si512(Nibbles(x0, vinv), _mm512_slli_epi32(Nibbles(x1, vinv), 4));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(codes + g * 16), _mm512_cvtepi32_epi8(packed));
  }
}

void HadamardRotate(float* x, int head_dim) {
  const int n = HadamardBlock(head_dim);
  if (n < 16) return kvfork::HadamardRotate(x, head_dim);  // not a q4 head_dim
  const __m512 norm =
      _mm512_set1_ps(static_cast<float>(1.0 / std::sqrt(static_cast<double>(n))));
  for (int b = 0; b < head_dim; b += n) {
    float* xb = x + b;
    // Stages 1, 2, 4, 8: lane i pairs with lane i ^ len; the lower lane of a
    // pair takes a + c (x + p), the upper a - c (p - x), the scalar's adds.
    for (int v = 0; v < n; v += 16) {
      __m512 t = _mm512_loadu_ps(xb + v);
      __m512 p = _mm512_permute_ps(t, 0xB1);  // lanes 1 0 3 2 ...
      t = _mm512_mask_sub_ps(_mm512_add_ps(t, p), 0xAAAA, p, t);
      p = _mm512_permute_ps(t, 0x4E);  // 2 3 0 1 ...
      t = _mm512_mask_sub_ps(_mm512_add_ps(t, p), 0xCCCC, p, t);
      p = _mm512_shuffle_f32x4(t, t, 0xB1);  // 128-bit lanes 1 0 3 2
      t = _mm512_mask_sub_ps(_mm512_add_ps(t, p), 0xF0F0, p, t);
      p = _mm512_shuffle_f32x4(t, t, 0x4E);  // 128-bit lanes 2 3 0 1
      t = _mm512_mask_sub_ps(_mm512_add_ps(t, p), 0xFF00, p, t);
      _mm512_storeu_ps(xb + v, t);
    }
    // Stages 16 .. n / 2: whole vectors, in the scalar's stage order.
    for (int len = 16; len < n; len <<= 1) {
      for (int i = 0; i < n; i += 2 * len) {
        for (int j = i; j < i + len; j += 16) {
          const __m512 a = _mm512_loadu_ps(xb + j), c = _mm512_loadu_ps(xb + j + len);
          _mm512_storeu_ps(xb + j, _mm512_add_ps(a, c));
          _mm512_storeu_ps(xb + j + len, _mm512_sub_ps(a, c));
        }
      }
    }
    for (int i = 0; i < n; i += 16) _mm512_storeu_ps(xb + i, _mm512_mul_ps(_mm512_loadu_ps(xb + i), norm));
  }
}

}  // namespace kvfork::avx512
