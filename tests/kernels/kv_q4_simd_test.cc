// The SIMD q4 row quantizer and Hadamard rotation of each ISA level the CPU
// has (kernels/kv_q4_isa.h) against the portable ones (kv_q4.h), byte for
// byte, for every head_dim a q4 layout allows (multiples of 32 up to
// kMaxAttentionHeadDim): random rows, and groups of NaN, inf, values beyond
// f16, zeros, denormals, tied magnitudes and exact halves (round to even),
// in every rounding mode (both follow it, as std::nearbyint does).
#include <gtest/gtest.h>

#include <cfenv>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "core/cpu_features.h"
#include "kernel_test_util.h"
#include "kernels/kv_layout.h"
#include "kernels/kv_q4.h"
#include "kernels/kv_q4_isa.h"
#include "kernels/ops.h"

namespace kvfork {
namespace {

struct Level {
  std::string name;
  void (*quantize)(const float* x, int head_dim, uint8_t* codes, f16_t* scales);
  void (*rotate)(float* x, int head_dim);
};

std::vector<Level> SimdLevels() {
  std::vector<Level> out;
  if (IsaSupported(Isa::kAvx2)) out.push_back({"avx2", avx2::QuantizeQ4Row, avx2::HadamardRotate});
  if (IsaSupported(Isa::kAvx512))
    out.push_back({"avx512", avx512::QuantizeQ4Row, avx512::HadamardRotate});
  return out;
}

std::vector<int> Q4HeadDims() {
  std::vector<int> out;
  for (int hd = kQ4Group; hd <= kMaxAttentionHeadDim; hd += kQ4Group) out.push_back(hd);
  return out;
}

constexpr int kGroupKinds = 14;

// Group kind `kind` of 32 values into g[0, 32).
void FillGroup(int kind, std::mt19937& rng, float* g) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const float inf = std::numeric_limits<float>::infinity();
  const float denorm = std::numeric_limits<float>::denorm_min();
  std::uniform_real_distribution<float> unit(-1.0f, 1.0f);
  std::uniform_int_distribution<int> pos(0, 31), exponent(-40, 40);
  for (int i = 0; i < 32; ++i) g[i] = 5.0f * unit(rng);
  switch (kind) {
    case 0:  // plain random
      break;
    case 1:  // random magnitudes from 2^-40 to 2^40: f16-subnormal and clamped scales
      for (int i = 0; i < 32; ++i) g[i] = std::ldexp(unit(rng), exponent(rng));
      break;
    case 2:  // NaNs, one at the first position: skipped by the max, stored as -8
      g[0] = nan;
      g[pos(rng)] = nan;
      g[pos(rng)] = -nan;
      break;
    case 3:  // all NaN: scale 0
      for (int i = 0; i < 32; ++i) g[i] = nan;
      break;
    case 4:  // +inf and -inf: the first is m, the scale clamps, the rest round to 0
      g[pos(rng)] = inf;
      g[pos(rng)] = -inf;
      break;
    case 5:  // beyond f16's range: the scale clamps to -+65504
      g[pos(rng)] = 3e38f;
      g[pos(rng)] = -1e30f;
      break;
    case 6:  // zeros of both signs
      for (int i = 0; i < 32; ++i) g[i] = (i % 3 == 0) ? -0.0f : 0.0f;
      break;
    case 7:  // f32 denormals only: amax > 0 but the f16 scale is 0
      for (int i = 0; i < 32; ++i) g[i] = static_cast<float>(pos(rng) - 16) * denorm;
      break;
    case 8:  // tiny: an f16-subnormal scale
      for (int i = 0; i < 32; ++i) g[i] = 1e-6f * unit(rng);
      break;
    case 9: {  // tied magnitudes of both signs: the first one is m
      const int a = pos(rng), b = pos(rng);
      g[a] = 6.0f;
      g[b] = -6.0f;
      break;
    }
    case 10:  // m = -8 gives d = 1: x = k + 0.5 are ties, rounded to even; 7.5 clamps
      for (int i = 0; i < 32; ++i) g[i] = static_cast<float>(i % 16 - 8) + 0.5f;
      g[31] = -8.0f;
      break;
    case 11:  // at the f16 clamp: m = -524032 gives d = 65504 exactly
      g[pos(rng)] = -524032.0f;
      g[pos(rng)] = 524287.0f;
      break;
    case 12:  // 32 equal values and a NaN: m is the first number
      for (int i = 0; i < 32; ++i) g[i] = -2.5f;
      g[pos(rng)] = nan;
      break;
    case 13:  // mixed: denormals, one normal value, a NaN
      for (int i = 0; i < 32; ++i) g[i] = static_cast<float>(i) * denorm;
      g[pos(rng)] = 1e-3f;
      g[pos(rng)] = nan;
      break;
  }
}

std::string Hex(const uint8_t* p, size_t n) {
  std::string s;
  char buf[4];
  for (size_t i = 0; i < n; ++i) {
    std::snprintf(buf, sizeof(buf), "%02x", p[i]);
    s += buf;
  }
  return s;
}

TEST(KvQ4Simd, QuantizerMatchesPortableByteForByte) {
  const std::vector<Level> levels = SimdLevels();
  if (levels.empty()) GTEST_SKIP() << "no AVX2 on this CPU";
  const int modes[] = {FE_TONEAREST, FE_DOWNWARD, FE_UPWARD, FE_TOWARDZERO};
  const char* mode_names[] = {"to nearest", "downward", "upward", "toward zero"};
  int rows_checked = 0;
  for (int hd : Q4HeadDims()) {
    for (int r = 0; r < 2 * kGroupKinds; ++r) {
      std::mt19937 rng(static_cast<uint32_t>(hd * 1000 + r));
      std::vector<float> x(hd);
      for (int g = 0; g < hd / kQ4Group; ++g) FillGroup((r + g) % kGroupKinds, rng, &x[g * 32]);
      for (int mode = 0; mode < 4; ++mode) {
        ASSERT_EQ(std::fesetround(modes[mode]), 0);
        std::vector<uint8_t> want_codes(hd / 2, 0xAB);
        std::vector<f16_t> want_scales(hd / 32, 0xABCD);
        QuantizeQ4Row(x.data(), hd, want_codes.data(), want_scales.data());
        for (const Level& level : levels) {
          std::vector<uint8_t> codes(hd / 2, 0x5A);
          std::vector<f16_t> scales(hd / 32, 0x5A5A);
          level.quantize(x.data(), hd, codes.data(), scales.data());
          std::fesetround(FE_TONEAREST);  // so a failure prints normally
          ASSERT_EQ(Hex(codes.data(), codes.size()), Hex(want_codes.data(), want_codes.size()))
              << level.name << " head_dim " << hd << " row " << r << " " << mode_names[mode];
          ASSERT_EQ(scales, want_scales)
              << level.name << " head_dim " << hd << " row " << r << " " << mode_names[mode];
          ASSERT_EQ(std::fesetround(modes[mode]), 0);
        }
        std::fesetround(FE_TONEAREST);
        ++rows_checked;
      }
    }
  }
  EXPECT_EQ(rows_checked, 16 * 2 * kGroupKinds * 4);
}

// The special groups do what the portable quantizer's contract says, so the
// byte compare above is against the intended behaviour, not just any bits.
TEST(KvQ4Simd, SpecialGroupsFollowTheContract) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const float inf = std::numeric_limits<float>::infinity();
  for (const Level& level : SimdLevels()) {
    std::vector<float> x(128, 1.0f);
    x[0] = nan;                                                    // group 0: NaN -> code 0
    x[32 + 3] = inf;                                               // group 1: clamped scale
    for (int i = 64; i < 96; ++i) x[i] = 1e-40f;                   // group 2: f32 denormals
    for (int i = 96; i < 128; ++i) x[i] = (i % 2) ? 3.0f : -3.0f;  // group 3: tie, -3 first
    uint8_t codes[64];
    f16_t scales[4];
    level.quantize(x.data(), 128, codes, scales);
    EXPECT_EQ(codes[0] & 15, 0) << level.name;          // NaN stored as -8
    EXPECT_EQ(codes[1] & 15, 0) << level.name;  // m = 1 (dim 1), d = -0.125: 1 -> -8
    EXPECT_EQ(scales[1], F32ToF16(-65504.0f)) << level.name;
    EXPECT_EQ(F16ToF32(scales[2]), 0.0f) << level.name;  // -0: d32 = 1e-40 / -8
    EXPECT_EQ(codes[32], 0x88) << level.name;  // scale 0: every value 0
    EXPECT_EQ(scales[3], F32ToF16(3.0f / 8.0f)) << level.name;
    EXPECT_EQ(codes[48] & 15, 0) << level.name;  // -3 / 0.375 = -8
    EXPECT_EQ(codes[48] >> 4, 0) << level.name;  // dim 112 is -3 too
    EXPECT_EQ(codes[49] & 15, 15) << level.name;  // 3 / 0.375 = 8 -> 7
  }
}

TEST(KvQ4Simd, RotationMatchesPortableBitForBit) {
  const std::vector<Level> levels = SimdLevels();
  if (levels.empty()) GTEST_SKIP() << "no AVX2 on this CPU";
  for (int hd : Q4HeadDims()) {
    for (int r = 0; r < 4; ++r) {
      std::vector<float> x = testing::RandomFloats(hd, static_cast<uint32_t>(hd + 97 * r), -3, 3);
      if (r == 3) {  // specials propagate through the same adds
        x[1] = std::numeric_limits<float>::infinity();
        x[hd - 1] = 1e-40f;
        x[hd / 2] = 3e38f;
      }
      std::vector<float> want = x;
      HadamardRotate(want.data(), hd);
      for (const Level& level : levels) {
        std::vector<float> got = x;
        level.rotate(got.data(), hd);
        size_t at = 0;
        EXPECT_TRUE(testing::SameBits(got.data(), want.data(), hd, &at))
            << level.name << " head_dim " << hd << " row " << r << " dim " << at << ": "
            << got[at] << " vs " << want[at];
      }
    }
  }
}

}  // namespace
}  // namespace kvfork
