// MatMul on every ISA: against the scalar reference, and bit-for-bit batch
// invariance (row i of an M-row call == the M=1 call on row i) and thread
// invariance (1, 2, 3 threads).
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "kernel_test_util.h"
#include "kernels/ops.h"
#include "kernels/ops_isa.h"
#include "kernels/reference.h"

namespace kvfork {
namespace {

using testing::RandomFloats;
using testing::SameBits;
using testing::ScopedIsa;
using testing::SupportedIsas;
using testing::ToBf16;

struct Weights {
  std::vector<float> f32;
  std::vector<bf16_t> bf16;
  MatrixView View(DType dtype, int64_t rows, int64_t cols) const {
    MatrixView v;
    v.dtype = dtype;
    v.data = dtype == DType::kBf16 ? static_cast<const void*>(bf16.data())
                                   : static_cast<const void*>(f32.data());
    v.rows = rows;
    v.cols = cols;
    return v;
  }
};

Weights MakeWeights(int64_t n, int64_t k, uint32_t seed) {
  Weights w;
  w.f32 = RandomFloats(static_cast<size_t>(n * k), seed);
  w.bf16 = ToBf16(w.f32);
  return w;
}

// Tolerance vs reference: both compute the same exact products (x rounded to
// bf16 for bf16 weights, so products are exact in f32) and differ only in the
// summation order, so the error is bounded by a few ulps of sum |x*w| times
// the number of additions in the longer chain: we allow 4 * k * eps.
float Tolerance(const float* x, const MatrixView& w, int64_t row, int64_t k) {
  double abs_sum = 0;
  for (int64_t c = 0; c < k; ++c) {
    double wv = w.dtype == DType::kBf16 ? Bf16ToF32(static_cast<const bf16_t*>(w.data)[row * k + c])
                                        : static_cast<const float*>(w.data)[row * k + c];
    abs_sum += std::fabs(x[c] * wv);
  }
  return static_cast<float>(4.0 * k * 5.96e-8 * abs_sum + 1e-30);
}

class MatMulTest : public ::testing::TestWithParam<DType> {};

TEST_P(MatMulTest, MatchesReferenceOnEveryIsa) {
  const DType dtype = GetParam();
  ThreadPool pool(2);
  for (auto [m, n, k] : {std::tuple<int64_t, int64_t, int64_t>{1, 37, 100},
                         {5, 50, 129},
                         {7, 24, 64},
                         {13, 61, 257},
                         {4, 3, 7},
                         // Whole 16-row / 32-k tiles (no padded copy on amx),
                         // 1..3 token blocks and 1..4 W tiles per task.
                         {40, 96, 96},
                         {17, 64, 1024},
                         {1, 48, 32},
                         {33, 208, 64}}) {
    Weights wb = MakeWeights(n, k, 11);
    MatrixView w = wb.View(dtype, n, k);
    std::vector<float> x = RandomFloats(static_cast<size_t>(m * k), 7);
    std::vector<float> ref(static_cast<size_t>(m * n));
    reference::MatMul(x.data(), m, w, ref.data(), pool);
    for (Isa isa : SupportedIsas()) {
      ScopedIsa scoped(isa);
      std::vector<float> y(static_cast<size_t>(m * n), -1.0f);
      MatMul(x.data(), m, w, y.data(), pool);
      for (int64_t i = 0; i < m; ++i) {
        for (int64_t j = 0; j < n; ++j) {
          float tol = Tolerance(x.data() + i * k, w, j, k);
          ASSERT_NEAR(y[i * n + j], ref[i * n + j], tol)
              << IsaName(isa) << " " << DTypeName(dtype) << " m=" << m << " n=" << n << " k=" << k
              << " at (" << i << "," << j << ")";
        }
      }
    }
  }
}

TEST_P(MatMulTest, RowsOfABatchEqualSingleRowCallsBitwise) {
  const DType dtype = GetParam();
  // n = 83, k = 201: not a multiple of any tile; n = 96, k = 128: whole tiles;
  // k = 2,100: W groups too large for L1 run in the other tile order (avx512);
  // n = 1,013, k = 200: decode tasks of 248 rows at 2 threads, read as streams
  // of 31 (avx2), and a ragged last task of 21.
  for (auto [n, k] :
       {std::pair<int64_t, int64_t>{83, 201}, {96, 128}, {30, 2100}, {1013, 200}}) {
    Weights wb = MakeWeights(n, k, 3);
    MatrixView w = wb.View(dtype, n, k);
    ThreadPool pool(2);
    for (Isa isa : SupportedIsas()) {
      ScopedIsa scoped(isa);
      for (int64_t m : {7, 33, 512}) {
        std::vector<float> x =
            RandomFloats(static_cast<size_t>(m * k), 100 + static_cast<uint32_t>(m));
        std::vector<float> y(static_cast<size_t>(m * n));
        MatMul(x.data(), m, w, y.data(), pool);
        for (int64_t i = 0; i < m; ++i) {
          std::vector<float> y1(static_cast<size_t>(n));
          MatMul(x.data() + i * k, 1, w, y1.data(), pool);
          size_t at = 0;
          ASSERT_TRUE(SameBits(y.data() + i * n, y1.data(), static_cast<size_t>(n), &at))
              << IsaName(isa) << " " << DTypeName(dtype) << " m=" << m << " row " << i << " col "
              << at << ": " << y[i * n + at] << " vs " << y1[at];
        }
        // Any sub-batch starting anywhere gives the same bits too (tiles
        // shift; 2..8 rows take the decode path on avx512, 5..8 of them as
        // one 8 x 2 tile).
        for (int64_t sub : {2, 3, 4, 5, 8}) {
          if (2 + sub > m) continue;
          std::vector<float> ys(static_cast<size_t>(sub * n));
          MatMul(x.data() + 2 * k, sub, w, ys.data(), pool);
          ASSERT_TRUE(SameBits(y.data() + 2 * n, ys.data(), static_cast<size_t>(sub * n)))
              << IsaName(isa) << " m=" << m << " rows 2.." << 1 + sub;
        }
      }
    }
  }
}

TEST_P(MatMulTest, ThreadCountDoesNotChangeBits) {
  const DType dtype = GetParam();
  const int64_t n = 131, k = 333;
  Weights wb = MakeWeights(n, k, 5);
  MatrixView w = wb.View(dtype, n, k);
  // m = 1: decode (tasks of long row runs); m = 19: the prefill tiles.
  for (int64_t m : {1, 19}) {
    std::vector<float> x = RandomFloats(static_cast<size_t>(m * k), 9);
    for (Isa isa : SupportedIsas()) {
      ScopedIsa scoped(isa);
      std::vector<float> base(static_cast<size_t>(m * n));
      {
        ThreadPool pool(1);
        MatMul(x.data(), m, w, base.data(), pool);
      }
      for (int threads : {2, 3}) {
        ThreadPool pool(threads);
        std::vector<float> y(static_cast<size_t>(m * n));
        MatMul(x.data(), m, w, y.data(), pool);
        ASSERT_TRUE(SameBits(base.data(), y.data(), base.size()))
            << IsaName(isa) << " " << DTypeName(dtype) << " m=" << m << " threads=" << threads;
      }
    }
  }
}

// The avx512 decode path (m <= 8) with its software prefetch on and off
// (off by default on Zen 4): either way, the bits of the prefill tiles.
TEST_P(MatMulTest, Avx512DecodePrefetchDoesNotChangeBits) {
  if (!IsaSupported(Isa::kAvx512)) GTEST_SKIP() << "no avx512";
  const DType dtype = GetParam();
  const int64_t n = 1013, k = 1000, m_prefill = 10;
  Weights wb = MakeWeights(n, k, 11);
  MatrixView w = wb.View(dtype, n, k);
  std::vector<float> x = RandomFloats(static_cast<size_t>(m_prefill * k), 12);
  ScopedIsa scoped(Isa::kAvx512);
  ThreadPool pool(2);
  std::vector<float> prefill(static_cast<size_t>(m_prefill * n));
  MatMul(x.data(), m_prefill, w, prefill.data(), pool);
  for (int prefetch : {0, 1}) {
    avx512::SetDecodePrefetchForTesting(prefetch);
    for (int64_t m : {1, 2, 3, 4, 5, 6, 7, 8}) {
      std::vector<float> y(static_cast<size_t>(m * n));
      MatMul(x.data() + k, m, w, y.data(), pool);
      size_t at = 0;
      EXPECT_TRUE(SameBits(prefill.data() + n, y.data(), y.size(), &at))
          << DTypeName(dtype) << " prefetch=" << prefetch << " m=" << m << " at " << at;
    }
  }
  avx512::SetDecodePrefetchForTesting(-1);
}

// MatMulShared: every target gets the bits of its own MatMul call, whatever
// the number of targets (more than one ISA-level pass holds), their row
// counts (tasks of one ParallelFor straddle matrices), M and the threads.
TEST_P(MatMulTest, SharedCallGivesEachTargetItsOwnCallsBits) {
  const DType dtype = GetParam();
  const std::vector<int64_t> rows = {40, 17, 64, 130, 24};
  for (int64_t k : {96, 201}) {
    std::vector<Weights> wbs;
    for (size_t i = 0; i < rows.size(); ++i)
      wbs.push_back(MakeWeights(rows[i], k, 20 + static_cast<uint32_t>(i)));
    for (Isa isa : SupportedIsas()) {
      ScopedIsa scoped(isa);
      for (int threads : {1, 2, 3}) {
        ThreadPool pool(threads);
        for (int64_t m : {1, 5, 33}) {
          std::vector<float> x = RandomFloats(static_cast<size_t>(m * k), 40);
          std::vector<std::vector<float>> ys, own;
          std::vector<MatMulTarget> targets;
          for (size_t i = 0; i < rows.size(); ++i) {
            ys.emplace_back(static_cast<size_t>(m * rows[i]), -1.0f);
            own.emplace_back(static_cast<size_t>(m * rows[i]), -2.0f);
            // Alternate dtypes in the second half: each change starts a pass.
            const DType d = i >= 3 && i % 2 == 1 ? (dtype == DType::kBf16 ? DType::kF32 : DType::kBf16)
                                                 : dtype;
            targets.push_back({wbs[i].View(d, rows[i], k), ys.back().data()});
          }
          MatMulShared(x.data(), m, targets, pool);
          for (size_t i = 0; i < rows.size(); ++i) {
            MatMul(x.data(), m, targets[i].w, own[i].data(), pool);
            size_t at = 0;
            ASSERT_TRUE(SameBits(ys[i].data(), own[i].data(), own[i].size(), &at))
                << IsaName(isa) << " " << DTypeName(targets[i].w.dtype) << " k=" << k
                << " threads=" << threads << " m=" << m << " target " << i << " at " << at
                << ": " << ys[i][at] << " vs " << own[i][at];
          }
        }
      }
    }
  }
}

// The sweep of the fused calls' tests: K with and without a tail; rows under
// one tile, over several prefill tasks and over two decode tasks; every ISA;
// 1-3 threads; M from one token to several passes over the token blocks.
// body(k, n, m, pool) returns the first mismatch, if any, as a message.
template <typename Body>
void ForEachFusedCase(DType dtype, const Body& body) {
  for (int64_t k : {96, 201}) {
    for (int64_t n : {17, 130, 300}) {
      for (Isa isa : SupportedIsas()) {
        ScopedIsa scoped(isa);
        for (int threads : {1, 2, 3}) {
          ThreadPool pool(threads);
          for (int64_t m : {1, 5, 33, 70}) {
            const std::string mismatch = body(k, n, m, pool);
            ASSERT_TRUE(mismatch.empty())
                << IsaName(isa) << " " << DTypeName(dtype) << " k=" << k << " n=" << n
                << " threads=" << threads << " m=" << m << " " << mismatch;
          }
        }
      }
    }
  }
}

// "" when got and want have the same bits, else where they first differ.
std::string FirstMismatch(const std::vector<float>& got, const std::vector<float>& want) {
  size_t at = 0;
  if (SameBits(got.data(), want.data(), want.size(), &at)) return "";
  return "at " + std::to_string(at) + ": " + std::to_string(got[at]) + " vs " +
         std::to_string(want[at]);
}

// MatMulSiluMul: the bits of MatMulShared over {gate, up} and SiluMul, on
// every ISA (the AMX level fuses the two; the others run them in turn).
TEST_P(MatMulTest, SiluMulCallGivesSharedCallThenSiluMulsBits) {
  const DType dtype = GetParam();
  ForEachFusedCase(dtype, [&](int64_t k, int64_t n, int64_t m, ThreadPool& pool) {
    const Weights gate = MakeWeights(n, k, 50), up = MakeWeights(n, k, 51);
    const MatrixView gw = gate.View(dtype, n, k), uw = up.View(dtype, n, k);
    const std::vector<float> x = RandomFloats(static_cast<size_t>(m * k), 52);
    std::vector<float> got(static_cast<size_t>(m * n), -1.0f), scratch(got.size(), -1.0f);
    MatMulSiluMul(x.data(), m, {gw, got.data()}, {uw, scratch.data()}, pool);
    std::vector<float> g(got.size(), -2.0f), u(got.size(), -2.0f), want(got.size());
    const MatMulTarget both[] = {{gw, g.data()}, {uw, u.data()}};
    MatMulShared(x.data(), m, both, pool);
    SiluMul(g.data(), u.data(), m * n, want.data());
    return FirstMismatch(got, want);
  });
}

// MatMulAddTo: the bits of MatMul then AddInPlace on every ISA (the AMX level
// adds each C tile into the sum as it stores it); rows of the sum outside the
// product's are never touched.
TEST_P(MatMulTest, AddToCallGivesMatMulThenAddInPlacesBits) {
  const DType dtype = GetParam();
  ForEachFusedCase(dtype, [&](int64_t k, int64_t n, int64_t m, ThreadPool& pool) {
    const Weights w = MakeWeights(n, k, 60);
    const MatrixView view = w.View(dtype, n, k);
    const std::vector<float> x = RandomFloats(static_cast<size_t>(m * k), 61);
    // One spare row after the sum: it must keep its value.
    const std::vector<float> start = RandomFloats(static_cast<size_t>((m + 1) * n), 62);
    std::vector<float> got = start, scratch(static_cast<size_t>(m * n), -1.0f);
    MatMulAddTo(x.data(), m, {view, scratch.data()}, got.data(), pool);
    std::vector<float> want = start, product(static_cast<size_t>(m * n));
    MatMul(x.data(), m, view, product.data(), pool);
    AddInPlace(want.data(), product.data(), m * n);
    return FirstMismatch(got, want);
  });
}

// The fused calls' decode rows equal the rows of a batch call: at M = 1 the
// AMX level runs one-token tiles with their own epilogue, at M = 20 the
// 16-token tiles with StoreTransposed's. n = 83, k = 201: a ragged panel and
// K tail; n = 512, k = 1,024: whole 256-row decode tasks in place in W.
TEST_P(MatMulTest, FusedDecodeRowsEqualBatchRowsBitwise) {
  const DType dtype = GetParam();
  ThreadPool pool(2);
  const int64_t m = 20;
  for (auto [n, k] : {std::pair<int64_t, int64_t>{83, 201}, {512, 1024}}) {
    const Weights gate = MakeWeights(n, k, 70), up = MakeWeights(n, k, 71);
    const MatrixView gw = gate.View(dtype, n, k), uw = up.View(dtype, n, k);
    const std::vector<float> x = RandomFloats(static_cast<size_t>(m * k), 72);
    const std::vector<float> start = RandomFloats(static_cast<size_t>(m * n), 73);
    for (Isa isa : SupportedIsas()) {
      ScopedIsa scoped(isa);
      std::vector<float> silu(static_cast<size_t>(m * n)), scratch(silu.size());
      std::vector<float> sum = start;
      MatMulSiluMul(x.data(), m, {gw, silu.data()}, {uw, scratch.data()}, pool);
      MatMulAddTo(x.data(), m, {gw, scratch.data()}, sum.data(), pool);
      for (int64_t i = 0; i < m; ++i) {
        std::vector<float> silu1(static_cast<size_t>(n)), scratch1(silu1.size());
        std::vector<float> sum1(start.begin() + i * n, start.begin() + (i + 1) * n);
        MatMulSiluMul(x.data() + i * k, 1, {gw, silu1.data()}, {uw, scratch1.data()}, pool);
        MatMulAddTo(x.data() + i * k, 1, {gw, scratch1.data()}, sum1.data(), pool);
        size_t at = 0;
        ASSERT_TRUE(SameBits(silu.data() + i * n, silu1.data(), silu1.size(), &at))
            << IsaName(isa) << " " << DTypeName(dtype) << " n=" << n << " SiluMul row " << i
            << " col " << at;
        ASSERT_TRUE(SameBits(sum.data() + i * n, sum1.data(), sum1.size(), &at))
            << IsaName(isa) << " " << DTypeName(dtype) << " n=" << n << " AddTo row " << i
            << " col " << at;
      }
    }
  }
}

TEST(MatMulBf16, RoundsXToBf16First) {
  // x = 1 + 2^-10 is not a bf16; rounded it is 1.0, so 1 * w must give w exactly.
  const int64_t k = 1;
  std::vector<bf16_t> w = {F32ToBf16(3.0f)};
  MatrixView view{DType::kBf16, w.data(), 1, k};
  float x = 1.0f + 1.0f / 1024.0f, y = 0.0f;
  ThreadPool pool(1);
  for (Isa isa : SupportedIsas()) {
    ScopedIsa scoped(isa);
    MatMul(&x, 1, view, &y, pool);
    EXPECT_EQ(y, 3.0f) << IsaName(isa);
  }
}

INSTANTIATE_TEST_SUITE_P(DTypes, MatMulTest, ::testing::Values(DType::kF32, DType::kBf16),
                         [](const auto& info) { return std::string(DTypeName(info.param)); });

}  // namespace
}  // namespace kvfork
