// The q4 and q4r KV formats (kernels/kv_q4.h, kv_layout.h): codes and scales
// computed by hand, the round-trip bound, the rotation, the bytes a token
// takes against bf16, and what the rotation buys on a row with an outlier
// channel. The attention kernels that read these blocks are tested with the
// other formats in attention_test.cc.
#include "kernels/kv_q4.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <vector>

#include "core/bf16.h"
#include "kernel_test_util.h"
#include "kernels/ops.h"
#include "kernels/reference.h"

namespace kvfork {
namespace {

using testing::RandomFloats;

TEST(KvQ4, CodesAndScalesByHand) {
  // Group 0: x_i = i - 16. The largest magnitude is -16 (i = 0), so d =
  // -16 / -8 = 2 and q = round_even((i - 16) / 2), clamped to [-8, 7].
  // Group 1: largest +3 at i = 7, d = -0.375 (exact in f16), so 3 -> -8.
  // Group 2: all zero: scale +0, every nibble 8.
  std::vector<float> x(96, 0.0f);
  for (int i = 0; i < 32; ++i) x[i] = static_cast<float>(i - 16);
  x[32 + 7] = 3.0f;
  x[32 + 8] = -1.5f;  // -1.5 / -0.375 = 4
  x[32 + 20] = 0.1f;  // -0.2667 -> 0
  uint8_t codes[48];
  f16_t scales[3];
  QuantizeQ4Row(x.data(), 96, codes, scales);
  EXPECT_EQ(scales[0], F32ToF16(2.0f));
  EXPECT_EQ(scales[1], F32ToF16(-0.375f));
  EXPECT_EQ(scales[2], 0);
  // Byte i: dim i low, dim 16 + i high. q(0) = -8, q(1) = round_even(-7.5)
  // = -8, q(2) = -7, q(16) = 0, q(17) = round_even(0.5) = 0, q(18) = 1,
  // q(31) = round_even(7.5) = 8 -> 7.
  EXPECT_EQ(codes[0], 0x80);
  EXPECT_EQ(codes[1], 0x80);
  EXPECT_EQ(codes[2], 0x91);
  EXPECT_EQ(codes[15] >> 4, 15);
  EXPECT_EQ(codes[16 + 7] & 15, 0);   // 3 / -0.375 = -8
  EXPECT_EQ(codes[16 + 8] & 15, 12);  // 4 + 8
  EXPECT_EQ(codes[16 + 4] >> 4, 8);   // dim 20: 0
  for (int i = 0; i < 16; ++i) EXPECT_EQ(codes[32 + i], 0x88);
  EXPECT_EQ(DequantizeQ4(codes, scales, 0), -16.0f);
  EXPECT_EQ(DequantizeQ4(codes, scales, 31), 14.0f);  // clamped
  EXPECT_EQ(DequantizeQ4(codes, scales, 39), 3.0f);
  EXPECT_EQ(DequantizeQ4(codes, scales, 40), -1.5f);
  EXPECT_EQ(DequantizeQ4(codes, scales, 70), 0.0f);
}

TEST(KvQ4, RoundTripWithinOneStepAndFiniteOnHugeValues) {
  for (int hd : {32, 64, 128, 512}) {
    std::vector<float> x = RandomFloats(hd, 7 + hd, -5.0f, 5.0f);
    x[3] = 1e-30f;
    std::vector<uint8_t> codes(hd / 2);
    std::vector<f16_t> scales(hd / 32);
    QuantizeQ4Row(x.data(), hd, codes.data(), scales.data());
    for (int d = 0; d < hd; ++d) {
      const float step = std::fabs(F16ToF32(scales[d / 32]));
      // Half a step from rounding; a full one (and the f16 rounding of d) where
      // the far side clamps at +7.
      EXPECT_LE(std::fabs(DequantizeQ4(codes.data(), scales.data(), d) - x[d]), step * 1.01f)
          << "hd " << hd << " dim " << d;
    }
  }
  // Beyond f16's range the scale clamps to 65504 rather than become inf.
  std::vector<float> huge(32, 1e7f);
  uint8_t codes[16];
  f16_t scales[1];
  QuantizeQ4Row(huge.data(), 32, codes, scales);
  EXPECT_TRUE(std::isfinite(DequantizeQ4(codes, scales, 0)));
  EXPECT_EQ(DequantizeQ4(codes, scales, 0), 8.0f * 65504.0f);
}

TEST(KvQ4, HadamardIsOrthonormalAndItsOwnInverse) {
  EXPECT_EQ(HadamardBlock(128), 128);
  EXPECT_EQ(HadamardBlock(96), 32);
  EXPECT_EQ(HadamardBlock(64), 64);
  for (int hd : {32, 64, 96, 128, 256}) {
    const std::vector<float> x = RandomFloats(hd, 3 + hd);
    std::vector<float> y = x;
    HadamardRotate(y.data(), hd);
    double nx = 0, ny = 0;
    for (int d = 0; d < hd; ++d) {
      nx += double{x[d]} * x[d];
      ny += double{y[d]} * y[d];
    }
    EXPECT_NEAR(ny, nx, 1e-5 * nx) << hd;
    EXPECT_NE(y, x);
    HadamardRotate(y.data(), hd);
    for (int d = 0; d < hd; ++d) EXPECT_NEAR(y[d], x[d], 1e-5f) << hd << " dim " << d;
  }
  // A unit vector spreads evenly over its block: H e_0 = 1 / sqrt(n).
  std::vector<float> e(96, 0.0f);
  e[0] = 1.0f;
  HadamardRotate(e.data(), 96);
  for (int d = 0; d < 32; ++d) EXPECT_FLOAT_EQ(e[d], 1.0f / std::sqrt(32.0f));
  for (int d = 32; d < 96; ++d) EXPECT_EQ(e[d], 0.0f);
}

KvLayout Qwen3Layout(KvDType dtype) {
  KvLayout l;
  l.num_layers = 28;
  l.num_kv_heads = 8;
  l.head_dim = 128;
  l.dtype = dtype;
  return l;
}

TEST(KvQ4, AToken3Point5TimesSmallerThanBf16) {
  const KvLayout bf16 = Qwen3Layout(KvDType::kBf16);
  for (KvDType t : {KvDType::kQ4, KvDType::kQ4r}) {
    const KvLayout q4 = Qwen3Layout(t);
    // 64 code bytes + 4 f16 scales per head row, against 256 bytes of bf16.
    EXPECT_EQ(q4.BytesPerToken(), 28u * 2 * 8 * 72);
    EXPECT_GE(static_cast<double>(bf16.BytesPerToken()) / static_cast<double>(q4.BytesPerToken()),
              3.5);
    EXPECT_EQ(q4.PlaneBytes(), 16u * 72);
    EXPECT_EQ(q4.Q4ScaleOffset(1, 1, 2) - q4.PlaneOffset(1, 1, 2), 16u * 64);
  }
}

// K rows with one outlier channel (dim 5 at 10, the rest in [-1, 1]), as a
// trained model's keys have: plain q4 spends its 16 levels of dims 0-31 on
// the outlier and rounds that group's other dims coarsely; q4r spreads the
// outlier over the head first. Written through WriteKv and read back with
// the reference reader (rotated back for q4r). RMS error over the rows,
// q4 against q4r: 0.195 / 0.075 with the outlier at 10, 0.100 / 0.060 at 5,
// but 0.281 / 0.214 at 50: one scale per 32 dims already confines an
// outlier to its group, and a large one spread over the head coarsens every
// group, so the rotation pays most for moderate outliers.
TEST(KvQ4, RotationShrinksTheErrorOfAnOutlierChannel) {
  const int hd = 128, tokens = 16;
  const float outlier = 10.0f;
  double err[2] = {0, 0};
  for (int r = 0; r < 2; ++r) {
    KvLayout l;
    l.num_layers = 1;
    l.num_kv_heads = 1;
    l.head_dim = hd;
    l.block_size = 16;
    l.dtype = r == 0 ? KvDType::kQ4 : KvDType::kQ4r;
    std::vector<uint8_t> block(l.BlockBytes() + 64);
    uint8_t* base =
        reinterpret_cast<uint8_t*>((reinterpret_cast<uintptr_t>(block.data()) + 63) / 64 * 64);
    std::vector<float> k = RandomFloats(tokens * hd, 11);
    for (int t = 0; t < tokens; ++t) k[t * hd + 5] = outlier;
    const std::vector<float> v = k;
    WriteKv(l, 0, &base, 0, tokens, k.data(), v.data());
    for (int t = 0; t < tokens; ++t) {
      std::vector<float> row(hd);
      for (int d = 0; d < hd; ++d) row[d] = reference::ReadKv(l, 0, 0, &base, t, 0, d);
      if (r == 1) HadamardRotate(row.data(), hd);
      for (int d = 0; d < hd; ++d) err[r] += std::pow(row[d] - k[t * hd + d], 2.0);
    }
  }
  const double rms_q4 = std::sqrt(err[0] / (tokens * hd)),
               rms_q4r = std::sqrt(err[1] / (tokens * hd));
  EXPECT_LT(rms_q4r, 0.5 * rms_q4) << "q4 " << rms_q4 << " q4r " << rms_q4r;
}

}  // namespace
}  // namespace kvfork
