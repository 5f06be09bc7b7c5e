// DequantizeRow: ggml's dequantize_row_* semantics, float operation for float
// operation (the kernels library builds with -ffp-contract=off, so nothing
// fuses), written from the block layouts in quant_blocks.h.
#include "kernels/quant.h"

#include <cstring>

#include "core/bf16.h"
#include "core/status.h"
#include "kernels/quant_blocks.h"

namespace kvfork {
namespace {

void DequantQ8_0(const BlockQ8_0* b, int64_t nb, float* y) {
  for (int64_t i = 0; i < nb; ++i, y += 32) {
    const float d = F16ToF32(b[i].d);
    for (int j = 0; j < 32; ++j) y[j] = b[i].qs[j] * d;
  }
}

void DequantQ4_0(const BlockQ4_0* b, int64_t nb, float* y) {
  for (int64_t i = 0; i < nb; ++i, y += 32) {
    const float d = F16ToF32(b[i].d);
    for (int j = 0; j < 16; ++j) {
      y[j] = ((b[i].qs[j] & 0x0f) - 8) * d;
      y[j + 16] = ((b[i].qs[j] >> 4) - 8) * d;
    }
  }
}

void DequantQ4_1(const BlockQ4_1* b, int64_t nb, float* y) {
  for (int64_t i = 0; i < nb; ++i, y += 32) {
    const float d = F16ToF32(b[i].d), m = F16ToF32(b[i].m);
    for (int j = 0; j < 16; ++j) {
      y[j] = (b[i].qs[j] & 0x0f) * d + m;
      y[j + 16] = (b[i].qs[j] >> 4) * d + m;
    }
  }
}

// Bit 4 of elements j and j + 16 of a Q5 block.
inline int HighBit(uint32_t qh, int j) { return static_cast<int>((qh >> j) & 1u) << 4; }

void DequantQ5_0(const BlockQ5_0* b, int64_t nb, float* y) {
  for (int64_t i = 0; i < nb; ++i, y += 32) {
    const float d = F16ToF32(b[i].d);
    uint32_t qh;
    std::memcpy(&qh, b[i].qh, 4);
    for (int j = 0; j < 16; ++j) {
      y[j] = (((b[i].qs[j] & 0x0f) | HighBit(qh, j)) - 16) * d;
      y[j + 16] = (((b[i].qs[j] >> 4) | HighBit(qh, j + 16)) - 16) * d;
    }
  }
}

void DequantQ5_1(const BlockQ5_1* b, int64_t nb, float* y) {
  for (int64_t i = 0; i < nb; ++i, y += 32) {
    const float d = F16ToF32(b[i].d), m = F16ToF32(b[i].m);
    uint32_t qh;
    std::memcpy(&qh, b[i].qh, 4);
    for (int j = 0; j < 16; ++j) {
      y[j] = ((b[i].qs[j] & 0x0f) | HighBit(qh, j)) * d + m;
      y[j + 16] = ((b[i].qs[j] >> 4) | HighBit(qh, j + 16)) * d + m;
    }
  }
}

void DequantQ4_K(const BlockQ4_K* b, int64_t nb, float* y) {
  for (int64_t i = 0; i < nb; ++i) {
    const float d = F16ToF32(b[i].d), dmin = F16ToF32(b[i].dmin);
    const KScales k = DecodeKScales(b[i].scales);
    for (int c = 0; c < 4; ++c) {  // 64 elements: sub-blocks 2c (low nibbles), 2c + 1 (high)
      const uint8_t* q = b[i].qs + 32 * c;
      const float d1 = d * k.scale(2 * c), m1 = dmin * k.min(2 * c);
      const float d2 = d * k.scale(2 * c + 1), m2 = dmin * k.min(2 * c + 1);
      for (int l = 0; l < 32; ++l) *y++ = d1 * (q[l] & 0x0f) - m1;
      for (int l = 0; l < 32; ++l) *y++ = d2 * (q[l] >> 4) - m2;
    }
  }
}

void DequantQ5_K(const BlockQ5_K* b, int64_t nb, float* y) {
  for (int64_t i = 0; i < nb; ++i) {
    const float d = F16ToF32(b[i].d), dmin = F16ToF32(b[i].dmin);
    const KScales k = DecodeKScales(b[i].scales);
    for (int c = 0; c < 4; ++c) {
      const uint8_t* q = b[i].qs + 32 * c;
      const int lo_bit = 1 << (2 * c), hi_bit = 1 << (2 * c + 1);
      const float d1 = d * k.scale(2 * c), m1 = dmin * k.min(2 * c);
      const float d2 = d * k.scale(2 * c + 1), m2 = dmin * k.min(2 * c + 1);
      for (int l = 0; l < 32; ++l)
        *y++ = d1 * ((q[l] & 0x0f) + (b[i].qh[l] & lo_bit ? 16 : 0)) - m1;
      for (int l = 0; l < 32; ++l) *y++ = d2 * ((q[l] >> 4) + (b[i].qh[l] & hi_bit ? 16 : 0)) - m2;
    }
  }
}

void DequantQ6_K(const BlockQ6_K* b, int64_t nb, float* y) {
  for (int64_t i = 0; i < nb; ++i) {
    const float d = F16ToF32(b[i].d);
    for (int h = 0; h < 2; ++h, y += 128) {
      const uint8_t* ql = b[i].ql + 64 * h;
      const uint8_t* qh = b[i].qh + 32 * h;
      const int8_t* sc = b[i].scales + 8 * h;
      for (int l = 0; l < 32; ++l) {
        const int is = l / 16;
        const int q1 = ((ql[l] & 0x0f) | ((qh[l] >> 0 & 3) << 4)) - 32;
        const int q2 = ((ql[l + 32] & 0x0f) | ((qh[l] >> 2 & 3) << 4)) - 32;
        const int q3 = ((ql[l] >> 4) | ((qh[l] >> 4 & 3) << 4)) - 32;
        const int q4 = ((ql[l + 32] >> 4) | ((qh[l] >> 6 & 3) << 4)) - 32;
        y[l] = d * sc[is + 0] * q1;
        y[l + 32] = d * sc[is + 2] * q2;
        y[l + 64] = d * sc[is + 4] * q3;
        y[l + 96] = d * sc[is + 6] * q4;
      }
    }
  }
}

}  // namespace

void DequantizeRow(DType dtype, const uint8_t* row, int64_t cols, float* out) {
  const int64_t nb = cols / Traits(dtype).block_elems;
  switch (dtype) {
    case DType::kF32:
      std::memcpy(out, row, static_cast<size_t>(cols) * sizeof(float));
      return;
    case DType::kBf16:
    case DType::kF16:
      for (int64_t c = 0; c < cols; ++c) {
        uint16_t h;
        std::memcpy(&h, row + 2 * c, 2);
        out[c] = dtype == DType::kBf16 ? Bf16ToF32(h) : F16ToF32(h);
      }
      return;
    case DType::kQ8_0:
      return DequantQ8_0(reinterpret_cast<const BlockQ8_0*>(row), nb, out);
    case DType::kQ4_0:
      return DequantQ4_0(reinterpret_cast<const BlockQ4_0*>(row), nb, out);
    case DType::kQ4_1:
      return DequantQ4_1(reinterpret_cast<const BlockQ4_1*>(row), nb, out);
    case DType::kQ5_0:
      return DequantQ5_0(reinterpret_cast<const BlockQ5_0*>(row), nb, out);
    case DType::kQ5_1:
      return DequantQ5_1(reinterpret_cast<const BlockQ5_1*>(row), nb, out);
    case DType::kQ4_K:
      return DequantQ4_K(reinterpret_cast<const BlockQ4_K*>(row), nb, out);
    case DType::kQ5_K:
      return DequantQ5_K(reinterpret_cast<const BlockQ5_K*>(row), nb, out);
    case DType::kQ6_K:
      return DequantQ6_K(reinterpret_cast<const BlockQ6_K*>(row), nb, out);
  }
  KVFORK_CHECK_MSG(false, "DequantizeRow: unknown dtype");
}

}  // namespace kvfork
