// A plain reference dequantizer for the quantizer tests: block bytes in
// ggml's layout -> floats, as ggml-quants.c's dequantize_row_* computes them.
// Private to the tests on purpose: the dot-product kernels (src/kernels/quant_*)
// carry the production one; once both are merged the tests can use that and
// this file can go (the lead dedupes).
#pragma once

#include <cstdint>
#include <cstring>

#include "core/bf16.h"
#include "core/dtype.h"

namespace kvfork::testing {

inline float HalfAt(const uint8_t* p) {
  f16_t h;
  std::memcpy(&h, p, 2);
  return F16ToF32(h);
}

// The 6-bit scale and min of sub-block j of a q4_k / q5_k block.
inline void ScaleMinK4(int j, const uint8_t* q, int* sc, int* m) {
  if (j < 4) {
    *sc = q[j] & 63;
    *m = q[j + 4] & 63;
  } else {
    *sc = (q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4);
    *m = (q[j + 4] >> 4) | ((q[j] >> 6) << 4);
  }
}

// Dequantizes one row of `cols` weights of format t at src into y.
inline void DequantizeRowForTest(DType t, const uint8_t* src, int64_t cols, float* y) {
  const int64_t nb = cols / Traits(t).block_elems;
  const int bb = Traits(t).block_bytes;
  for (int64_t b = 0; b < nb; ++b) {
    const uint8_t* p = src + b * bb;
    switch (t) {
      case DType::kF32:
        std::memcpy(y, p, 4);
        y += 1;
        break;
      case DType::kF16:
        *y++ = HalfAt(p);
        break;
      case DType::kBf16: {
        bf16_t h;
        std::memcpy(&h, p, 2);
        *y++ = Bf16ToF32(h);
        break;
      }
      case DType::kQ8_0: {
        const float d = HalfAt(p);
        for (int j = 0; j < 32; ++j) *y++ = static_cast<int8_t>(p[2 + j]) * d;
        break;
      }
      case DType::kQ4_0:
      case DType::kQ4_1:
      case DType::kQ5_0:
      case DType::kQ5_1: {
        const bool has_min = t == DType::kQ4_1 || t == DType::kQ5_1;
        const bool five = t == DType::kQ5_0 || t == DType::kQ5_1;
        const float d = HalfAt(p);
        const float m = has_min ? HalfAt(p + 2) : 0.0f;
        uint32_t qh = 0;
        if (five) std::memcpy(&qh, p + (has_min ? 4 : 2), 4);
        const uint8_t* qs = p + (has_min ? 4 : 2) + (five ? 4 : 0);
        const int offset = has_min ? 0 : (five ? 16 : 8);
        for (int j = 0; j < 32; ++j) {
          int q = j < 16 ? (qs[j] & 0xF) : (qs[j - 16] >> 4);
          if (five) q |= static_cast<int>((qh >> j) & 1u) << 4;
          y[j] = has_min ? q * d + m : (q - offset) * d;
        }
        y += 32;
        break;
      }
      case DType::kQ4_K:
      case DType::kQ5_K: {
        const bool five = t == DType::kQ5_K;
        const float d = HalfAt(p);
        const float dmin = HalfAt(p + 2);
        const uint8_t* scales = p + 4;
        const uint8_t* qh = p + 16;
        const uint8_t* ql = p + (five ? 48 : 16);
        for (int g = 0; g < 4; ++g) {
          for (int half = 0; half < 2; ++half) {
            int sc, m;
            ScaleMinK4(2 * g + half, scales, &sc, &m);
            const float d1 = d * sc;
            const float m1 = dmin * m;
            for (int l = 0; l < 32; ++l) {
              int q = half == 0 ? (ql[32 * g + l] & 0xF) : (ql[32 * g + l] >> 4);
              if (five && (qh[l] >> (2 * g + half) & 1)) q += 16;
              *y++ = d1 * q - m1;
            }
          }
        }
        break;
      }
      case DType::kQ6_K: {
        const uint8_t* ql = p;
        const uint8_t* qh = p + 128;
        const int8_t* sc = reinterpret_cast<const int8_t*>(p + 192);
        const float d = HalfAt(p + 208);
        for (int n = 0; n < 2; ++n, ql += 64, qh += 32, sc += 8, y += 128) {
          for (int l = 0; l < 32; ++l) {
            const int is = l / 16;
            const int q1 = ((ql[l] & 0xF) | (((qh[l] >> 0) & 3) << 4)) - 32;
            const int q2 = ((ql[l + 32] & 0xF) | (((qh[l] >> 2) & 3) << 4)) - 32;
            const int q3 = ((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32;
            const int q4 = ((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32;
            y[l + 0] = d * sc[is + 0] * q1;
            y[l + 32] = d * sc[is + 2] * q2;
            y[l + 64] = d * sc[is + 4] * q3;
            y[l + 96] = d * sc[is + 6] * q4;
          }
        }
        break;
      }
    }
  }
}

}  // namespace kvfork::testing
