// The block-quantized weight formats in the kernels (kernels/quant.h):
//  - DequantizeRow against a per-element statement of ggml's layouts,
//  - the int8 activation rows (q8_0 / q8_K),
//  - MatMul with quantized weights on every ISA, every format: against the
//    dequantized weights, and bit for bit across M, threads, MatMulShared
//    runs, MatMulSiluMul, MatMulAddTo and MatMulGrouped (DESIGN.md
//    invariant 1).
// Weights are random valid blocks: random code bytes, small finite scales.
#include "kernels/quant.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <iterator>
#include <random>
#include <string>
#include <vector>

#include "core/bf16.h"
#include "core/cpu_features.h"
#include "kernel_test_util.h"
#include "kernels/ops.h"
#include "kernels/quant_blocks.h"
#include "kernels/quant_isa.h"
#include "kernels/quant_kscales_simd.h"

namespace kvfork {
namespace {

using testing::SameBits;
using testing::ScopedIsa;
using testing::SupportedIsas;

constexpr DType kFormats[] = {DType::kQ8_0, DType::kQ4_0, DType::kQ4_1, DType::kQ5_0,
                              DType::kQ5_1, DType::kQ4_K, DType::kQ5_K, DType::kQ6_K};

void PutF16(uint8_t* p, float v) {
  const f16_t h = F32ToF16(v);
  std::memcpy(p, &h, 2);
}
float GetF16(const uint8_t* p) {
  f16_t h;
  std::memcpy(&h, p, 2);
  return F16ToF32(h);
}

// rows x cols of random blocks; scales in [0.002, 0.02), *_1 mins and K dmins
// of either sign up to 0.05.
std::vector<uint8_t> RandomBlocks(DType t, int64_t rows, int64_t cols, uint32_t seed) {
  const DTypeTraits& f = Traits(t);
  std::vector<uint8_t> out(RowBytes(t, cols) * static_cast<size_t>(rows));
  std::mt19937 rng(seed);
  for (uint8_t& b : out) b = static_cast<uint8_t>(rng());
  std::uniform_real_distribution<float> scale(0.002f, 0.02f), min(-0.05f, 0.05f);
  for (size_t off = 0; off < out.size(); off += f.block_bytes) {
    uint8_t* b = out.data() + off;
    switch (t) {
      case DType::kQ6_K:
        PutF16(b + 208, scale(rng));
        break;
      case DType::kQ4_1:
      case DType::kQ5_1:
      case DType::kQ4_K:
      case DType::kQ5_K:
        PutF16(b, scale(rng));
        PutF16(b + 2, min(rng));
        break;
      default:
        PutF16(b, scale(rng));
        break;
    }
  }
  return out;
}

// Element e of one block, computed element by element from ggml's layout
// description (ggml-common.h / dequantize_row_*), independently of
// quant_dequant.cc's loops and its scale decoder.
float Element(DType t, const uint8_t* b, int e) {
  auto nib4 = [](const uint8_t* qs, int e) { return e < 16 ? qs[e] & 15 : qs[e - 16] >> 4; };
  auto bit5 = [](const uint8_t* qh, int e) { return (qh[e / 8] >> (e % 8)) & 1; };
  auto k_scale_min = [](const uint8_t* q, int j, int* sc, int* m) {
    if (j < 4) {
      *sc = q[j] & 63;
      *m = q[j + 4] & 63;
    } else {
      *sc = (q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4);
      *m = (q[j + 4] >> 4) | ((q[j] >> 6) << 4);
    }
  };
  switch (t) {
    case DType::kQ8_0:
      return static_cast<int8_t>(b[2 + e]) * GetF16(b);
    case DType::kQ4_0:
      return (nib4(b + 2, e) - 8) * GetF16(b);
    case DType::kQ4_1:
      return nib4(b + 4, e) * GetF16(b) + GetF16(b + 2);
    case DType::kQ5_0:
      return ((nib4(b + 6, e) | bit5(b + 2, e) << 4) - 16) * GetF16(b);
    case DType::kQ5_1:
      return (nib4(b + 8, e) | bit5(b + 4, e) << 4) * GetF16(b) + GetF16(b + 2);
    case DType::kQ4_K:
    case DType::kQ5_K: {
      const bool q5 = t == DType::kQ5_K;
      const uint8_t* qs = b + (q5 ? 48 : 16);
      const int j = e / 32, l = e % 32;
      int sc, m;
      k_scale_min(b + 4, j, &sc, &m);
      int q = j % 2 ? qs[32 * (j / 2) + l] >> 4 : qs[32 * (j / 2) + l] & 15;
      if (q5) q += ((b[16 + l] >> j) & 1) * 16;
      return GetF16(b) * sc * q - GetF16(b + 2) * m;
    }
    case DType::kQ6_K: {
      const uint8_t *ql = b, *qh = b + 128;
      const int8_t* sc = reinterpret_cast<const int8_t*>(b + 192);
      const int h = e / 128, s = e % 128 / 32, l = e % 32;
      const uint8_t lo = ql[64 * h + 32 * (s & 1) + l];
      const int q = ((s < 2 ? lo & 15 : lo >> 4) | ((qh[32 * h + l] >> (2 * s)) & 3) << 4) - 32;
      return GetF16(b + 208) * sc[8 * h + 2 * s + l / 16] * q;
    }
    default:
      return NAN;
  }
}

std::vector<float> Dequantized(DType t, const std::vector<uint8_t>& w, int64_t rows, int64_t cols) {
  std::vector<float> out(static_cast<size_t>(rows * cols));
  for (int64_t r = 0; r < rows; ++r)
    DequantizeRow(t, w.data() + r * RowBytes(t, cols), cols, out.data() + r * cols);
  return out;
}

class QuantTest : public ::testing::TestWithParam<DType> {};

TEST_P(QuantTest, DequantizeRowFollowsGgmlLayout) {
  const DType t = GetParam();
  const int64_t cols = 512;
  const std::vector<uint8_t> w = RandomBlocks(t, 3, cols, 7);
  const std::vector<float> got = Dequantized(t, w, 3, cols);
  const int be = Traits(t).block_elems, bb = Traits(t).block_bytes;
  for (int64_t i = 0; i < 3 * cols; ++i) {
    const float want = Element(t, w.data() + i / be * bb, static_cast<int>(i % be));
    ASSERT_FLOAT_EQ(got[i], want) << DTypeName(t) << " element " << i;
  }
}

// Codes round x * 127 / amax to nearest, so d * q is within half a step of
// x, where the step is amax / 127; the stored d may be that step rounded
// (llama.cpp keeps q8_0's scale as f16), which moves d * q by at most
// 127 |d - step| more.
TEST(QuantActivationTest, RoundsToNearestWithinHalfAStep) {
  const int64_t cols = 512;
  std::vector<float> x = testing::RandomFloats(cols, 3, -2.0f, 2.0f);
  for (int j = 0; j < 32; ++j) x[64 + j] = 0.0f;  // an all-zero block of 32
  for (int block : {32, 256}) {
    std::vector<uint8_t> mem(Q8RowBytes(cols, block));
    QuantizeQ8Row(x.data(), cols, block, mem.data());
    const Q8Row r = Q8RowAt(mem.data(), cols, block);
    for (int64_t b = 0; b < cols / block; ++b) {
      float amax = 0.0f;
      for (int j = 0; j < block; ++j) amax = std::max(amax, std::fabs(x[b * block + j]));
      const double step = amax / 127.0;
      EXPECT_LE(std::fabs(r.d[b] - step), step * 1e-3) << "scale of block " << b;
      const double bound = step * 0.5 * 1.0001 + 127.0 * std::fabs(r.d[b] - step);
      int max_q = 0;
      for (int j = 0; j < block; ++j) {
        const int64_t c = b * block + j;
        max_q = std::max(max_q, std::abs(static_cast<int>(r.qs[c])));
        EXPECT_LE(std::fabs(static_cast<double>(r.d[b]) * r.qs[c] - x[c]), bound)
            << block << " " << c;
      }
      if (block == 32 && b == 2) {
        EXPECT_EQ(r.d[b], 0.0f);
        EXPECT_EQ(max_q, 0);
      } else {
        EXPECT_EQ(max_q, 127);
      }
    }
    for (int64_t i = 0; i < cols / 4; ++i)
      ASSERT_EQ(r.nsum4[i], -(r.qs[4 * i] + r.qs[4 * i + 1] + r.qs[4 * i + 2] + r.qs[4 * i + 3]));
    for (int64_t i = 0; i < cols / 32; ++i) {
      int s = 0;
      for (int j = 0; j < 32; ++j) s += r.qs[32 * i + j];
      ASSERT_EQ(r.sum32[i], s);
    }
  }
}

// MatMul of quantized weights on every ISA, against the dequantized weights:
//  (1) times the quantized activations in double: the kernel's sums are exact
//      integers, so only the float scaling and the block sums round: within
//      1e-5 of sum |w x_q| (one wrong code among 512 moves y by ~2e-3 of it);
//  (2) times x itself: the activation's rounding adds sum_c |w_c| |x_c - x_q,c|
//      (each term within half a q8 step, QuantActivationTest).
TEST_P(QuantTest, MatMulMatchesDequantizedWeightsOnEveryIsa) {
  const DType t = GetParam();
  // An odd number of 32-blocks: the kernels that pair blocks have a tail.
  const int64_t n = 37, k = ActivationBlockElems(t) == 32 ? 544 : 512, m = 5;
  const std::vector<uint8_t> wq = RandomBlocks(t, n, k, 11);
  const std::vector<float> wf = Dequantized(t, wq, n, k);
  const std::vector<float> x = testing::RandomFloats(static_cast<size_t>(m * k), 5);
  const int block = ActivationBlockElems(t);
  std::vector<float> xq(static_cast<size_t>(m * k));
  std::vector<float> step(static_cast<size_t>(m * k));  // |x - x_q| per element
  for (int64_t i = 0; i < m; ++i) {
    std::vector<uint8_t> mem(Q8RowBytes(k, block));
    QuantizeQ8Row(x.data() + i * k, k, block, mem.data());
    const Q8Row r = Q8RowAt(mem.data(), k, block);
    for (int64_t c = 0; c < k; ++c) {
      xq[i * k + c] = r.d[c / block] * r.qs[c];
      step[i * k + c] = std::fabs(xq[i * k + c] - x[i * k + c]);
    }
  }
  ThreadPool pool(2);
  for (Isa isa : SupportedIsas()) {
    ScopedIsa scoped(isa);
    std::vector<float> y(static_cast<size_t>(m * n));
    MatMul(x.data(), m, MatrixView{t, wq.data(), n, k}, y.data(), pool);
    for (int64_t i = 0; i < m; ++i) {
      for (int64_t j = 0; j < n; ++j) {
        double exact_q = 0, abs_q = 0, exact = 0, bound = 0;
        for (int64_t c = 0; c < k; ++c) {
          const double w = wf[j * k + c];
          exact_q += w * xq[i * k + c];
          abs_q += std::fabs(w * xq[i * k + c]);
          exact += w * x[i * k + c];
          bound += std::fabs(w) * step[i * k + c];
        }
        const double got = y[i * n + j];
        ASSERT_NEAR(got, exact_q, 1e-5 * abs_q + 1e-7)
            << DTypeName(t) << " on " << IsaName(isa) << " y[" << i << "," << j << "]";
        ASSERT_NEAR(got, exact, bound + 1e-5 * abs_q + 1e-7)
            << DTypeName(t) << " on " << IsaName(isa) << " y[" << i << "," << j << "]";
      }
    }
  }
}

// Row i of an M-row call equals the M=1 call on row i, and 1 thread equals 2,
// for M on both sides of the decode/prefill switch and enough W rows for
// several tasks per thread.
TEST_P(QuantTest, BatchAndThreadInvariantOnEveryIsa) {
  const DType t = GetParam();
  const int64_t n = 301, k = ActivationBlockElems(t) == 32 ? 800 : 768, m = 7;
  const std::vector<uint8_t> wq = RandomBlocks(t, n, k, 13);
  const MatrixView w{t, wq.data(), n, k};
  const std::vector<float> x = testing::RandomFloats(static_cast<size_t>(m * k), 9);
  ThreadPool one(1), two(2);
  for (Isa isa : SupportedIsas()) {
    ScopedIsa scoped(isa);
    std::vector<float> batched(static_cast<size_t>(m * n)), threaded(batched.size());
    MatMul(x.data(), m, w, batched.data(), one);
    MatMul(x.data(), m, w, threaded.data(), two);
    EXPECT_TRUE(SameBits(batched.data(), threaded.data(), batched.size()))
        << DTypeName(t) << " on " << IsaName(isa) << ": 1 vs 2 threads";
    // Each W row alone (a one-row view) gives its bits in the full call: the
    // kernels' groups of rows change nothing.
    std::vector<float> alone(static_cast<size_t>(m));
    for (int64_t j : {int64_t{0}, int64_t{5}, n - 1}) {
      const MatrixView row{t, w.row(j), 1, k};
      MatMul(x.data(), m, row, alone.data(), two);
      for (int64_t i = 0; i < m; ++i)
        ASSERT_EQ(std::memcmp(&alone[i], &batched[i * n + j], sizeof(float)), 0)
            << DTypeName(t) << " on " << IsaName(isa) << ": W row " << j << " alone, x row " << i;
    }
    for (int64_t rows : {1, 2, 4}) {
      for (int64_t i = 0; i + rows <= m; i += rows) {
        std::vector<float> y(static_cast<size_t>(rows * n));
        MatMul(x.data() + i * k, rows, w, y.data(), two);
        ASSERT_TRUE(SameBits(y.data(), batched.data() + i * n, y.size()))
            << DTypeName(t) << " on " << IsaName(isa) << ": M=" << rows << " at row " << i
            << " vs M=" << m;
      }
    }
  }
}

// Every number of blocks per row from 1 to 9 (32-block formats) or 1 to 5
// (K formats): the avx512 kernels step 4, then 2, then 1 block(s) at a time,
// so each step and each combination of them runs; against the dequantized
// weights, and M=1 against M=5 bit for bit, on every ISA.
TEST_P(QuantTest, EveryBlockCountMatchesDequantizedWeights) {
  const DType t = GetParam();
  const int block = ActivationBlockElems(t);
  const int64_t n = 9, m = 5;
  for (int64_t nb = 1; nb <= (block == 32 ? 9 : 5); ++nb) {
    const int64_t k = nb * block;
    const std::vector<uint8_t> wq = RandomBlocks(t, n, k, static_cast<uint32_t>(20 + nb));
    const std::vector<float> wf = Dequantized(t, wq, n, k);
    const std::vector<float> x = testing::RandomFloats(static_cast<size_t>(m * k), 30 + nb);
    std::vector<float> xq(static_cast<size_t>(m * k));
    for (int64_t i = 0; i < m; ++i) {
      std::vector<uint8_t> mem(Q8RowBytes(k, block));
      QuantizeQ8Row(x.data() + i * k, k, block, mem.data());
      const Q8Row r = Q8RowAt(mem.data(), k, block);
      for (int64_t c = 0; c < k; ++c) xq[i * k + c] = r.d[c / block] * r.qs[c];
    }
    ThreadPool pool(2);
    for (Isa isa : SupportedIsas()) {
      ScopedIsa scoped(isa);
      std::vector<float> y(static_cast<size_t>(m * n)), one(static_cast<size_t>(n));
      MatMul(x.data(), m, MatrixView{t, wq.data(), n, k}, y.data(), pool);
      for (int64_t i = 0; i < m; ++i) {
        MatMul(x.data() + i * k, 1, MatrixView{t, wq.data(), n, k}, one.data(), pool);
        ASSERT_TRUE(SameBits(one.data(), y.data() + i * n, n))
            << DTypeName(t) << " on " << IsaName(isa) << ", " << nb << " blocks: M=1 vs M=5";
        for (int64_t j = 0; j < n; ++j) {
          double exact = 0, abs = 0;
          for (int64_t c = 0; c < k; ++c) {
            exact += static_cast<double>(wf[j * k + c]) * xq[i * k + c];
            abs += std::fabs(static_cast<double>(wf[j * k + c]) * xq[i * k + c]);
          }
          ASSERT_NEAR(y[i * n + j], exact, 1e-5 * abs + 1e-7)
              << DTypeName(t) << " on " << IsaName(isa) << ", " << nb << " blocks, y[" << i << ","
              << j << "]";
        }
      }
    }
  }
}

TEST_P(QuantTest, EmbeddingLookupDequantizesRows) {
  const DType t = GetParam();
  const int64_t vocab = 9, dim = 256;
  const std::vector<uint8_t> wq = RandomBlocks(t, vocab, dim, 17);
  const std::vector<float> wf = Dequantized(t, wq, vocab, dim);
  const int32_t ids[] = {4, 0, 8, 4};
  for (Isa isa : SupportedIsas()) {
    ScopedIsa scoped(isa);
    std::vector<float> out(4 * dim);
    EmbeddingLookup(MatrixView{t, wq.data(), vocab, dim}, ids, 4, out.data());
    for (int r = 0; r < 4; ++r)
      ASSERT_TRUE(SameBits(out.data() + r * dim, wf.data() + ids[r] * dim, dim)) << IsaName(isa);
  }
}

// The formats with an AMX-INT8 prefill kernel (quant_matmul_amx.cc).
constexpr DType kAmxFormats[] = {DType::kQ8_0, DType::kQ4_0, DType::kQ4_1, DType::kQ5_0,
                                 DType::kQ5_1, DType::kQ4_K, DType::kQ5_K, DType::kQ6_K};

// On the amx level a call of more than four x rows runs the AMX-INT8 panel
// kernels; each output must have the avx512 level's bits (which decode
// calls run on amx too): invariant 1 across the prefill/decode split. W rows
// not a multiple of 16 (a partial panel), M on both sides of tile edges.
TEST_P(QuantTest, AmxPrefillEqualsAvx512BitForBit) {
  const DType t = GetParam();
  if (std::find(std::begin(kAmxFormats), std::end(kAmxFormats), t) == std::end(kAmxFormats))
    GTEST_SKIP() << DTypeName(t) << " has no AMX-INT8 kernel";
  if (!IsaSupported(Isa::kAmx) || !DetectCpuFeatures().amx_int8 ||
      !DetectCpuFeatures().avx512_vnni)
    GTEST_SKIP() << "this CPU lacks AMX-INT8 (or the OS does not grant AMX)";
  ASSERT_NE(amx::QuantPanelKernel(t), nullptr) << DTypeName(t);
  const int64_t n = 45;
  ThreadPool pool(2);
  for (int64_t k : {256, 1024, 3072}) {
    const std::vector<uint8_t> wq = RandomBlocks(t, n, k, static_cast<uint32_t>(k));
    const MatrixView w{t, wq.data(), n, k};
    for (int64_t m : {5, 16, 17, 33, 100, 512}) {
      const std::vector<float> x =
          testing::RandomFloats(static_cast<size_t>(m * k), static_cast<uint32_t>(m + k));
      std::vector<float> amx(static_cast<size_t>(m * n)), avx512(amx.size());
      {
        ScopedIsa scoped(Isa::kAmx);
        MatMul(x.data(), m, w, amx.data(), pool);
      }
      {
        ScopedIsa scoped(Isa::kAvx512);
        MatMul(x.data(), m, w, avx512.data(), pool);
      }
      for (size_t e = 0; e < amx.size(); ++e) {
        ASSERT_EQ(std::memcmp(&amx[e], &avx512[e], sizeof(float)), 0)
            << DTypeName(t) << " k=" << k << " m=" << m << " y[" << e / n << "," << e % n
            << "]: amx " << amx[e] << " avx512 " << avx512[e];
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Formats, QuantTest, ::testing::ValuesIn(kFormats),
                         [](const ::testing::TestParamInfo<DType>& p) {
                           return std::string(DTypeName(p.param));
                         });

// The avx512 kernels of the symmetric 32-block formats (and the AMX-INT8
// prefill of Q8_0) take one float chain per output, blocks in order:
// acc = fma(float(the block's exact int32 sum), d_w * d_x, acc) from 0
// (kernels.md, "AMX-INT8 prefill"). Written out here with std::fma, for
// every block count 1..13 (the kernels step four blocks, then two, then one:
// every mix of the steps) and 1..5 x rows (every tile shape, and the AMX
// panels at 5), so a step that reorders the chain fails on any AVX512-VNNI
// CPU, AMX or not.
TEST(QuantChainTest, SymmetricBlocksTakeOneFmaPerBlockInOrder) {
  const int64_t n = 9;
  for (DType t : {DType::kQ8_0, DType::kQ4_0, DType::kQ5_0}) {
    if (avx512::QuantDotKernel(t) == nullptr) GTEST_SKIP() << "no AVX512-VNNI on this CPU";
    const size_t block_bytes = static_cast<size_t>(Traits(t).block_bytes);
    for (int64_t nb = 1; nb <= 13; ++nb) {
      const int64_t k = 32 * nb, m = 5;
      const std::vector<uint8_t> wq = RandomBlocks(t, n, k, static_cast<uint32_t>(60 + nb));
      const std::vector<float> x = testing::RandomFloats(static_cast<size_t>(m * k), 70 + nb);
      std::vector<float> want(static_cast<size_t>(m * n));
      for (int64_t i = 0; i < m; ++i) {
        std::vector<uint8_t> mem(Q8RowBytes(k, 32));
        QuantizeQ8Row(x.data() + i * k, k, 32, mem.data());
        const Q8Row xr = Q8RowAt(mem.data(), k, 32);
        for (int64_t j = 0; j < n; ++j) {
          const uint8_t* row = wq.data() + j * RowBytes(t, k);
          float acc = 0.0f;
          for (int64_t b = 0; b < nb; ++b) {
            const uint8_t* blk = row + b * block_bytes;
            const float d = GetF16(blk);
            int32_t sum = 0;  // codes: the element over d, exact for these small integers
            for (int e = 0; e < 32; ++e)
              sum += static_cast<int32_t>(Element(t, blk, e) / d) * xr.qs[32 * b + e];
            acc = std::fma(static_cast<float>(sum), d * xr.d[b], acc);
          }
          want[i * n + j] = acc;
        }
      }
      ThreadPool pool(2);
      for (Isa isa : {Isa::kAvx512, Isa::kAmx}) {
        if (!IsaSupported(isa)) continue;
        ScopedIsa scoped(isa);
        for (int64_t rows = 1; rows <= m; ++rows) {
          std::vector<float> y(static_cast<size_t>(rows * n));
          MatMul(x.data(), rows, MatrixView{t, wq.data(), n, k}, y.data(), pool);
          size_t diff = 0;
          ASSERT_TRUE(SameBits(y.data(), want.data(), y.size(), &diff))
              << DTypeName(t) << " on " << IsaName(isa) << ", " << nb << " blocks, M=" << rows
              << ": y[" << diff / n << "," << diff % n << "] = " << y[diff] << ", chain "
              << want[diff];
        }
      }
    }
  }
}

// The avx512 kernels that unpack 4- and 6-bit codes with GFNI give the bits
// of the ones with shifts and masks, in every tile (4 x 1 at one x row, 1 x 4
// and its 2- and 3-row forms above) and for the rows past the last 4 x 1
// tile. MatMul runs the GFNI ones where the CPU has them, so the tests above
// check those against the dequantized weights; this keeps the other ones
// checked on such a CPU too.
TEST(QuantGfniTest, GfniUnpackGivesTheSameBits) {
  if (avx512::QuantDotKernel(DType::kQ4_K, true) == nullptr)
    GTEST_SKIP() << "no AVX512-VNNI with GFNI on this CPU";
  const int64_t n = 13, k = 768;
  const std::vector<float> x = testing::RandomFloats(static_cast<size_t>(5 * k), 6);
  std::vector<std::vector<uint8_t>> mem(5, std::vector<uint8_t>(Q8RowBytes(k, 256)));
  std::vector<Q8Row> rows;
  for (int i = 0; i < 5; ++i) {
    QuantizeQ8Row(x.data() + i * k, k, 256, mem[i].data());
    rows.push_back(Q8RowAt(mem[i].data(), k, 256));
  }
  for (DType t : {DType::kQ4_K, DType::kQ5_K, DType::kQ6_K}) {
    const std::vector<uint8_t> wq = RandomBlocks(t, n, k, 40);
    const QuantDotFn plain = avx512::QuantDotKernel(t, false), gfni = avx512::QuantDotKernel(t, true);
    ASSERT_NE(plain, nullptr);
    ASSERT_NE(gfni, nullptr);
    for (int64_t nx = 1; nx <= 5; ++nx) {
      std::vector<float> want(static_cast<size_t>(nx * n)), got(want.size());
      plain(wq.data(), RowBytes(t, k), n, rows.data(), nx, want.data(), n);
      gfni(wq.data(), RowBytes(t, k), n, rows.data(), nx, got.data(), n);
      EXPECT_TRUE(SameBits(got.data(), want.data(), want.size()))
          << DTypeName(t) << ", " << nx << " x rows";
    }
  }
}

// One MatMulShared call over mixed formats (more targets than one ISA-level
// pass takes), MatMulSiluMul and MatMulAddTo give the bits of MatMul per
// matrix followed by SiluMul / AddInPlace, on every ISA.
TEST(QuantFusedTest, SharedSiluAndAddToMatchMatMul) {
  const int64_t k = 512;
  const DType types[] = {DType::kQ4_K, DType::kQ6_K, DType::kQ8_0,
                         DType::kQ4_K, DType::kQ5_0, DType::kF32};
  const int64_t rows[] = {40, 24, 16, 64, 8, 8};
  std::vector<std::vector<uint8_t>> data;
  for (int i = 0; i < 6; ++i) {
    if (types[i] == DType::kF32) {
      const std::vector<float> f = testing::RandomFloats(static_cast<size_t>(rows[i] * k), 30 + i);
      data.emplace_back(reinterpret_cast<const uint8_t*>(f.data()),
                        reinterpret_cast<const uint8_t*>(f.data() + f.size()));
    } else {
      data.push_back(RandomBlocks(types[i], rows[i], k, 20 + i));
    }
  }
  ThreadPool pool(2);
  for (int64_t m : {1, 6}) {
    const std::vector<float> x = testing::RandomFloats(static_cast<size_t>(m * k), 4);
    for (Isa isa : SupportedIsas()) {
      ScopedIsa scoped(isa);
      std::vector<std::vector<float>> shared(6), alone(6);
      std::vector<MatMulTarget> targets;
      for (int i = 0; i < 6; ++i) {
        shared[i].resize(static_cast<size_t>(m * rows[i]));
        alone[i].resize(shared[i].size());
        const MatrixView w{types[i], data[i].data(), rows[i], k};
        targets.push_back({w, shared[i].data()});
        MatMul(x.data(), m, w, alone[i].data(), pool);
      }
      MatMulShared(x.data(), m, targets, pool);
      for (int i = 0; i < 6; ++i)
        EXPECT_TRUE(SameBits(shared[i].data(), alone[i].data(), alone[i].size()))
            << "target " << i << " m=" << m << " on " << IsaName(isa);

      // gate = target 0, up = target 3 (both q4_k, 40 and 64 rows: use 40 of up's).
      const MatrixView gate{DType::kQ4_K, data[0].data(), 40, k};
      const MatrixView up{DType::kQ4_K, data[3].data(), 40, k};
      std::vector<float> g(static_cast<size_t>(m * 40)), u(g.size()), want(g.size());
      std::vector<float> gw(g.size()), uw(g.size());
      MatMul(x.data(), m, gate, gw.data(), pool);
      MatMul(x.data(), m, up, uw.data(), pool);
      SiluMul(gw.data(), uw.data(), static_cast<int64_t>(gw.size()), want.data());
      MatMulSiluMul(x.data(), m, {gate, g.data()}, {up, u.data()}, pool);
      EXPECT_TRUE(SameBits(g.data(), want.data(), want.size())) << "silu m=" << m << IsaName(isa);

      std::vector<float> sum = testing::RandomFloats(g.size(), 8), sum_want = sum;
      AddInPlace(sum_want.data(), gw.data(), static_cast<int64_t>(gw.size()));
      std::vector<float> scratch(g.size());
      MatMulAddTo(x.data(), m, {gate, scratch.data()}, sum.data(), pool);
      EXPECT_TRUE(SameBits(sum.data(), sum_want.data(), sum.size()))
          << "add m=" << m << IsaName(isa);
    }
  }
}

// MatMulGrouped gives every group the bits of its own MatMul, on every ISA
// and thread count: groups in the shared quantized pass (mixed formats and
// cols; x shared by pointer, by pointer with another m, or not at all; one
// group of many tasks), and the ones it runs apart (f32 weights, more rows
// than kMatMulGroupedMaxRows). Outputs start as NaN, so a row left unwritten
// fails too.
TEST(QuantFusedTest, GroupedMatchesMatMul) {
  struct Spec {
    DType type;
    int64_t rows, cols;
    int x;  // which input
    int64_t m;
  };
  const Spec specs[] = {
      {DType::kQ4_K, 40, 512, 0, 1},   {DType::kQ6_K, 24, 512, 0, 1},
      {DType::kQ8_0, 16, 512, 1, 3},   {DType::kQ4_K, 64, 512, 1, 3},
      {DType::kQ4_K, 48, 512, 1, 1},   {DType::kQ4_0, 8, 256, 2, 2},
      {DType::kF32, 8, 512, 0, 1},     {DType::kF32, 16, 512, 0, 1},
      {DType::kQ4_K, 40, 512, 3, 6},   {DType::kQ5_K, 1000, 512, 4, 4},
      {DType::kQ6_K, 24, 512, 0, 1},
  };
  constexpr int kGroups = sizeof(specs) / sizeof(specs[0]);
  std::vector<std::vector<uint8_t>> data;
  for (int i = 0; i < kGroups; ++i) {
    const Spec& s = specs[i];
    if (s.type == DType::kF32) {
      const std::vector<float> f =
          testing::RandomFloats(static_cast<size_t>(s.rows * s.cols), 60 + i);
      data.emplace_back(reinterpret_cast<const uint8_t*>(f.data()),
                        reinterpret_cast<const uint8_t*>(f.data() + f.size()));
    } else {
      data.push_back(RandomBlocks(s.type, s.rows, s.cols, 40 + i));
    }
  }
  std::vector<std::vector<float>> inputs;
  for (int x = 0; x < 5; ++x) inputs.push_back(testing::RandomFloats(6 * 512, 80 + x));
  for (int threads : {1, 2}) {
    ThreadPool pool(threads);
    for (Isa isa : SupportedIsas()) {
      ScopedIsa scoped(isa);
      std::vector<std::vector<float>> grouped(kGroups), alone(kGroups);
      std::vector<MatMulGroup> groups;
      for (int i = 0; i < kGroups; ++i) {
        const Spec& s = specs[i];
        grouped[i].assign(static_cast<size_t>(s.m * s.rows), std::nanf(""));
        alone[i].resize(grouped[i].size());
        const MatrixView w{s.type, data[i].data(), s.rows, s.cols};
        MatMul(inputs[s.x].data(), s.m, w, alone[i].data(), pool);
        groups.push_back({inputs[s.x].data(), s.m, {w, grouped[i].data()}});
      }
      MatMulGrouped(groups, pool);
      for (int i = 0; i < kGroups; ++i)
        EXPECT_TRUE(SameBits(grouped[i].data(), alone[i].data(), alone[i].size()))
            << "group " << i << " (" << DTypeName(specs[i].type) << ", m=" << specs[i].m
            << ") on " << IsaName(isa) << ", " << threads << " threads";
    }
  }
}

}  // namespace
}  // namespace kvfork

namespace kvfork {
namespace {

// The SIMD decoder of the Q4_K/Q5_K scale bytes gives DecodeKScales' values
// for random bytes (every bit of the 12 in play) and at the 6-bit extremes.
TEST(QuantKScalesTest, SimdDecodeEqualsScalar) {
  std::mt19937 rng(3);
  for (int trial = 0; trial < 100000; ++trial) {
    uint8_t s[16];
    for (uint8_t& b : s) b = static_cast<uint8_t>(trial < 256 ? (trial & 1 ? 0xff : trial) : rng());
    const KScales want = DecodeKScales(s);
    uint8_t got[16];
    _mm_storeu_si128(reinterpret_cast<__m128i*>(got), DecodeKScalesSimd(s));
    uint64_t scales, mins;
    std::memcpy(&scales, got, 8);
    std::memcpy(&mins, got + 8, 8);
    ASSERT_EQ(scales, want.scales) << "trial " << trial;
    ASSERT_EQ(mins, want.mins) << "trial " << trial;
  }
}

// DecodeKScales4 on four blocks' headers (d, dmin, 12 scale bytes per
// 128-bit lane): each lane gets DecodeKScales' values of its own block.
__attribute__((target("avx512f,avx512bw"))) void DecodeFourHeads(const uint8_t* heads,
                                                                  uint8_t* out) {
  _mm512_storeu_si512(out, DecodeKScales4(_mm512_loadu_si512(heads)));
}

TEST(QuantKScalesTest, FourBlockSimdDecodeEqualsScalar) {
  const CpuFeatures& cpu = DetectCpuFeatures();
  if (!cpu.avx512f || !cpu.avx512bw) GTEST_SKIP() << "no AVX-512 BW on this CPU";
  std::mt19937 rng(4);
  for (int trial = 0; trial < 50000; ++trial) {
    uint8_t heads[64];
    for (int j = 0; j < 64; ++j)
      heads[j] = static_cast<uint8_t>(trial < 256 ? ((trial + j / 16) & 1 ? 0xff : trial) : rng());
    uint8_t got[64];
    DecodeFourHeads(heads, got);
    for (int r = 0; r < 4; ++r) {
      const KScales want = DecodeKScales(heads + 16 * r + 4);
      uint64_t scales, mins;
      std::memcpy(&scales, got + 16 * r, 8);
      std::memcpy(&mins, got + 16 * r + 8, 8);
      ASSERT_EQ(scales, want.scales) << "trial " << trial << " lane " << r;
      ASSERT_EQ(mins, want.mins) << "trial " << trial << " lane " << r;
    }
  }
}

}  // namespace
}  // namespace kvfork
