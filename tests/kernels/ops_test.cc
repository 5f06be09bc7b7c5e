// Row ops on every ISA against the scalar reference. Tolerances: the ops
// whose SIMD code does exactly the reference's arithmetic (Rope, AddInPlace,
// EmbeddingLookup, Argmax) must match bit for bit; RmsNorm differs only in the
// order of the sum of squares (relative 1e-5); ops with exp use our
// vectorized exp (a few ulp, relative 1e-5) instead of std::exp.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "kernel_test_util.h"
#include "kernels/ops.h"
#include "kernels/reference.h"

namespace kvfork {
namespace {

using testing::RandomFloats;
using testing::SameBits;
using testing::ScopedIsa;
using testing::SupportedIsas;
using testing::ToBf16;

void ExpectClose(const std::vector<float>& got, const std::vector<float>& want, float rel,
                 const std::string& what) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i)
    ASSERT_NEAR(got[i], want[i], rel * std::fabs(want[i]) + 1e-30f) << what << " at " << i;
}

TEST(RmsNorm, MatchesReference) {
  for (int64_t dim : {1, 7, 64, 1000, 1027}) {
    const int64_t rows = 3;
    std::vector<float> x = RandomFloats(rows * dim, 1, -3, 3), w = RandomFloats(dim, 2);
    std::vector<float> want(x.size());
    reference::RmsNorm(x.data(), w.data(), rows, dim, 1e-6f, want.data());
    for (Isa isa : SupportedIsas()) {
      ScopedIsa scoped(isa);
      std::vector<float> got(x.size());
      RmsNorm(x.data(), w.data(), rows, dim, 1e-6f, got.data());
      ExpectClose(got, want, 1e-5f, std::string(IsaName(isa)) + " dim=" + std::to_string(dim));
      std::vector<float> in_place = x;
      RmsNorm(in_place.data(), w.data(), rows, dim, 1e-6f, in_place.data());
      ASSERT_TRUE(SameBits(in_place.data(), got.data(), got.size())) << IsaName(isa);
    }
  }
}

TEST(Rope, MatchesReferenceBitwise) {
  for (int64_t head_dim : {2, 20, 64, 128}) {
    const int64_t tokens = 5, heads = 3;
    std::vector<float> x = RandomFloats(tokens * heads * head_dim, 3, -2, 2);
    std::vector<int32_t> pos = {0, 1, 17, 4095, 131071};
    std::vector<float> inv_freq(head_dim / 2);
    for (int64_t i = 0; i < head_dim / 2; ++i)
      inv_freq[i] = static_cast<float>(std::pow(1e6, -2.0 * i / head_dim));
    std::vector<float> want = x;
    reference::Rope(want.data(), tokens, heads, head_dim, pos.data(), inv_freq.data());
    std::vector<float> cos(tokens * head_dim / 2), sin(tokens * head_dim / 2);
    RopeAngles(pos.data(), tokens, inv_freq.data(), head_dim / 2, cos.data(), sin.data());
    for (Isa isa : SupportedIsas()) {
      ScopedIsa scoped(isa);
      std::vector<float> got = x;
      RopeRotate(got.data(), tokens, heads, head_dim, cos.data(), sin.data());
      ASSERT_TRUE(SameBits(got.data(), want.data(), got.size()))
          << IsaName(isa) << " head_dim=" << head_dim;
    }
  }
}

TEST(SiluMul, MatchesReferenceAndIsPositionIndependent) {
  for (int64_t n : {1, 9, 100, 1029}) {
    std::vector<float> g = RandomFloats(n, 4, -20, 20), u = RandomFloats(n, 5);
    std::vector<float> want(n);
    reference::SiluMul(g.data(), u.data(), n, want.data());
    for (Isa isa : SupportedIsas()) {
      ScopedIsa scoped(isa);
      std::vector<float> got(n);
      SiluMul(g.data(), u.data(), n, got.data());
      ExpectClose(got, want, 1e-5f, std::string(IsaName(isa)) + " n=" + std::to_string(n));
      // Element i alone (a tail of length 1) gives the same bits as inside the vector.
      for (int64_t i = 0; i < n; i += 7) {
        float one;
        SiluMul(&g[i], &u[i], 1, &one);
        ASSERT_TRUE(SameBits(&one, &got[i], 1)) << IsaName(isa) << " i=" << i;
      }
      std::vector<float> alias = g;
      SiluMul(alias.data(), u.data(), n, alias.data());
      ASSERT_TRUE(SameBits(alias.data(), got.data(), n)) << IsaName(isa);
    }
  }
}

