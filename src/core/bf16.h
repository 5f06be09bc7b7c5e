// bfloat16 and float16 conversions. Round to nearest even, NaN kept quiet:
// this matches PyTorch's and llama.cpp's f32->bf16 conversion bit for bit.
#pragma once

#include <cstdint>
#include <cstring>

namespace kvfork {

using bf16_t = uint16_t;  // raw bits of a bfloat16
using f16_t = uint16_t;   // raw bits of an IEEE half

inline float Bf16ToF32(bf16_t h) {
  uint32_t bits = static_cast<uint32_t>(h) << 16;
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

inline bf16_t F32ToBf16(float f) {
  uint32_t bits;
  std::memcpy(&bits, &f, 4);
  if ((bits & 0x7fffffffu) > 0x7f800000u) return static_cast<bf16_t>((bits >> 16) | 0x40);  // NaN
  uint32_t rounding = 0x7fffu + ((bits >> 16) & 1u);
  return static_cast<bf16_t>((bits + rounding) >> 16);
}

float F16ToF32(f16_t h);
f16_t F32ToF16(float f);

}  // namespace kvfork
