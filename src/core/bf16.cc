#include "core/bf16.h"

#include <cmath>

namespace kvfork {

float F16ToF32(f16_t h) {
  uint32_t sign = (h >> 15) & 1u;
  uint32_t exp = (h >> 10) & 0x1fu;
  uint32_t mant = h & 0x3ffu;
  uint32_t bits;
  if (exp == 0) {
    if (mant == 0) {
      bits = sign << 31;
    } else {  // subnormal: normalize
      int e = -1;
      do {
        ++e;
        mant <<= 1;
      } while ((mant & 0x400u) == 0);
      mant &= 0x3ffu;
      bits = (sign << 31) | static_cast<uint32_t>(127 - 15 - e) << 23 | (mant << 13);
    }
  } else if (exp == 31) {
    bits = (sign << 31) | 0x7f800000u | (mant << 13);
  } else {
    bits = (sign << 31) | ((exp + 127 - 15) << 23) | (mant << 13);
  }
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

f16_t F32ToF16(float f) {
  uint32_t bits;
  std::memcpy(&bits, &f, 4);
  uint32_t sign = (bits >> 16) & 0x8000u;
  uint32_t abs = bits & 0x7fffffffu;
  if (abs > 0x7f800000u) return static_cast<f16_t>(sign | 0x7e00u);  // NaN
  if (abs >= 0x477ff000u) return static_cast<f16_t>(sign | 0x7c00u);  // overflow -> inf
  if (abs < 0x38800000u) {  // subnormal or zero in half
    float a;
    std::memcpy(&a, &abs, 4);
    // 2^-24 is the smallest half subnormal; nearbyint rounds to nearest even.
    uint32_t m = static_cast<uint32_t>(std::nearbyint(a * 16777216.0f));
    return static_cast<f16_t>(sign | m);
  }
  uint32_t rounding = 0xfffu + ((abs >> 13) & 1u);
  uint32_t r = (abs + rounding) >> 13;
  r -= (127 - 15) << 10;
  return static_cast<f16_t>(sign | r);
}

}  // namespace kvfork
