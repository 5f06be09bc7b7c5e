// AVX2 + FMA row ops: RmsNorm, Rope, SiluMul, AddInPlace, Softmax,
// EmbeddingLookup, Argmax. Row tails use masked loads/stores through the same
// vector code, so an element's result never depends on its position.
#include <cmath>
#include <cstring>

#include "kernels/ops_isa.h"
#include "kernels/simd_avx2.h"

namespace kvfork::avx2 {

void RmsNorm(const float* x, const float* weight, int64_t rows, int64_t dim, float eps, float* y) {
  for (int64_t r = 0; r < rows; ++r) {
    const float* xr = x + r * dim;
    float* yr = y + r * dim;
    __m256 ss = _mm256_setzero_ps();
    int64_t i = 0;
    for (; i + 8 <= dim; i += 8) {
      __m256 v = _mm256_loadu_ps(xr + i);
      ss = _mm256_fmadd_ps(v, v, ss);
    }
    if (i < dim) {
      __m256 v = _mm256_maskload_ps(xr + i, TailMask(dim - i));
      ss = _mm256_fmadd_ps(v, v, ss);
    }
    const float inv = 1.0f / std::sqrt(Hsum(ss) / static_cast<float>(dim) + eps);
    const __m256 vinv = _mm256_set1_ps(inv);
    for (i = 0; i + 8 <= dim; i += 8) {
      __m256 v = _mm256_mul_ps(_mm256_mul_ps(_mm256_loadu_ps(xr + i), vinv),
                               _mm256_loadu_ps(weight + i));
      _mm256_storeu_ps(yr + i, v);
    }
    if (i < dim) {
      __m256i mask = TailMask(dim - i);
      __m256 v = _mm256_mul_ps(_mm256_mul_ps(_mm256_maskload_ps(xr + i, mask), vinv),
                               _mm256_maskload_ps(weight + i, mask));
      _mm256_maskstore_ps(yr + i, mask, v);
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
      for (int64_t i = 0; i < half; i += 8) {
        __m256i mask = TailMask(half - i);
        __m256 c = _mm256_maskload_ps(cos_t + i, mask), s = _mm256_maskload_ps(sin_t + i, mask);
        __m256 va = _mm256_maskload_ps(a + i, mask), vb = _mm256_maskload_ps(b + i, mask);
        __m256 ra = _mm256_sub_ps(_mm256_mul_ps(va, c), _mm256_mul_ps(vb, s));
        __m256 rb = _mm256_add_ps(_mm256_mul_ps(vb, c), _mm256_mul_ps(va, s));
        _mm256_maskstore_ps(a + i, mask, ra);
        _mm256_maskstore_ps(b + i, mask, rb);
      }
    }
  }
}

void SiluMul(const float* gate, const float* up, int64_t n, float* out) {
  const __m256 one = _mm256_set1_ps(1.0f);
  const __m256 sign = _mm256_set1_ps(-0.0f);
  for (int64_t i = 0; i < n; i += 8) {
    __m256i mask = TailMask(n - i);
    __m256 g = _mm256_maskload_ps(gate + i, mask);
    __m256 u = _mm256_maskload_ps(up + i, mask);
    __m256 e = Exp(_mm256_xor_ps(g, sign));
    __m256 r = _mm256_mul_ps(_mm256_div_ps(g, _mm256_add_ps(one, e)), u);
    _mm256_maskstore_ps(out + i, mask, r);
  }
}

void AddInPlace(float* y, const float* x, int64_t n) {
  for (int64_t i = 0; i < n; i += 8) {
    __m256i mask = TailMask(n - i);
    __m256 r = _mm256_add_ps(_mm256_maskload_ps(y + i, mask), _mm256_maskload_ps(x + i, mask));
    _mm256_maskstore_ps(y + i, mask, r);
  }
}

void Softmax(float* x, int64_t n) {
  if (n <= 0) return;
  const __m256 neg_inf = _mm256_set1_ps(-INFINITY);
  __m256 mx = neg_inf;
  for (int64_t i = 0; i < n; i += 8) {
    __m256i mask = TailMask(n - i);
    __m256 v = _mm256_blendv_ps(neg_inf, _mm256_maskload_ps(x + i, mask), _mm256_castsi256_ps(mask));
    mx = _mm256_max_ps(v, mx);
  }
  const __m256 vmax = _mm256_set1_ps(Hmax(mx));
  __m256 sum = _mm256_setzero_ps();
  for (int64_t i = 0; i < n; i += 8) {
    __m256i mask = TailMask(n - i);
    __m256 e = Exp(_mm256_sub_ps(_mm256_maskload_ps(x + i, mask), vmax));
    e = _mm256_and_ps(e, _mm256_castsi256_ps(mask));  // padded lanes add nothing
    sum = _mm256_add_ps(sum, e);
    _mm256_maskstore_ps(x + i, mask, e);
  }
  const __m256 vsum = _mm256_set1_ps(Hsum(sum));
  for (int64_t i = 0; i < n; i += 8) {
    __m256i mask = TailMask(n - i);
    _mm256_maskstore_ps(x + i, mask, _mm256_div_ps(_mm256_maskload_ps(x + i, mask), vsum));
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
    int64_t c = 0;
    for (; c + 8 <= dim; c += 8) _mm256_storeu_ps(dst + c, LoadBf16(src + c));
    for (; c < dim; ++c) {
      uint32_t bits = static_cast<uint32_t>(src[c]) << 16;
      std::memcpy(dst + c, &bits, sizeof(float));  // exact, same bits as the vector path
    }
  }
}

int64_t Argmax(const float* x, int64_t n) {
  // Same answer as the reference's scan `x[i] > x[best]`: NaNs never win,
  // except a NaN at x[0], which nothing can beat.
  if (n <= 1 || std::isnan(x[0])) return 0;
  const __m256 neg_inf = _mm256_set1_ps(-INFINITY);
  __m256 mx = _mm256_set1_ps(x[0]);
  for (int64_t i = 0; i < n; i += 8) {
    __m256i mask = TailMask(n - i);
    __m256 v = _mm256_blendv_ps(neg_inf, _mm256_maskload_ps(x + i, mask), _mm256_castsi256_ps(mask));
    mx = _mm256_max_ps(v, mx);  // a NaN in v yields mx (the second operand)
  }
  const float best = Hmax(mx);
  const __m256 vbest = _mm256_set1_ps(best);
  for (int64_t i = 0; i < n; i += 8) {
    __m256i mask = TailMask(n - i);
    __m256 eq = _mm256_and_ps(_mm256_cmp_ps(_mm256_maskload_ps(x + i, mask), vbest, _CMP_EQ_OQ),
                              _mm256_castsi256_ps(mask));
    int bits = _mm256_movemask_ps(eq);
    if (bits != 0) return i + __builtin_ctz(static_cast<unsigned>(bits));
  }
  return 0;
}

}  // namespace kvfork::avx2
