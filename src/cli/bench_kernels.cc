// `kvfork bench kernels`: the machine's limits and our MatMul against them and
// against oneDNN, measured in the same run.
//
//   read bandwidth  streaming read of a 2 GiB buffer by all threads, best of
//                   1, 2 and 4 streams per task with the widest loads
//   peak f32        FMA on independent registers (AVX2 8-wide or AVX-512 16-wide)
//   peak bf16 dot   vdpbf16ps, where the CPU has AVX512_BF16
//   peak amx bf16   TDPBF16PS, where the CPU has AMX-BF16
//   bf16 GEMM rates are fractions of the best of the three (bench_limits.h)
//   GEMV (m=1)      bf16 / f32 weights, Qwen3-0.6B shapes, as a fraction of bandwidth
//                   (weights rotate over copies larger than the L3 so they come from DRAM)
//   GEMM (m=512)    the same shapes (lm head cut to 16384 rows, 2048 with --quick) as a fraction of peak
//   oneDNN          dnnl::matmul on the same shapes and dtypes; "x dnnl" = its time / ours
//   quantized       every block format: GEMV (m=1) GB/s of the quantized weights
//                   against the bandwidth, GEMM (m=512) in GOP/s (bench_quant.h)
//   attention       PagedAttention on qwen3-0.6b's heads: a one-layer prefill of
//                   512 and 2,048 tokens against the best bf16 rate, a decode
//                   step's 28 layers at 512 and 2,048 keys against the bandwidth
//                   (bench_attention.h)
//
// Flags: --threads N (default: all cores), --json PATH (default bench/results/kernels.json),
//        --quick (fewer repetitions), --quant-only (the limits and the
//        quantized rows only), --attention-only (the limits and the attention
//        rows only).
#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <vector>

#include "cli/bench_attention.h"
#include "cli/bench_limits.h"
#include "cli/bench_quant.h"
#include "cli/command.h"
#include "cli/flags.h"
#include "cli/json_file.h"
#include "core/bf16.h"
#include "core/cpu_features.h"
#include "core/thread_pool.h"
#include "core/timer.h"
#include "kernels/ops.h"

#if KVFORK_HAVE_DNNL
#include <dnnl.hpp>
extern "C" void omp_set_num_threads(int);  // libgomp, which libdnnl runs on
#endif

