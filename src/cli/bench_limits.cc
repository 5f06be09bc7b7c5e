// GCC 12's AVX-512 intrinsic headers build some results from _mm512_undefined_*
// and then warn about them (a known false positive).
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

#include "cli/bench_limits.h"

#include <immintrin.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <vector>

#include "core/cpu_features.h"

namespace kvfork::cli {
namespace {

// ---- Read bandwidth -------------------------------------------------------

// Sums `bytes` from p as S interleaved streams (p split into S equal parts,
// read side by side), so S independent prefetch streams are in flight.
template <int S>
__attribute__((target("avx512f"))) uint64_t SumAvx512(const uint8_t* p, size_t bytes) {
  const size_t part = bytes / S / 256 * 256;
  __m512i acc[S][4];
  for (int s = 0; s < S; ++s)
    for (int j = 0; j < 4; ++j) acc[s][j] = _mm512_setzero_si512();
  for (size_t i = 0; i < part; i += 256)
    for (int s = 0; s < S; ++s)
      for (int j = 0; j < 4; ++j)
        acc[s][j] = _mm512_add_epi64(acc[s][j], _mm512_load_si512(p + s * part + i + 64 * j));
  __m512i t = _mm512_setzero_si512();
  for (int s = 0; s < S; ++s)
    for (int j = 0; j < 4; ++j) t = _mm512_add_epi64(t, acc[s][j]);
  return static_cast<uint64_t>(_mm512_reduce_add_epi64(t));
}

template <int S>
__attribute__((target("avx2"))) uint64_t SumAvx2(const uint8_t* p, size_t bytes) {
  const size_t part = bytes / S / 128 * 128;
  __m256i acc[S][4];
  for (int s = 0; s < S; ++s)
    for (int j = 0; j < 4; ++j) acc[s][j] = _mm256_setzero_si256();
  for (size_t i = 0; i < part; i += 128)
    for (int s = 0; s < S; ++s)
      for (int j = 0; j < 4; ++j)
        acc[s][j] = _mm256_add_epi64(
            acc[s][j],
            _mm256_load_si256(reinterpret_cast<const __m256i*>(p + s * part + i + 32 * j)));
  __m256i t = _mm256_setzero_si256();
  for (int s = 0; s < S; ++s)
    for (int j = 0; j < 4; ++j) t = _mm256_add_epi64(t, acc[s][j]);
  alignas(32) uint64_t out[4];
  _mm256_store_si256(reinterpret_cast<__m256i*>(out), t);
  return out[0] + out[1] + out[2] + out[3];
}

uint64_t SumScalar(const uint8_t* p, size_t bytes) {
  uint64_t s = 0;
  for (size_t i = 0; i + 8 <= bytes; i += 8) {
    uint64_t v;
    std::memcpy(&v, p + i, 8);
    s += v;
  }
  return s;
}

// ---- Peak FLOP rates ------------------------------------------------------

constexpr int kFmaChains = 10;     // FMA latency 4 x 2 ports, plus slack
constexpr int kDpbf16Chains = 16;  // vdpbf16ps has a longer latency than FMA

__attribute__((target("avx2,fma"))) float FmaLoopAvx2(int64_t iters) {
  __m256 acc[kFmaChains];
  for (int i = 0; i < kFmaChains; ++i) acc[i] = _mm256_set1_ps(static_cast<float>(i));
  const __m256 a = _mm256_set1_ps(0.999999f), b = _mm256_set1_ps(1e-7f);
  for (int64_t it = 0; it < iters; ++it)
    for (int i = 0; i < kFmaChains; ++i) acc[i] = _mm256_fmadd_ps(acc[i], a, b);
  __m256 s = acc[0];
  for (int i = 1; i < kFmaChains; ++i) s = _mm256_add_ps(s, acc[i]);
  return _mm256_cvtss_f32(s);
}

__attribute__((target("avx512f,fma"))) float FmaLoopAvx512(int64_t iters) {
  __m512 acc[kFmaChains];
  for (int i = 0; i < kFmaChains; ++i) acc[i] = _mm512_set1_ps(static_cast<float>(i));
  const __m512 a = _mm512_set1_ps(0.999999f), b = _mm512_set1_ps(1e-7f);
  for (int64_t it = 0; it < iters; ++it)
    for (int i = 0; i < kFmaChains; ++i) acc[i] = _mm512_fmadd_ps(acc[i], a, b);
  __m512 s = acc[0];
  for (int i = 1; i < kFmaChains; ++i) s = _mm512_add_ps(s, acc[i]);
  return _mm512_cvtss_f32(s);
}

__attribute__((target("avx512f,avx512bf16"))) float DpbfLoop(int64_t iters) {
  __m512 acc[kDpbf16Chains];
  for (int i = 0; i < kDpbf16Chains; ++i) acc[i] = _mm512_set1_ps(static_cast<float>(i));
  const __m512i a = _mm512_set1_epi16(0x3f80), b = _mm512_set1_epi16(0x3380);
  for (int64_t it = 0; it < iters; ++it)
    for (int i = 0; i < kDpbf16Chains; ++i)
      acc[i] = _mm512_dpbf16_ps(acc[i], reinterpret_cast<const __m512bh&>(a),
                                reinterpret_cast<const __m512bh&>(b));
  __m512 s = acc[0];
  for (int i = 1; i < kDpbf16Chains; ++i) s = _mm512_add_ps(s, acc[i]);
  return _mm512_cvtss_f32(s);
}

// Four 16x16 f32 accumulator tiles (tmm0-3) fed by two A (tmm4-5) and two B
// (tmm6-7) tiles of 16 x 32 bf16, loaded once: 4 TDPBF16PS per iteration with
// no dependence between them, the shape a 32x32 GEMM microkernel runs.
float AmxLoop(int64_t iters) {
  alignas(64) uint8_t cfg[64] = {};
  cfg[0] = 1;  // palette 1
  for (int t = 0; t < 8; ++t) {
    cfg[16 + 2 * t] = 64;  // bytes per row
    cfg[48 + t] = 16;      // rows
  }
  alignas(64) uint16_t ab[16 * 32];
  for (int i = 0; i < 16 * 32; ++i) ab[i] = 0x3380;  // tiny bf16: no overflow however long
  alignas(64) float c[16 * 16];
  __asm__ volatile("ldtilecfg %0" ::"m"(cfg) : "memory");
  __asm__ volatile(
      "tilezero %%tmm0\n\ttilezero %%tmm1\n\ttilezero %%tmm2\n\ttilezero %%tmm3\n\t"
      "tileloadd (%0,%1,1), %%tmm4\n\ttileloadd (%0,%1,1), %%tmm5\n\t"
      "tileloadd (%0,%1,1), %%tmm6\n\ttileloadd (%0,%1,1), %%tmm7" ::"r"(ab),
      "r"(int64_t{64})
      : "memory");
  for (int64_t it = 0; it < iters; ++it) {
    __asm__ volatile(
        "tdpbf16ps %%tmm6, %%tmm4, %%tmm0\n\ttdpbf16ps %%tmm7, %%tmm4, %%tmm1\n\t"
        "tdpbf16ps %%tmm6, %%tmm5, %%tmm2\n\ttdpbf16ps %%tmm7, %%tmm5, %%tmm3" ::
            : "memory");
  }
  __asm__ volatile("tilestored %%tmm0, (%0,%1,1)\n\ttilerelease" ::"r"(c), "r"(int64_t{64})
                   : "memory");
  return c[0];
}

// Flop rate of `loop` run on every thread; flops_per_iter counts one iteration.
// 8 tasks per thread so a late-waking worker still gets its share.
double MeasurePeak(ThreadPool& pool, float (*loop)(int64_t), int64_t iters_per_task,
                   double flops_per_iter, double min_seconds) {
  const int64_t tasks = 8 * pool.num_threads();
  std::vector<float> sink(static_cast<size_t>(tasks));
  double s = TimeBest(
      [&] { pool.ParallelFor(tasks, [&](int64_t t) { sink[t] += loop(iters_per_task); }); },
      min_seconds);
  return flops_per_iter * static_cast<double>(iters_per_task) * static_cast<double>(tasks) / s;
}

}  // namespace

BandwidthProbe::BandwidthProbe(ThreadPool& pool)
    : pool_(pool),
      buf_(static_cast<uint8_t*>(std::aligned_alloc(4096, kBandwidthBufferBytes)), &std::free) {
  KVFORK_CHECK_MSG(buf_ != nullptr, "cannot allocate the bandwidth buffer");
  // Every 8 bytes their own index, so no two pages hold the same bytes: a
  // buffer of one repeated page (memset) is what a host that merges identical
  // pages (KSM) backs with a few physical pages, and on the Zen 3 VM such a
  // buffer read at 32-39 GB/s where distinct pages and the model's weights
  // read at 22-26.
  uint64_t* words = reinterpret_cast<uint64_t*>(buf_.get());
  for (size_t i = 0; i < kBandwidthBufferBytes / sizeof(uint64_t); ++i) words[i] = i;
  if (IsaSupported(Isa::kAvx512)) {
    patterns_ = {{"avx512 x1 stream", SumAvx512<1>},
                 {"avx512 x2 streams", SumAvx512<2>},
                 {"avx512 x4 streams", SumAvx512<4>}};
  } else if (IsaSupported(Isa::kAvx2)) {
    patterns_ = {{"avx2 x1 stream", SumAvx2<1>},
                 {"avx2 x2 streams", SumAvx2<2>},
                 {"avx2 x4 streams", SumAvx2<4>}};
  } else {
    patterns_ = {{"scalar", SumScalar}};
  }
  sink_.resize(kBandwidthBufferBytes / kTaskBytes);
}

BandwidthProbe::~BandwidthProbe() = default;

double BandwidthProbe::ReadSeconds(size_t pattern) {
  Timer t;
  pool_.ParallelFor(static_cast<int64_t>(sink_.size()), [&](int64_t task) {
    sink_[task] += patterns_[pattern].sum(buf_.get() + task * kTaskBytes, kTaskBytes);
  });
  return t.Seconds();
}

Bandwidth BandwidthProbe::Measure(double min_seconds) {
  Bandwidth best;
  for (size_t i = 0; i < patterns_.size(); ++i) {
    const double s = TimeBest([&] { ReadSeconds(i); }, min_seconds);
    const double rate = static_cast<double>(kBandwidthBufferBytes) / s;
    if (rate > best.bytes_per_s) {
      best = {rate, patterns_[i].name};
      chosen_ = i;
    }
  }
  return best;
}

double BandwidthProbe::Sample() {
  return static_cast<double>(kBandwidthBufferBytes) / ReadSeconds(chosen_);
}

Bandwidth MeasureBandwidth(ThreadPool& pool, double min_seconds) {
  return BandwidthProbe(pool).Measure(min_seconds);
}

PeakFlops MeasurePeakFlops(ThreadPool& pool, double min_seconds) {
  PeakFlops p;
  const CpuFeatures& f = DetectCpuFeatures();
  if (IsaSupported(Isa::kAvx512)) {
    p.f32 = MeasurePeak(pool, FmaLoopAvx512, 200'000, kFmaChains * 32.0, min_seconds);
    // Isa::kAvx512 includes AVX512_BF16 (core/cpu_features.h).
    p.bf16_dot = MeasurePeak(pool, DpbfLoop, 200'000, kDpbf16Chains * 64.0, min_seconds);
  } else if (IsaSupported(Isa::kAvx2)) {
    p.f32 = MeasurePeak(pool, FmaLoopAvx2, 200'000, kFmaChains * 16.0, min_seconds);
  }
  if (f.amx_tile && f.amx_bf16)
    p.amx_bf16 = MeasurePeak(pool, AmxLoop, 50'000, 4 * 16 * 16 * 32 * 2.0, min_seconds);
  return p;
}

Bandwidth Best(const Bandwidth& a, const Bandwidth& b) {
  return b.bytes_per_s > a.bytes_per_s ? b : a;
}

PeakFlops Best(const PeakFlops& a, const PeakFlops& b) {
  PeakFlops p;
  p.f32 = std::max(a.f32, b.f32);
  p.bf16_dot = std::max(a.bf16_dot, b.bf16_dot);
  p.amx_bf16 = std::max(a.amx_bf16, b.amx_bf16);
  return p;
}

double PeakFlops::BestBf16() const { return std::max({f32, bf16_dot, amx_bf16}); }

const char* PeakFlops::BestBf16Name() const {
  if (amx_bf16 > 0 && amx_bf16 >= bf16_dot && amx_bf16 >= f32) return "amx tdpbf16ps";
  if (bf16_dot > 0 && bf16_dot >= f32) return "avx512 vdpbf16ps";
  return "f32 fma";
}

double HotGemvBytesPerSecond(const MatrixView& w, double min_seconds) {
  const size_t row_bytes = w.row_bytes();
  const int64_t rows = std::clamp<int64_t>(static_cast<int64_t>(kHotGemvBytes / row_bytes), 1, w.rows);
  const MatrixView hot{w.dtype, w.data, rows, w.cols};
  std::vector<float> x(static_cast<size_t>(w.cols), 0.5f), y(static_cast<size_t>(rows));
  ThreadPool one_thread(1);
  const double s = TimeBest([&] { MatMul(x.data(), 1, hot, y.data(), one_thread); }, min_seconds);
  return static_cast<double>(row_bytes) * static_cast<double>(rows) / s;
}

}  // namespace kvfork::cli
