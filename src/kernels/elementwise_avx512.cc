// AVX-512 row ops: the AVX2 file's algorithms at 16 lanes, tails by masked
// loads/stores through the same vector code.
// GCC 12's AVX-512 intrinsic headers build some results from _mm512_undefined_*
// and then warn about them (a known false positive).
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

#include <cmath>
#include <cstring>

#include "kernels/ops_isa.h"
#include "kernels/simd_avx512.h"

namespace kvfork::avx512 {

void RmsNorm(const float* x, const float* weight, int64_t rows, int64_t dim, float eps, float* y) {
  for (int64_t r = 0; r < rows; ++r) {
    const float* xr = x + r * dim;
    float* yr = y + r * dim;
    __m512 ss = _mm512_setzero_ps();
    for (int64_t i = 0; i < dim; i += 16) {
      __m512 v = _mm512_maskz_loadu_ps(Mask16(dim - i), xr + i);
      ss = _mm512_fmadd_ps(v, v, ss);
    }
    const __m512 vinv = _mm512_set1_ps(1.0f / std::sqrt(Hsum(ss) / static_cast<float>(dim) + eps));
    for (int64_t i = 0; i < dim; i += 16) {
      const __mmask16 mask = Mask16(dim - i);
      __m512 v = _mm512_mul_ps(_mm512_mul_ps(_mm512_maskz_loadu_ps(mask, xr + i), vinv),
                               _mm512_maskz_loadu_ps(mask, weight + i));
      _mm512_mask_storeu_ps(yr + i, mask, v);
    }
  }
}

// The rotation is the reference's mul/sub, so bits match.
void RopeRotate(float* x, int64_t num_tokens, int64_t num_heads, int64_t head_dim,
                const float* cos, const float* sin) {
  const int64_t half = head_dim / 2;
  for (int64_t t = 0; t < num_tokens; ++t) {
    const float* cos_t = cos + t * half;
    const float* sin_t = sin + t * half;
    for (int64_t h = 0; h < num_heads; ++h) {
      float* a = x + (t * num_heads + h) * head_dim;
      float* b = a + half;
      for (int64_t i = 0; i < half; i += 16) {
        const __mmask16 mask = Mask16(half - i);
        __m512 c = _mm512_maskz_loadu_ps(mask, cos_t + i), s = _mm512_maskz_loadu_ps(mask, sin_t + i);
        __m512 va = _mm512_maskz_loadu_ps(mask, a + i), vb = _mm512_maskz_loadu_ps(mask, b + i);
        _mm512_mask_storeu_ps(a + i, mask, _mm512_sub_ps(_mm512_mul_ps(va, c), _mm512_mul_ps(vb, s)));
        _mm512_mask_storeu_ps(b + i, mask, _mm512_add_ps(_mm512_mul_ps(vb, c), _mm512_mul_ps(va, s)));
      }
    }
  }
}

void SiluMul(const float* gate, const float* up, int64_t n, float* out) {
  for (int64_t i = 0; i < n; i += 16) {
    const __mmask16 mask = Mask16(n - i);
    _mm512_mask_storeu_ps(out + i, mask,
                          SiluMulLanes(_mm512_maskz_loadu_ps(mask, gate + i),
                                       _mm512_maskz_loadu_ps(mask, up + i)));
  }
}

void AddInPlace(float* y, const float* x, int64_t n) {
  for (int64_t i = 0; i < n; i += 16) {
    const __mmask16 mask = Mask16(n - i);
    _mm512_mask_storeu_ps(
        y + i, mask, _mm512_add_ps(_mm512_maskz_loadu_ps(mask, y + i), _mm512_maskz_loadu_ps(mask, x + i)));
  }
}

void Softmax(float* x, int64_t n) {
  if (n <= 0) return;
  const __m512 neg_inf = _mm512_set1_ps(-INFINITY);
  __m512 mx = neg_inf;
  for (int64_t i = 0; i < n; i += 16)
    mx = _mm512_max_ps(_mm512_mask_loadu_ps(neg_inf, Mask16(n - i), x + i), mx);
  const __m512 vmax = _mm512_set1_ps(Hmax(mx));
  __m512 sum = _mm512_setzero_ps();
  for (int64_t i = 0; i < n; i += 16) {
    const __mmask16 mask = Mask16(n - i);
    __m512 e = _mm512_maskz_mov_ps(mask, Exp(_mm512_sub_ps(_mm512_maskz_loadu_ps(mask, x + i), vmax)));
    sum = _mm512_add_ps(sum, e);
    _mm512_mask_storeu_ps(x + i, mask, e);
  }
  const __m512 vsum = _mm512_set1_ps(Hsum(sum));
  for (int64_t i = 0; i < n; i += 16) {
    const __mmask16 mask = Mask16(n - i);
    _mm512_mask_storeu_ps(x + i, mask, _mm512_div_ps(_mm512_maskz_loadu_ps(mask, x + i), vsum));
  }
}

void EmbeddingLookup(const MatrixView& table, const int32_t* ids, int64_t n, float* out) {
  const int64_t dim = table.cols;
  for (int64_t t = 0; t < n; ++t) {
    float* dst = out + t * dim;
    if (table.dtype != DType::kBf16) {
      std::memcpy(dst, static_cast<const float*>(table.data) + ids[t] * dim,
                  static_cast<size_t>(dim) * sizeof(float));
      continue;
    }
    const uint16_t* src = static_cast<const uint16_t*>(table.data) + ids[t] * dim;
    for (int64_t c = 0; c < dim; c += 16)
      _mm512_mask_storeu_ps(dst + c, Mask16(dim - c), LoadBf16(src + c, dim - c));
  }
}

int64_t Argmax(const float* x, int64_t n) {
  // As the reference's scan `x[i] > x[best]`: NaNs never win, except at x[0].
  if (n <= 1 || std::isnan(x[0])) return 0;
  const __m512 neg_inf = _mm512_set1_ps(-INFINITY);
  __m512 mx = _mm512_set1_ps(x[0]);
  for (int64_t i = 0; i < n; i += 16)
    mx = _mm512_max_ps(_mm512_mask_loadu_ps(neg_inf, Mask16(n - i), x + i), mx);  // NaN -> mx
  const __m512 vbest = _mm512_set1_ps(Hmax(mx));
  for (int64_t i = 0; i < n; i += 16) {
    const __mmask16 mask = Mask16(n - i);
    unsigned bits = _mm512_mask_cmp_ps_mask(mask, _mm512_maskz_loadu_ps(mask, x + i), vbest, _CMP_EQ_OQ);
    if (bits != 0) return i + __builtin_ctz(bits);
  }
  return 0;
}

}  // namespace kvfork::avx512