namespace kvfork::cli {
namespace {

struct Shape {
  const char* name;
  int64_t n, k;
};

#if KVFORK_HAVE_DNNL
// Seconds per dnnl::matmul of x [m, k] by w [n, k] (as weights [k, n] "ba"),
// or a negative value when oneDNN has no implementation for this dtype here.
double TimeDnnl(int64_t m, int64_t n, int64_t k, DType dtype, int copies, double min_seconds,
                std::string* impl) {
  try {
    using dt = dnnl::memory::data_type;
    using tag = dnnl::memory::format_tag;
    dnnl::engine eng(dnnl::engine::kind::cpu, 0);
    dnnl::stream strm(eng);
    const dt wdt = dtype == DType::kBf16 ? dt::bf16 : dt::f32;
    dnnl::memory::desc a_md({m, k}, wdt, tag::ab), b_md({k, n}, wdt, tag::ba),
        c_md({m, n}, dt::f32, tag::ab);
    dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(a_md, b_md, c_md), eng);
    *impl = pd.impl_info_str();
    dnnl::matmul prim(pd);
    std::vector<dnnl::memory> a, b;
    dnnl::memory c(c_md, eng);
    dnnl::memory src(a_md, eng);
    std::memset(src.get_data_handle(), 0, a_md.get_size());
    for (int i = 0; i < copies; ++i) {
      b.emplace_back(b_md, eng);
      // Small random-ish values: bf16 0x3c00 + i ~ 0.0078, f32 similar.
      if (dtype == DType::kBf16) {
        auto* p = static_cast<uint16_t*>(b.back().get_data_handle());
        for (int64_t j = 0; j < n * k; ++j) p[j] = static_cast<uint16_t>(0x3c00 + (j & 63));
      } else {
        auto* p = static_cast<float*>(b.back().get_data_handle());
        for (int64_t j = 0; j < n * k; ++j) p[j] = 0.0078f * static_cast<float>(j & 63);
      }
    }
    int next = 0;
    return TimeIt(
        [&] {
          prim.execute(strm, {{DNNL_ARG_SRC, src}, {DNNL_ARG_WEIGHTS, b[next]}, {DNNL_ARG_DST, c}});
          strm.wait();
          next = (next + 1) % copies;
        },
        min_seconds);
  } catch (const dnnl::error& e) {
    *impl = std::string("unavailable: ") + e.what();
    return -1.0;
  }
}
#endif

int RunBenchKernels(int argc, char** argv) {
  Flags flags = Flags::Parse(argc, argv, {"quick", "quant-only", "attention-only"});
  const int64_t threads_flag = flags.GetInt("threads", ThreadPool::DefaultThreads(),
                                            "compute threads, one per usable core unless set");
  const std::string json_path =
      flags.GetString("json", "bench/results/kernels.json", "where the JSON result goes");
  const bool quick = flags.GetBool("quick", "fewer repetitions (a smoke run)");
  const bool quant_only = flags.GetBool("quant-only", "the limits and the quantized rows only");
  const bool attention_only =
      flags.GetBool("attention-only", "the limits and the attention rows only");
  Status done = flags.Finish();
  if (!done.ok()) {
    std::fprintf(stderr, "kvfork bench kernels: %s\n", done.ToString().c_str());
    return 2;
  }
  if (threads_flag < 1 || threads_flag > 1024) {
    std::fprintf(stderr, "--threads must be in [1, 1024], got %lld\n",
                 static_cast<long long>(threads_flag));
    return 2;
  }
  const int threads = static_cast<int>(threads_flag);

  const double min_s = quick ? 0.05 : 0.3;
  // GEMMs on the lm head are cut to this many rows to keep the run short; a
  // --quick smoke run cuts deeper (its lm head GEMMs took most of a minute).
  const int64_t gemm_row_cap = quick ? 2048 : 16384;
  ThreadPool pool(threads);
  const Isa isa = ActiveIsa();
#if KVFORK_HAVE_DNNL
  omp_set_num_threads(threads);
#endif

  nlohmann::json out;
  out["isa"] = IsaName(isa);
  out["threads"] = threads;
  const Bandwidth bandwidth = MeasureBandwidth(pool, min_s);
  const double bw = bandwidth.bytes_per_s;
  const PeakFlops peak = MeasurePeakFlops(pool, min_s);
  const double peak_f32 = peak.f32;
  std::printf("isa %s, %d threads\n", IsaName(isa), threads);
  std::printf("read bandwidth   %8.2f GB/s (%s)\n", bw * 1e-9, bandwidth.pattern.c_str());
  std::printf("peak f32 FMA     %8.1f GFLOP/s\n", peak_f32 * 1e-9);
  if (peak.bf16_dot > 0) std::printf("peak bf16 dot    %8.1f GFLOP/s\n", peak.bf16_dot * 1e-9);
  if (peak.amx_bf16 > 0) std::printf("peak amx bf16    %8.1f GFLOP/s\n", peak.amx_bf16 * 1e-9);
  out["read_bandwidth_gbps"] = bw * 1e-9;
  out["read_bandwidth_pattern"] = bandwidth.pattern;
  out["peak_f32_gflops"] = peak_f32 * 1e-9;
  out["peak_bf16_dot_gflops"] = peak.bf16_dot * 1e-9;
  out["peak_amx_bf16_gflops"] = peak.amx_bf16 * 1e-9;
  // bf16 GEMM against the machine's best bf16 rate, whatever the active ISA.
  const double peak_for_bf16 = peak.BestBf16();
  out["peak_bf16_best"] = peak.BestBf16Name();

  const Shape shapes[] = {{"1024x1024", 1024, 1024},
                          {"3072x1024", 3072, 1024},
                          {"1024x3072", 1024, 3072},
                          {"151936x1024 lm_head", 151936, 1024}};
  std::printf("\n%-6s %-5s %-20s %10s %10s %8s %10s %8s\n", "op", "dtype", "shape (n x k)",
              "ours ms", "rate", "of limit", "dnnl ms", "x dnnl");
  nlohmann::json rows = nlohmann::json::array();
  std::mt19937 rng(1);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  for (DType dtype : {DType::kBf16, DType::kF32}) {
    if (quant_only || attention_only) break;
    for (int gemm = 0; gemm < 2; ++gemm) {
      for (const Shape& sh : shapes) {
        const int64_t m = gemm ? 512 : 1;
        const int64_t n = gemm && sh.n > gemm_row_cap ? gemm_row_cap : sh.n;
        const int64_t k = sh.k;
        const size_t wbytes = static_cast<size_t>(n * k) * DTypeSize(dtype);
        // GEMV rotates over copies totalling > 256 MiB so weights come from DRAM.
        const int copies =
            gemm ? 1 : static_cast<int>(std::max<size_t>(1, (size_t{256} << 20) / wbytes + 1));
        // One random matrix, copied: the copies only need distinct memory, and
        // drawing 256 MiB of random numbers per shape dominated the run.
        std::vector<uint8_t> w0(wbytes);
        if (dtype == DType::kBf16) {
          auto* p = reinterpret_cast<bf16_t*>(w0.data());
          for (int64_t j = 0; j < n * k; ++j) p[j] = F32ToBf16(dist(rng) * 0.05f);
        } else {
          auto* p = reinterpret_cast<float*>(w0.data());
          for (int64_t j = 0; j < n * k; ++j) p[j] = dist(rng) * 0.05f;
        }
        std::vector<std::vector<uint8_t>> ws(copies, w0);
        std::vector<float> x(static_cast<size_t>(m * k)), y(static_cast<size_t>(m * n));
        for (float& v : x) v = dist(rng);
        int next = 0;
        const double ours = TimeIt(
            [&] {
              MatrixView w{dtype, ws[next].data(), n, k};
              MatMul(x.data(), m, w, y.data(), pool);
              next = (next + 1) % copies;
            },
            min_s);
        double rate, frac;
        const char* unit;
        if (gemm) {
          rate = 2.0 * m * n * k / ours;
          frac = rate / (dtype == DType::kBf16 ? peak_for_bf16 : peak_f32);
          unit = "GFLOP/s";
        } else {
          rate = static_cast<double>(wbytes) / ours;
          frac = rate / bw;
          unit = "GB/s";
        }
        double dnnl_s = -1.0;
        std::string impl = "not built with oneDNN";
#if KVFORK_HAVE_DNNL
        dnnl_s = TimeDnnl(m, n, k, dtype, copies, min_s, &impl);
#endif
        char shape[48];
        std::snprintf(shape, sizeof(shape), "%s%s", sh.name,
                      n != sh.n ? (" (" + std::to_string(n) + " rows)").c_str() : "");
        char dnnl_ms[16] = "n/a", ratio[16] = "n/a";
        if (dnnl_s > 0) {
          std::snprintf(dnnl_ms, sizeof(dnnl_ms), "%.3f", dnnl_s * 1e3);
          std::snprintf(ratio, sizeof(ratio), "%.2f", dnnl_s / ours);
        }
        std::printf("%-6s %-5s %-20s %10.3f %6.1f %-4s %7.1f%% %10s %8s\n", gemm ? "gemm" : "gemv",
                    DTypeName(dtype), shape, ours * 1e3, rate * 1e-9, gemm ? "GF/s" : "GB/s",
                    frac * 100.0, dnnl_ms, ratio);
        rows.push_back(
            {{"op", gemm ? "gemm" : "gemv"},
             {"dtype", DTypeName(dtype)},
             {"m", m},
             {"n", n},
             {"k", k},
             {"ours_ms", ours * 1e3},
             {"rate", rate * 1e-9},
             {"rate_unit", unit},
             {"fraction_of_limit", frac},
             {"dnnl_ms", dnnl_s > 0 ? nlohmann::json(dnnl_s * 1e3) : nlohmann::json()},
             {"speedup_vs_dnnl", dnnl_s > 0 ? nlohmann::json(dnnl_s / ours) : nlohmann::json()},
             {"dnnl_impl", impl}});
      }
    }
  }
  out["matmul"] = rows;
  if (!attention_only) out["quantized_matmul"] = BenchQuantMatMul(pool, min_s, bw, gemm_row_cap);
  if (!quant_only) {
    auto attention = BenchAttention(pool, min_s, peak_for_bf16, bw);
    if (!attention.ok()) {
      std::fprintf(stderr, "%s\n", attention.status().ToString().c_str());
      return 1;
    }
    out["attention"] = *std::move(attention);
  }
  if (Status s = WriteJsonFile(json_path, out); !s.ok()) return ExitCode("bench kernels", s);
  std::printf("\nwrote %s\n", json_path.c_str());
  return 0;
}

}  // namespace

KVFORK_REGISTER_BENCHMARK(kernels, "kernels",
                          "GEMV/GEMM vs bandwidth, peak FLOPs and oneDNN; attention",
                          RunBenchKernels);

}  // namespace kvfork::cli
