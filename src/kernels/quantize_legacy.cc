// The 32-weight block formats: q8_0, q4_0, q4_1, q5_0, q5_1 (ggml-quants.c's
// quantize_row_*_ref). One scale (and for _1 a min) per block, found from the
// block's extremes in one pass; no search. Casts truncate where ggml's do
// ((int8_t)(v + 8.5f) is a floor for the non-negative values it sees).
#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstring>

#include "core/bf16.h"
#include "kernels/quantize_blocks.h"

namespace kvfork::quantize {
namespace {

constexpr int kBlock = 32;

// Absolute maximum of the block and the signed value that has it (the first
// one on ties, as ggml keeps the first).
void SignedAbsMax(const float* x, float* amax_out, float* max_out) {
  float amax = 0, max = 0;
  for (int j = 0; j < kBlock; ++j) {
    if (amax < std::fabs(x[j])) {
      amax = std::fabs(x[j]);
      max = x[j];
    }
  }
  *amax_out = amax;
  *max_out = max;
}

void MinMax(const float* x, float* min_out, float* max_out) {
  float min = FLT_MAX, max = -FLT_MAX;
  for (int j = 0; j < kBlock; ++j) {
    if (x[j] < min) min = x[j];
    if (x[j] > max) max = x[j];
  }
  *min_out = min;
  *max_out = max;
}

// The 5th bits of the block's 32 quants, bit j for weight j.
void StoreHighBits(const uint8_t* q, uint8_t* qh_dst) {
  uint32_t qh = 0;
  for (int j = 0; j < kBlock / 2; ++j) {
    qh |= ((q[j] & 0x10u) >> 4) << j;
    qh |= ((q[j + kBlock / 2] & 0x10u) >> 4) << (j + kBlock / 2);
  }
  std::memcpy(qh_dst, &qh, 4);
}

// Low nibbles: byte j holds weight j (low) and weight j + 16 (high).
void StoreNibbles(const uint8_t* q, uint8_t* qs) {
  for (int j = 0; j < kBlock / 2; ++j)
    qs[j] = static_cast<uint8_t>((q[j] & 0x0F) | ((q[j + kBlock / 2] & 0x0F) << 4));
}

}  // namespace

void StoreF16(float v, uint8_t* dst) {
  const f16_t h = F32ToF16(v);
  std::memcpy(dst, &h, 2);
}

float LoadF16(const uint8_t* src) {
  f16_t h;
  std::memcpy(&h, src, 2);
  return F16ToF32(h);
}

// Block: f16 d, int8 qs[32]; weight = d * q, d = amax / 127.
void RowQ8_0(const float* x, int64_t n, uint8_t* dst) {
  for (int64_t b = 0; b < n / kBlock; ++b, x += kBlock, dst += 34) {
    float amax = 0;
    for (int j = 0; j < kBlock; ++j) amax = std::max(amax, std::fabs(x[j]));
    const float d = amax / ((1 << 7) - 1);
    const float id = d != 0 ? 1.0f / d : 0.0f;
    StoreF16(d, dst);
    for (int j = 0; j < kBlock; ++j) {
      // roundf: halves away from zero, as ggml.
      dst[2 + j] = static_cast<uint8_t>(static_cast<int8_t>(std::round(x[j] * id)));
    }
  }
}

// Block: f16 d, 16 bytes of nibbles; weight = d * (q - 8), d = max / -8 so
// the extreme weight maps to q = 0 exactly.
void RowQ4_0(const float* x, int64_t n, uint8_t* dst) {
  for (int64_t b = 0; b < n / kBlock; ++b, x += kBlock, dst += 18) {
    float amax, max;
    SignedAbsMax(x, &amax, &max);
    const float d = max / -8;
    const float id = d != 0 ? 1.0f / d : 0.0f;
    StoreF16(d, dst);
    uint8_t q[kBlock];
    for (int j = 0; j < kBlock; ++j)
      q[j] = static_cast<uint8_t>(std::min(15, static_cast<int>(x[j] * id + 8.5f)));
    StoreNibbles(q, dst + 2);
  }
}

// Block: f16 d, f16 m, 16 bytes of nibbles; weight = d * q + m.
void RowQ4_1(const float* x, int64_t n, uint8_t* dst) {
  for (int64_t b = 0; b < n / kBlock; ++b, x += kBlock, dst += 20) {
    float min, max;
    MinMax(x, &min, &max);
    const float d = (max - min) / ((1 << 4) - 1);
    const float id = d != 0 ? 1.0f / d : 0.0f;
    StoreF16(d, dst);
    StoreF16(min, dst + 2);
    uint8_t q[kBlock];
    for (int j = 0; j < kBlock; ++j)
      q[j] = static_cast<uint8_t>(std::min(15, static_cast<int>((x[j] - min) * id + 0.5f)));
    StoreNibbles(q, dst + 4);
  }
}

// Block: f16 d, u32 high bits, 16 bytes of nibbles; weight = d * (q - 16).
void RowQ5_0(const float* x, int64_t n, uint8_t* dst) {
  for (int64_t b = 0; b < n / kBlock; ++b, x += kBlock, dst += 22) {
    float amax, max;
    SignedAbsMax(x, &amax, &max);
    const float d = max / -16;
    const float id = d != 0 ? 1.0f / d : 0.0f;
    StoreF16(d, dst);
    uint8_t q[kBlock];
    for (int j = 0; j < kBlock; ++j)
      q[j] = static_cast<uint8_t>(std::min(31, static_cast<int>(x[j] * id + 16.5f)));
    StoreHighBits(q, dst + 2);
    StoreNibbles(q, dst + 6);
  }
}

// Block: f16 d, f16 m, u32 high bits, 16 bytes of nibbles; weight = d * q + m.
void RowQ5_1(const float* x, int64_t n, uint8_t* dst) {
  for (int64_t b = 0; b < n / kBlock; ++b, x += kBlock, dst += 24) {
    float min, max;
    MinMax(x, &min, &max);
    const float d = (max - min) / ((1 << 5) - 1);
    const float id = d != 0 ? 1.0f / d : 0.0f;
    StoreF16(d, dst);
    StoreF16(min, dst + 2);
    uint8_t q[kBlock];
    // No clamp, as in ggml: (max - min) * id rounds to at most 31.5.
    for (int j = 0; j < kBlock; ++j)
      q[j] = static_cast<uint8_t>(static_cast<int>((x[j] - min) * id + 0.5f));
    StoreHighBits(q, dst + 4);
    StoreNibbles(q, dst + 8);
  }
}

}  // namespace kvfork::quantize
