// Does a core's DRAM stream overlap with its vector compute on this machine?
// (issue 22: why decode sits below the bandwidth limit.) Each thread sweeps
// its share of a 2 GiB buffer once (DRAM) and a 64 KiB piece over and over
// (L1/L2, the same bytes in total); per 64-byte line it loads the line and
// issues K vpdpbusd on it (K = 0: one xor), optionally prefetching D bytes
// ahead with a hint (0 = T0, 1 = T1, 2 = NTA). The table gives the DRAM and
// hot rates and t_dram / (t_dram at K = 0 + t_hot at K): about 1.0 means
// streaming and compute simply add up (no overlap), about max(...)/sum
// means they overlap. Built by hand (AVX512-VNNI CPUs):
//
//   g++ -O2 -march=native -std=c++20 bench/kernels/stream_compute_overlap.cc -lpthread \
//     -o /tmp/stream_compute_overlap
//   /tmp/stream_compute_overlap                # no software prefetch
//   /tmp/stream_compute_overlap 4096 1         # prefetch 4 KB ahead into L2 (T1)
#include <immintrin.h>
#include <pthread.h>
#include <sched.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <thread>
#include <vector>

namespace {

size_t g_prefetch_bytes = 0;
int g_hint = 0;

double Now() {
  timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec + t.tv_nsec * 1e-9;
}

inline void Prefetch4Lines(const char* a) {
  for (int l = 0; l < 4; ++l) {
    if (g_hint == 0) _mm_prefetch(a + 64 * l, _MM_HINT_T0);
    else if (g_hint == 1) _mm_prefetch(a + 64 * l, _MM_HINT_T1);
    else _mm_prefetch(a + 64 * l, _MM_HINT_NTA);
  }
}

template <int K>
__attribute__((noinline)) int Sweep(const uint8_t* p, size_t bytes, int reps) {
  __m512i acc[8];
  for (auto& a : acc) a = _mm512_setzero_si512();
  const __m512i w = _mm512_set1_epi8(3);
  const size_t pf = g_prefetch_bytes;
  for (int r = 0; r < reps; ++r) {
    for (size_t o = 0; o < bytes; o += 256) {
      if (pf) Prefetch4Lines(reinterpret_cast<const char*>(p) + o + pf);
      const __m512i x0 = _mm512_load_si512(p + o), x1 = _mm512_load_si512(p + o + 64);
      const __m512i x2 = _mm512_load_si512(p + o + 128), x3 = _mm512_load_si512(p + o + 192);
      if (K == 0) {
        acc[0] = _mm512_xor_si512(acc[0], x0);
        acc[1] = _mm512_xor_si512(acc[1], x1);
        acc[2] = _mm512_xor_si512(acc[2], x2);
        acc[3] = _mm512_xor_si512(acc[3], x3);
      }
#pragma GCC unroll 16
      for (int k = 0; k < K; ++k) {
        acc[(k * 4 + 0) % 8] = _mm512_dpbusd_epi32(acc[(k * 4 + 0) % 8], x0, w);
        acc[(k * 4 + 1) % 8] = _mm512_dpbusd_epi32(acc[(k * 4 + 1) % 8], x1, w);
        acc[(k * 4 + 2) % 8] = _mm512_dpbusd_epi32(acc[(k * 4 + 2) % 8], x2, w);
        acc[(k * 4 + 3) % 8] = _mm512_dpbusd_epi32(acc[(k * 4 + 3) % 8], x3, w);
      }
    }
  }
  int s = 0;
  for (auto& a : acc) s += _mm512_reduce_add_epi32(a);
  return s;
}

using SweepFn = int (*)(const uint8_t*, size_t, int);
constexpr SweepFn kSweeps[] = {Sweep<0>, Sweep<1>, Sweep<2>, Sweep<3>, Sweep<4>, Sweep<6>, Sweep<8>};
constexpr int kKs[] = {0, 1, 2, 3, 4, 6, 8};

// Seconds for `threads` threads (pinned to CPUs 0..threads-1), each sweeping
// its `bytes` `reps` times: its own slice of buf (DRAM) or its own 1 MiB-apart
// piece (hot).
double Run(int threads, SweepFn f, const uint8_t* buf, size_t bytes, int reps, bool hot) {
  std::vector<std::thread> workers;
  std::vector<int> sink(threads);
  const double t = Now();
  for (int i = 0; i < threads; ++i) {
    workers.emplace_back([&, i] {
      cpu_set_t set;
      CPU_ZERO(&set);
      CPU_SET(i, &set);
      pthread_setaffinity_np(pthread_self(), sizeof set, &set);
      sink[i] = f(buf + (hot ? i * (size_t{1} << 20) : i * bytes), bytes, reps);
    });
  }
  for (auto& w : workers) w.join();
  return Now() - t;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc > 1) g_prefetch_bytes = std::strtoull(argv[1], nullptr, 10);
  if (argc > 2) g_hint = std::atoi(argv[2]);
  const size_t total = size_t{2} << 30;
  auto* buf = static_cast<uint8_t*>(std::aligned_alloc(4096, total + (64 << 10)));
  std::memset(buf, 1, total + (64 << 10));
  std::printf("prefetch %zu bytes ahead, hint %s\n", g_prefetch_bytes,
              g_prefetch_bytes == 0 ? "-" : g_hint == 0 ? "T0" : g_hint == 1 ? "T1" : "NTA");
  for (int threads = 1; threads <= 2; ++threads) {
    const size_t per = total / threads;
    const size_t hot_bytes = 64 << 10;
    const int hot_reps = static_cast<int>(per / hot_bytes);
    std::printf("\n%d thread(s)\n| K | DRAM GB/s | hot GB/s | t_dram / (t_dram(K=0) + t_hot) |\n|---|---|---|---|\n",
                threads);
    double t_stream = 0;
    for (int i = 0; i < 7; ++i) {
      double dram = 1e9, hot = 1e9;
      for (int rep = 0; rep < 3; ++rep) {  // best of 3
        dram = std::min(dram, Run(threads, kSweeps[i], buf, per, 1, false));
        hot = std::min(hot, Run(threads, kSweeps[i], buf, hot_bytes, hot_reps, true));
      }
      if (i == 0) t_stream = dram;
      std::printf("| %d | %.1f | %.1f | %.2f |\n", kKs[i], total / dram / 1e9, total / hot / 1e9,
                  dram / (t_stream + hot));
    }
  }
  std::free(buf);
}
