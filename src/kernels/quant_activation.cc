// Activation rows for the quantized matrix products (quant.h): one plain
// scalar quantizer for every ISA, so the activations, and with them each
// output's integer sums, are the same bits whatever the ISA. Its cost is
// O(cols) per row against O(rows * cols) for the product.
#include <algorithm>
#include <cmath>
#include <cstring>

#include "core/bf16.h"
#include "kernels/quant.h"

namespace kvfork {
namespace {

// Round half to even for |v| <= 2^22 without a libm call: adding 1.5 * 2^23
// leaves no fraction bits, so the FPU rounds (in its default mode, which
// kvfork never changes) and the integer sits in the low mantissa bits.
inline int RoundToNearestEven(float v) {
  const float shifted = v + 12582912.0f;
  int32_t bits;
  std::memcpy(&bits, &shifted, 4);
  return (bits & 0x007fffff) - 0x00400000;
}

constexpr size_t Align64(size_t n) { return (n + 63) & ~size_t{63}; }

// Offsets of the arrays of a row (Q8Row) from its start.
struct Q8RowLayout {
  size_t nsum4, sum32, d, total;
};
Q8RowLayout LayoutOf(int64_t cols, int block_elems) {
  Q8RowLayout l;
  l.nsum4 = Align64(static_cast<size_t>(cols));
  l.sum32 = l.nsum4 + Align64(static_cast<size_t>(cols / 4) * 4);
  l.d = l.sum32 + Align64(static_cast<size_t>(cols / 32) * 4);
  l.total = l.d + Align64(static_cast<size_t>(cols / block_elems) * 4);
  return l;
}

}  // namespace

int ActivationBlockElems(DType weights) {
  switch (weights) {
    case DType::kQ4_K:
    case DType::kQ5_K:
    case DType::kQ6_K:
      return 256;
    default:
      return 32;
  }
}

size_t Q8RowBytes(int64_t cols, int block_elems) { return LayoutOf(cols, block_elems).total; }

Q8Row Q8RowAt(const uint8_t* mem, int64_t cols, int block_elems) {
  const Q8RowLayout l = LayoutOf(cols, block_elems);
  Q8Row r;
  r.qs = reinterpret_cast<const int8_t*>(mem);
  r.nsum4 = reinterpret_cast<const int32_t*>(mem + l.nsum4);
  r.sum32 = reinterpret_cast<const int32_t*>(mem + l.sum32);
  r.d = reinterpret_cast<const float*>(mem + l.d);
  r.cols = cols;
  return r;
}

void QuantizeQ8Row(const float* x, int64_t cols, int block_elems, uint8_t* mem) {
  const Q8RowLayout l = LayoutOf(cols, block_elems);
  int8_t* qs = reinterpret_cast<int8_t*>(mem);
  int32_t* nsum4 = reinterpret_cast<int32_t*>(mem + l.nsum4);
  int32_t* sum32 = reinterpret_cast<int32_t*>(mem + l.sum32);
  float* d = reinterpret_cast<float*>(mem + l.d);
  for (int64_t b = 0; b < cols / block_elems; ++b) {
    const float* xb = x + b * block_elems;
    // Eight running maxima (max is exact in any order), fabs and std::max
    // rather than std::fmax: no branch, no libm call, no chain of
    // block_elems dependent maxss. A NaN is skipped here; it makes its own
    // code garbage, never undefined behaviour.
    float lane_max[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    for (int j = 0; j < block_elems; j += 8)
      for (int l = 0; l < 8; ++l) lane_max[l] = std::max(lane_max[l], std::fabs(xb[j + l]));
    float amax = 0.0f;
    for (float v : lane_max) amax = std::max(amax, v);
    // q = rint(x * 127 / amax) and d = amax / 127, as llama.cpp's q8_0 and
    // q8_K; the inverse scale is what multiplies, so |q| <= 127 up to
    // rounding, clamped for the last ulp.
    const float iscale = amax > 0.0f ? 127.0f / amax : 0.0f;
    // llama.cpp's block_q8_0 keeps its scale as f16 (q8_K's stays f32): the
    // same rounding here gives the same products as llama.cpp on one file,
    // which its perplexity is compared against (tests/peer).
    if (block_elems == 32) {
      d[b] = F16ToF32(F32ToF16(amax / 127.0f));
    } else {
      d[b] = amax > 0.0f ? 1.0f / iscale : 0.0f;
    }
    for (int j = 0; j < block_elems; ++j) {
      const float v = std::min(127.0f, std::max(-127.0f, xb[j] * iscale));
      qs[b * block_elems + j] = static_cast<int8_t>(RoundToNearestEven(v));
    }
  }
  for (int64_t i = 0; i < cols / 4; ++i)
    nsum4[i] = -(qs[4 * i] + qs[4 * i + 1] + qs[4 * i + 2] + qs[4 * i + 3]);
  for (int64_t i = 0; i < cols / 32; ++i) {
    int32_t s = 0;
    for (int j = 0; j < 32; ++j) s += qs[32 * i + j];
    sum32[i] = s;
  }
}

}  // namespace kvfork
