#include "cli/bench_limits.h"

#include <immintrin.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <vector>

#include "core/cpu_features.h"

namespace kvfork::cli {
namespace {

__attribute__((target("avx2"))) uint64_t SumAvx2(const uint8_t* p, size_t bytes) {
  __m256i a0 = _mm256_setzero_si256(), a1 = a0, a2 = a0, a3 = a0;
  for (size_t i = 0; i + 128 <= bytes; i += 128) {
    a0 = _mm256_add_epi64(a0, _mm256_load_si256(reinterpret_cast<const __m256i*>(p + i)));
    a1 = _mm256_add_epi64(a1, _mm256_load_si256(reinterpret_cast<const __m256i*>(p + i + 32)));
    a2 = _mm256_add_epi64(a2, _mm256_load_si256(reinterpret_cast<const __m256i*>(p + i + 64)));
    a3 = _mm256_add_epi64(a3, _mm256_load_si256(reinterpret_cast<const __m256i*>(p + i + 96)));
  }
  __m256i s = _mm256_add_epi64(_mm256_add_epi64(a0, a1), _mm256_add_epi64(a2, a3));
  alignas(32) uint64_t out[4];
  _mm256_store_si256(reinterpret_cast<__m256i*>(out), s);
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

constexpr int kFmaChains = 10;

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
  __m512 acc[kFmaChains];
  for (int i = 0; i < kFmaChains; ++i) acc[i] = _mm512_set1_ps(static_cast<float>(i));
  const __m512i a = _mm512_set1_epi16(0x3f80), b = _mm512_set1_epi16(0x3380);
  for (int64_t it = 0; it < iters; ++it)
    for (int i = 0; i < kFmaChains; ++i)
      acc[i] = _mm512_dpbf16_ps(acc[i], reinterpret_cast<const __m512bh&>(a),
                                reinterpret_cast<const __m512bh&>(b));
  __m512 s = acc[0];
  for (int i = 1; i < kFmaChains; ++i) s = _mm512_add_ps(s, acc[i]);
  return _mm512_cvtss_f32(s);
}

// Flop rate of `loop` run on every thread; flops_per_iter counts one iteration.
double MeasurePeak(ThreadPool& pool, float (*loop)(int64_t), double flops_per_iter,
                   double min_seconds) {
  const int threads = pool.num_threads();
  const int64_t iters = 2'000'000;
  std::vector<float> sink(threads);
  double s = TimeIt([&] { pool.ParallelFor(threads, [&](int64_t t) { sink[t] += loop(iters); }); },
                    min_seconds);
  return flops_per_iter * static_cast<double>(iters) * threads / s;
}

}  // namespace

double MeasureBandwidth(ThreadPool& pool, double min_seconds) {
  const size_t bytes = size_t{1} << 30;
  std::unique_ptr<uint8_t, decltype(&std::free)> buf(
      static_cast<uint8_t*>(std::aligned_alloc(64, bytes)), &std::free);
  std::memset(buf.get(), 1, bytes);
  const int threads = pool.num_threads();
  const size_t slice = bytes / threads / 128 * 128;
  const bool avx2 = IsaSupported(Isa::kAvx2);
  std::vector<uint64_t> sink(threads);
  double s = TimeIt(
      [&] {
        pool.ParallelFor(threads, [&](int64_t t) {
          const uint8_t* p = buf.get() + t * slice;
          sink[t] += avx2 ? SumAvx2(p, slice) : SumScalar(p, slice);
        });
      },
      min_seconds);
  return static_cast<double>(slice) * threads / s;
}

PeakFlops MeasurePeakFlops(ThreadPool& pool, double min_seconds) {
  PeakFlops p;
  if (IsaSupported(Isa::kAvx512)) {
    p.f32 = MeasurePeak(pool, FmaLoopAvx512, kFmaChains * 32.0, min_seconds);
    // kAvx512 includes AVX512_BF16 (core/cpu_features.h).
    p.bf16 = MeasurePeak(pool, DpbfLoop, kFmaChains * 64.0, min_seconds);
  } else if (IsaSupported(Isa::kAvx2)) {
    p.f32 = MeasurePeak(pool, FmaLoopAvx2, kFmaChains * 16.0, min_seconds);
  }
  return p;
}

double PeakFlops::ForBf16Gemm() const {
  return ActiveIsa() == Isa::kAvx512 && bf16 > 0 ? bf16 : f32;
}

}  // namespace kvfork::cli
