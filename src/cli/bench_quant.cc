#include "cli/bench_quant.h"

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "cli/bench_limits.h"
#include "core/bf16.h"
#include "core/dtype.h"
#include "kernels/ops.h"

namespace kvfork::cli {
namespace {

struct Shape {
  const char* name;
  int64_t n, k;
};

// Random code bytes with a finite f16 scale (and min) in every block: no
// NaN or subnormal scale may slow the float part down. bf16 weights are
// random values in (-1, 1).
std::vector<uint8_t> RandomBlocks(DType t, int64_t rows, int64_t cols, std::mt19937& rng) {
  std::vector<uint8_t> w(RowBytes(t, cols) * static_cast<size_t>(rows));
  if (t == DType::kBf16) {
    std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
    for (size_t i = 0; i + 2 <= w.size(); i += 2) {
      const bf16_t v = F32ToBf16(dist(rng));
      std::memcpy(w.data() + i, &v, 2);
    }
    return w;
  }
  for (size_t i = 0; i + 4 <= w.size(); i += 4) {
    const uint32_t r = rng();
    std::memcpy(w.data() + i, &r, 4);
  }
  const f16_t scale = F32ToF16(0.01f), min = F32ToF16(-0.02f);
  const int bytes = Traits(t).block_bytes;
  for (size_t off = 0; off < w.size(); off += bytes) {
    uint8_t* b = w.data() + off;
    if (t == DType::kQ6_K) {
      std::memcpy(b + 208, &scale, 2);
      continue;
    }
    std::memcpy(b, &scale, 2);
    if (t == DType::kQ4_1 || t == DType::kQ5_1 || t == DType::kQ4_K || t == DType::kQ5_K)
      std::memcpy(b + 2, &min, 2);
  }
  return w;
}

}  // namespace

nlohmann::json BenchQuantMatMul(ThreadPool& pool, double min_seconds, double bandwidth,
                                int64_t gemm_row_cap) {
  const Shape shapes[] = {{"2048x1024 q", 2048, 1024},
                          {"3072x1024 gate", 3072, 1024},
                          {"1024x3072 down", 1024, 3072},
                          {"151936x1024 lm_head", 151936, 1024}};
  // bf16 last, as the baseline of the GEMV columns (its GEMMs are the main
  // table's).
  const DType formats[] = {DType::kQ8_0, DType::kQ4_K, DType::kQ6_K, DType::kQ5_K, DType::kQ4_0,
                           DType::kQ4_1, DType::kQ5_0, DType::kQ5_1, DType::kBf16};
  // "hot": the GEMV with W in L2 (HotGemvBytesPerSecond, times the pool's
  // threads), its compute alone; "no-overlap": the fraction of the limit a
  // GEMV from DRAM would reach if streaming W and computing on it simply
  // added up (docs/kernels.md shows they do on the Sapphire Rapids VM):
  // 1 / (1 + bandwidth / hot rate). With perfect overlap it would reach
  // min(1, hot rate / bandwidth) instead.
  std::printf("\n%-6s %-5s %-26s %10s %10s %8s %10s %10s\n", "op", "quant", "shape (n x k)",
              "ours ms", "rate", "of limit", "hot GB/s", "no-overlap");
  nlohmann::json rows = nlohmann::json::array();
  std::mt19937 rng(1);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  for (DType t : formats) {
    for (int gemm = 0; gemm < (t == DType::kBf16 ? 1 : 2); ++gemm) {
      for (const Shape& sh : shapes) {
        const int64_t m = gemm ? 512 : 1;
        const int64_t n = gemm && sh.n > gemm_row_cap ? gemm_row_cap : sh.n, k = sh.k;
        const size_t wbytes = RowBytes(t, k) * static_cast<size_t>(n);
        const int copies =
            gemm ? 1 : static_cast<int>(std::max<size_t>(1, (size_t{256} << 20) / wbytes + 1));
        // Copies of one random matrix: the same bytes at other addresses are
        // as far from the caches, and copying is much faster than drawing.
        std::vector<std::vector<uint8_t>> ws(copies, RandomBlocks(t, n, k, rng));
        std::vector<float> x(static_cast<size_t>(m * k)), y(static_cast<size_t>(m * n));
        for (float& v : x) v = dist(rng);
        int next = 0;
        const double s = TimeIt(
            [&] {
              MatMul(x.data(), m, MatrixView{t, ws[next].data(), n, k}, y.data(), pool);
              next = (next + 1) % copies;
            },
            min_seconds);
        const double rate = gemm ? 2.0 * m * n * k / s : static_cast<double>(wbytes) / s;
        const double frac = gemm ? 0.0 : rate / bandwidth;
        char shape[48];
        std::snprintf(shape, sizeof(shape), "%s%s", sh.name,
                      n != sh.n ? (" (" + std::to_string(n) + ")").c_str() : "");
        nlohmann::json row = {{"op", gemm ? "gemm" : "gemv"},
                              {"dtype", DTypeName(t)},
                              {"m", m},
                              {"n", n},
                              {"k", k},
                              {"ours_ms", s * 1e3},
                              {"rate", rate * 1e-9},
                              {"rate_unit", gemm ? "GOP/s" : "GB/s"},
                              {"fraction_of_limit", gemm ? nlohmann::json() : nlohmann::json(frac)}};
        if (gemm) {
          std::printf("%-6s %-5s %-26s %10.3f %6.1f GOP/s\n", "gemm", DTypeName(t), shape, s * 1e3,
                      rate * 1e-9);
        } else {
          const double hot_rate = HotGemvBytesPerSecond(MatrixView{t, ws[0].data(), n, k},
                                                        min_seconds) *
                                  pool.num_threads();
          const double no_overlap = 1.0 / (1.0 + bandwidth / hot_rate);
          std::printf("%-6s %-5s %-26s %10.3f %6.1f GB/s %7.1f%% %10.1f %9.1f%%\n", "gemv",
                      DTypeName(t), shape, s * 1e3, rate * 1e-9, frac * 100.0, hot_rate * 1e-9,
                      no_overlap * 100.0);
          row["hot_rate"] = hot_rate * 1e-9;
          row["no_overlap_fraction"] = no_overlap;
        }
        rows.push_back(std::move(row));
      }
    }
  }
  return rows;
}

}  // namespace kvfork::cli