// Gemma's GELU-tanh gate and final softcap against the formulas in double
// (PyTorch's gelu(approximate="tanh"); cap * tanh(x / cap)).
TEST(GeluTanhMulAndSoftCap, MatchFormulas) {
  const std::vector<float> gate = RandomFloats(1000, 81, -8, 8), up = RandomFloats(1000, 82, -2, 2);
  std::vector<float> out(gate.size());
  GeluTanhMul(gate.data(), up.data(), static_cast<int64_t>(gate.size()), out.data());
  for (size_t i = 0; i < gate.size(); ++i) {
    const double x = gate[i];
    const double want =
        0.5 * x * (1 + std::tanh(std::sqrt(2 / M_PI) * (x + 0.044715 * x * x * x))) * up[i];
    ASSERT_NEAR(out[i], want, 1e-6 + 1e-6 * std::fabs(want)) << i;
  }
  std::vector<float> logits = RandomFloats(1000, 83, -100, 100);
  const std::vector<float> raw = logits;
  SoftCap(logits.data(), static_cast<int64_t>(logits.size()), 30.0f);
  for (size_t i = 0; i < raw.size(); ++i) {
    const double want = 30.0 * std::tanh(raw[i] / 30.0);
    ASSERT_NEAR(logits[i], want, 1e-5 + 1e-6 * std::fabs(want)) << i;
    ASSERT_LE(std::fabs(logits[i]), 30.0f);
  }
}

TEST(AddInPlace, MatchesReferenceBitwise) {
  const int64_t n = 1001;
  std::vector<float> y = RandomFloats(n, 6), x = RandomFloats(n, 7);
  std::vector<float> want = y;
  reference::AddInPlace(want.data(), x.data(), n);
  for (Isa isa : SupportedIsas()) {
    ScopedIsa scoped(isa);
    std::vector<float> got = y;
    AddInPlace(got.data(), x.data(), n);
    ASSERT_TRUE(SameBits(got.data(), want.data(), n)) << IsaName(isa);
  }
}

TEST(Softmax, MatchesReference) {
  for (int64_t n : {1, 5, 16, 151, 1000}) {
    std::vector<float> x = RandomFloats(n, 8, -30, 30);
    if (n > 3) x[2] = -INFINITY;  // a masked logit gives exactly 0
    std::vector<float> want = x;
    reference::Softmax(want.data(), n);
    for (Isa isa : SupportedIsas()) {
      ScopedIsa scoped(isa);
      std::vector<float> got = x;
      Softmax(got.data(), n);
      ExpectClose(got, want, 1e-5f, std::string(IsaName(isa)) + " n=" + std::to_string(n));
      if (n > 3) {
        EXPECT_EQ(got[2], 0.0f) << IsaName(isa);
      }
    }
  }
}

TEST(EmbeddingLookup, MatchesReferenceBitwise) {
  const int64_t vocab = 10, dim = 21;
  std::vector<float> f32 = RandomFloats(vocab * dim, 9);
  std::vector<bf16_t> bf16 = ToBf16(f32);
  std::vector<int32_t> ids = {3, 0, 9, 3};
  for (DType dtype : {DType::kF32, DType::kBf16}) {
    MatrixView table{dtype, dtype == DType::kF32 ? static_cast<const void*>(f32.data()) : bf16.data(),
                     vocab, dim};
    std::vector<float> want(ids.size() * dim);
    reference::EmbeddingLookup(table, ids.data(), ids.size(), want.data());
    for (Isa isa : SupportedIsas()) {
      ScopedIsa scoped(isa);
      std::vector<float> got(want.size());
      EmbeddingLookup(table, ids.data(), ids.size(), got.data());
      ASSERT_TRUE(SameBits(got.data(), want.data(), got.size())) << IsaName(isa);
    }
  }
}

TEST(Argmax, MatchesReferenceIncludingTiesAndNaN) {
  std::vector<std::vector<float>> cases;
  cases.push_back(RandomFloats(151936, 10));
  cases.push_back(RandomFloats(37, 11));
  cases.push_back({1.0f});
  cases.push_back({2.0f, 5.0f, 5.0f, 1.0f, 5.0f});                  // lowest index wins ties
  cases.push_back({NAN, 1.0f, 3.0f});                               // NaN first: index 0
  cases.push_back({1.0f, NAN, 3.0f, NAN});                          // NaN elsewhere ignored
  cases.push_back({-INFINITY, -INFINITY, -INFINITY});
  cases.push_back({-0.0f, 0.0f});
  std::vector<float> late(1000, -1.0f);
  late[999] = 4.0f;
  late[17] = 4.0f;
  cases.push_back(late);
  for (const auto& x : cases) {
    const int64_t want = reference::Argmax(x.data(), x.size());
    for (Isa isa : SupportedIsas()) {
      ScopedIsa scoped(isa);
      ASSERT_EQ(Argmax(x.data(), x.size()), want) << IsaName(isa) << " n=" << x.size();
    }
  }
}

}  // namespace
}  // namespace kvfork
