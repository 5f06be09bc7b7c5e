// QuantizeRow (kernels/quantize_row.h): every format's round-trip error on
// Gaussian weights stays within its bound, blocks whose values the format
// holds exactly give hand-computed bytes, and each block is quantized
// independently of its neighbours. Bit-exact agreement with llama.cpp's
// llama-quantize is checked in tests/model/llamacpp/quantize_llamacpp_test.cc.
#include "kernels/quantize_row.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "kernels/dequantize_for_test.h"

namespace kvfork {
namespace {

using testing::DequantizeRowForTest;

std::vector<float> GaussianRow(int64_t n, float sigma, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> nd(0, sigma);
  std::vector<float> x(static_cast<size_t>(n));
  for (float& v : x) v = nd(rng);
  return x;
}

std::vector<uint8_t> Quantize(DType t, const std::vector<float>& x) {
  std::vector<uint8_t> q(RowBytes(t, static_cast<int64_t>(x.size())));
  QuantizeRow(t, x.data(), static_cast<int64_t>(x.size()), q.data());
  return q;
}

std::vector<float> RoundTrip(DType t, const std::vector<float>& x) {
  std::vector<uint8_t> q = Quantize(t, x);
  std::vector<float> y(x.size());
  DequantizeRowForTest(t, q.data(), static_cast<int64_t>(x.size()), y.data());
  return y;
}

struct FormatBound {
  DType dtype;
  // Bound on ||x - dequant(quant(x))|| / ||x|| for N(0, sigma) weights: the
  // uniform-quantizer error step/sqrt(12) of each format with ~25% margin
  // over what llama.cpp's own quantizer reaches on the same rows
  // (q8_0 0.0054, q4_0 0.086, q4_1 0.079, q5_0 0.043, q5_1 0.038,
  // q4_k 0.073, q5_k 0.036, q6_k 0.017).
  double max_rel_rmse;
};

class QuantizeRowFormat : public ::testing::TestWithParam<FormatBound> {};

TEST_P(QuantizeRowFormat, RoundTripErrorWithinBound) {
  const FormatBound& f = GetParam();
  for (float sigma : {0.02f, 1.0f, 300.0f}) {
    const std::vector<float> x = GaussianRow(4096, sigma, 7);
    const std::vector<float> y = RoundTrip(f.dtype, x);
    double err = 0, norm = 0;
    for (size_t i = 0; i < x.size(); ++i) {
      err += (static_cast<double>(x[i]) - y[i]) * (static_cast<double>(x[i]) - y[i]);
      norm += static_cast<double>(x[i]) * x[i];
    }
    EXPECT_LT(std::sqrt(err / norm), f.max_rel_rmse) << DTypeName(f.dtype) << " sigma " << sigma;
  }
}

TEST_P(QuantizeRowFormat, ZeroRowRoundTripsToZero) {
  // (The bytes need not be zero: q4_0 stores q = 8 for 0 with d = 0.)
  const DType t = GetParam().dtype;
  const std::vector<float> y = RoundTrip(t, std::vector<float>(512, 0.0f));
  for (size_t i = 0; i < y.size(); ++i) ASSERT_EQ(y[i], 0.0f) << DTypeName(t) << " weight " << i;
}

TEST_P(QuantizeRowFormat, BlocksAreQuantizedIndependently) {
  // A row of 4 super-blocks equals its blocks quantized one at a time:
  // nothing (a row-wide scale, a running sum) leaks between blocks, which is
  // what lets llama.cpp and the kernels read any block on its own.
  const DType t = GetParam().dtype;
  const int64_t be = 256;  // a super-block, 8 blocks of the 32-weight formats
  std::vector<float> x = GaussianRow(4 * be, 0.05f, 11);
  x[3] = 4.0f;  // one block with an outlier, the others not
  const std::vector<uint8_t> whole = Quantize(t, x);
  const size_t block_bytes = RowBytes(t, be);
  for (int b = 0; b < 4; ++b) {
    std::vector<float> part(x.begin() + b * be, x.begin() + (b + 1) * be);
    const std::vector<uint8_t> q = Quantize(t, part);
    EXPECT_EQ(0, std::memcmp(q.data(), whole.data() + b * block_bytes, block_bytes))
        << DTypeName(t) << " block " << b;
  }
}

INSTANTIATE_TEST_SUITE_P(
    AllFormats, QuantizeRowFormat,
    ::testing::Values(FormatBound{DType::kQ8_0, 0.007}, FormatBound{DType::kQ4_0, 0.11},
                      FormatBound{DType::kQ4_1, 0.10}, FormatBound{DType::kQ5_0, 0.055},
                      FormatBound{DType::kQ5_1, 0.048}, FormatBound{DType::kQ4_K, 0.092},
                      FormatBound{DType::kQ5_K, 0.046}, FormatBound{DType::kQ6_K, 0.022},
                      FormatBound{DType::kF16, 0.0005}, FormatBound{DType::kBf16, 0.004}),
    [](const ::testing::TestParamInfo<FormatBound>& info) {
      return std::string(DTypeName(info.param.dtype));
    });

std::vector<uint8_t> F16Bytes(uint16_t h) {
  return {static_cast<uint8_t>(h & 0xFF), static_cast<uint8_t>(h >> 8)};
}

TEST(QuantizeRowLayout, Q8_0IntegersWithAbsMax127AreStoredAsIs) {
  // amax 127 -> d = 1 (f16 0x3C00) and every integer is its own quant.
  std::vector<float> x(32);
  for (int j = 0; j < 32; ++j) x[j] = static_cast<float>(4 * j - 64);
  x[0] = -127;
  const std::vector<uint8_t> q = Quantize(DType::kQ8_0, x);
  std::vector<uint8_t> want = F16Bytes(0x3C00);
  for (float v : x) want.push_back(static_cast<uint8_t>(static_cast<int8_t>(v)));
  EXPECT_EQ(q, want);
}

TEST(QuantizeRowLayout, Q4_0NibblePairsAreWeightJAndJPlus16) {
  // Values -8..7 twice: the signed max -8 gives d = max / -8 = 1, q = x + 8;
  // byte j packs weight j (low nibble) with weight j + 16 (high nibble).
  std::vector<float> x(32);
  for (int j = 0; j < 32; ++j) x[j] = static_cast<float>(j % 16 - 8);
  const std::vector<uint8_t> q = Quantize(DType::kQ4_0, x);
  std::vector<uint8_t> want = F16Bytes(0x3C00);
  for (int j = 0; j < 16; ++j) want.push_back(static_cast<uint8_t>(j | (j << 4)));
  EXPECT_EQ(q, want);
}

TEST(QuantizeRowLayout, Q5_1HighBitsGoToTheU32AfterDAndM) {
  // x = 1 + j/2: min 1, d = 15.5 / 31 = 0.5, q = j; weights 16..31 have the
  // 5th bit, bits 16..31 of qh.
  std::vector<float> x(32);
  for (int j = 0; j < 32; ++j) x[j] = 1.0f + 0.5f * static_cast<float>(j);
  const std::vector<uint8_t> q = Quantize(DType::kQ5_1, x);
  std::vector<uint8_t> want = F16Bytes(0x3800);          // d = 0.5
  for (uint8_t b : F16Bytes(0x3C00)) want.push_back(b);  // m = 1
  for (uint8_t b : {0x00, 0x00, 0xFF, 0xFF}) want.push_back(b);
  for (int j = 0; j < 16; ++j) want.push_back(static_cast<uint8_t>(j | (j << 4)));
  EXPECT_EQ(q, want);
}

TEST(QuantizeRowLayout, Q6_KSubBlockScalesFollowTheirMagnitude) {
  // Sub-block i (16 weights) spans +-(i + 1): its int8 scale grows with
  // i + 1 (the largest is +-128 or 127), and every weight round-trips within
  // one quantization step of its sub-block (half a step, except the clamp
  // at q = +31 on the side opposite the sub-block's extreme).
  std::vector<float> x(256);
  std::mt19937 rng(3);
  std::uniform_real_distribution<float> ud(-1, 1);
  for (int i = 0; i < 256; ++i) x[i] = ud(rng) * static_cast<float>(i / 16 + 1);
  const std::vector<uint8_t> q = Quantize(DType::kQ6_K, x);
  const int8_t* scales = reinterpret_cast<const int8_t*>(q.data() + 192);
  for (int i = 1; i < 16; ++i)
    EXPECT_GT(std::abs(scales[i]) * 1.0, std::abs(scales[0]) * (i + 1) * 0.6) << "sub-block " << i;
  std::vector<float> y(256);
  DequantizeRowForTest(DType::kQ6_K, q.data(), 256, y.data());
  const float d = testing::HalfAt(q.data() + 208);
  for (int i = 0; i < 256; ++i) {
    const float step = std::fabs(d * scales[i / 16]);
    EXPECT_LE(std::fabs(x[i] - y[i]), step * 1.01f + 1e-6f) << "weight " << i;
  }
}

}  // namespace
}  // namespace kvfork
