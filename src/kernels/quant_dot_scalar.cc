// Scalar dot kernels of every quantized format (quant_isa.h): the portable
// level and the readable statement of what the SIMD kernels compute. Per
// block an exact integer sum of weight codes times activation codes, then the
// block's scales in float, blocks accumulated in order.
#include <cstring>
#include <type_traits>

#include "core/bf16.h"
#include "kernels/quant_blocks.h"
#include "kernels/quant_isa.h"

namespace kvfork::reference {
namespace {

// Codes of block 32-element block of the *_0 / *_1 formats, 0..31 in order.
void CodesQ4(const uint8_t* qs, int* q) {
  for (int j = 0; j < 16; ++j) {
    q[j] = qs[j] & 0x0f;
    q[j + 16] = qs[j] >> 4;
  }
}
void CodesQ5(const uint8_t* qs, const uint8_t* qh_bytes, int* q) {
  uint32_t qh;
  std::memcpy(&qh, qh_bytes, 4);
  CodesQ4(qs, q);
  for (int j = 0; j < 32; ++j) q[j] |= static_cast<int>((qh >> j) & 1u) << 4;
}
int32_t Dot32(const int* q, int offset, const int8_t* x) {
  int32_t s = 0;
  for (int j = 0; j < 32; ++j) s += (q[j] - offset) * x[j];
  return s;
}

// Symmetric 32-blocks: sum_b d_w d_x sum_j (q_j - offset) x_j.
template <typename Block>
float DotSymmetric(const uint8_t* row, const Q8Row& x) {
  const Block* b = reinterpret_cast<const Block*>(row);
  float acc = 0.0f;
  int q[32];
  for (int64_t i = 0; i < x.cols / 32; ++i) {
    int32_t s;
    if constexpr (std::is_same_v<Block, BlockQ8_0>) {
      s = 0;
      for (int j = 0; j < 32; ++j) s += b[i].qs[j] * x.qs[32 * i + j];
    } else if constexpr (std::is_same_v<Block, BlockQ4_0>) {
      CodesQ4(b[i].qs, q);
      s = Dot32(q, 8, x.qs + 32 * i);
    } else {
      CodesQ5(b[i].qs, b[i].qh, q);
      s = Dot32(q, 16, x.qs + 32 * i);
    }
    acc += F16ToF32(b[i].d) * x.d[i] * static_cast<float>(s);
  }
  return acc;
}

// With a min: sum_b d_w d_x sum_j q_j x_j + m_w d_x sum_j x_j.
template <typename Block>
float DotWithMin(const uint8_t* row, const Q8Row& x) {
  const Block* b = reinterpret_cast<const Block*>(row);
  float acc = 0.0f;
  int q[32];
  for (int64_t i = 0; i < x.cols / 32; ++i) {
    if constexpr (std::is_same_v<Block, BlockQ4_1>) {
      CodesQ4(b[i].qs, q);
    } else {
      CodesQ5(b[i].qs, b[i].qh, q);
    }
    const int32_t s = Dot32(q, 0, x.qs + 32 * i);
    acc += F16ToF32(b[i].d) * x.d[i] * static_cast<float>(s);
    acc += F16ToF32(b[i].m) * x.d[i] * static_cast<float>(x.sum32[i]);
  }
  return acc;
}

// Q4_K / Q5_K: per super-block d_x (d sum_j scale_j <q, x>_j - dmin sum_j min_j sum x_j).
template <typename Block>
float DotK45(const uint8_t* row, const Q8Row& x) {
  const Block* b = reinterpret_cast<const Block*>(row);
  float acc = 0.0f;
  for (int64_t i = 0; i < x.cols / kQK; ++i) {
    const KScales k = DecodeKScales(b[i].scales);
    const int8_t* xq = x.qs + kQK * i;
    int32_t sum = 0, mins = 0;
    for (int j = 0; j < 8; ++j) {
      const uint8_t* qs = b[i].qs + 32 * (j / 2);
      int32_t s = 0;
      for (int l = 0; l < 32; ++l) {
        int q = j % 2 == 0 ? qs[l] & 0x0f : qs[l] >> 4;
        if constexpr (std::is_same_v<Block, BlockQ5_K>) q |= ((b[i].qh[l] >> j) & 1) << 4;
        s += q * xq[32 * j + l];
      }
      sum += k.scale(j) * s;
      mins += k.min(j) * x.sum32[8 * i + j];
    }
    acc += x.d[i] * (F16ToF32(b[i].d) * static_cast<float>(sum));
    acc -= x.d[i] * (F16ToF32(b[i].dmin) * static_cast<float>(mins));
  }
  return acc;
}

// Q6_K: per super-block d_x d sum_j scale_j <q - 32, x>_j over 16 sub-blocks of 16.
float DotQ6_K(const uint8_t* row, const Q8Row& x) {
  const BlockQ6_K* b = reinterpret_cast<const BlockQ6_K*>(row);
  float acc = 0.0f;
  for (int64_t i = 0; i < x.cols / kQK; ++i) {
    int q[kQK];
    for (int h = 0; h < 2; ++h) {
      const uint8_t* ql = b[i].ql + 64 * h;
      const uint8_t* qh = b[i].qh + 32 * h;
      for (int s = 0; s < 4; ++s) {
        for (int l = 0; l < 32; ++l) {
          const uint8_t lo = ql[32 * (s & 1) + l];
          const int nib = s < 2 ? lo & 0x0f : lo >> 4;
          q[128 * h + 32 * s + l] = (nib | ((qh[l] >> (2 * s) & 3) << 4)) - 32;
        }
      }
    }
    const int8_t* xq = x.qs + kQK * i;
    int32_t sum = 0;
    for (int j = 0; j < 16; ++j) {
      int32_t s = 0;
      for (int l = 0; l < 16; ++l) s += q[16 * j + l] * xq[16 * j + l];
      sum += b[i].scales[j] * s;
    }
    acc += x.d[i] * (F16ToF32(b[i].d) * static_cast<float>(sum));
  }
  return acc;
}

template <float (*Dot)(const uint8_t*, const Q8Row&)>
void Rows(const uint8_t* w, size_t row_bytes, int64_t rows, const Q8Row& x, float* y) {
  for (int64_t r = 0; r < rows; ++r) y[r] = Dot(w + r * row_bytes, x);
}

}  // namespace

QuantDotFn QuantDotKernel(DType weights) {
  switch (weights) {
    case DType::kQ8_0:
      return Rows<DotSymmetric<BlockQ8_0>>;
    case DType::kQ4_0:
      return Rows<DotSymmetric<BlockQ4_0>>;
    case DType::kQ5_0:
      return Rows<DotSymmetric<BlockQ5_0>>;
    case DType::kQ4_1:
      return Rows<DotWithMin<BlockQ4_1>>;
    case DType::kQ5_1:
      return Rows<DotWithMin<BlockQ5_1>>;
    case DType::kQ4_K:
      return Rows<DotK45<BlockQ4_K>>;
    case DType::kQ5_K:
      return Rows<DotK45<BlockQ5_K>>;
    case DType::kQ6_K:
      return Rows<DotQ6_K>;
    default:
      return nullptr;
  }
}

}  // namespace kvfork::reference
