// The machine's limits that benchmarks compare against, measured in the same
// run (the machine is shared and its speed varies, so a limit measured an
// hour ago is not a fair denominator). Both are the best this machine can do,
// not the best our kernels could do: the read bandwidth takes the fastest of
// several access patterns, the peak the fastest bf16 instruction the CPU has.
//
// Thread affinity: call from the thread that owns the pool. Cost: each
// pattern or instruction runs for about min_seconds; MeasureBandwidth also
// allocates and touches kBandwidthBufferBytes.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/thread_pool.h"
#include "kernels/ops.h"

namespace kvfork::cli {

// Runs fn repeatedly for at least min_seconds (and 3 times) after one warm-up;
// returns the mean seconds per run.
template <typename Fn>
double TimeIt(const Fn& fn, double min_seconds);

// As TimeIt, but returns the fastest run: for the limits, which are the best
// the machine can do, so a run slowed by a host that took a vCPU away for a
// moment does not lower them.
template <typename Fn>
double TimeBest(const Fn& fn, double min_seconds);

// 2 GiB: four times the 480 MiB L3 this VM reports, so the reads come from DRAM.
constexpr size_t kBandwidthBufferBytes = size_t{2} << 30;

struct Bandwidth {
  double bytes_per_s = 0;  // the best pattern's rate
  std::string pattern;     // e.g. "avx512 x4 streams"
};

// Streaming reads of a kBandwidthBufferBytes buffer by every pool thread (cut
// into 32 MiB tasks, so every thread takes part however the pool hands them
// out), with 1, 2 and 4 concurrent streams per task and the widest loads the
// CPU has. The buffer is kept, so a benchmark can also sample the bandwidth
// between its own timed steps: a VM's share of the memory bus changes within
// seconds (on the Zen 3 VM: 17-39 GB/s minutes apart).
// Cost: allocates and writes the buffer once; each read ~0.1 s.
class BandwidthProbe {
 public:
  explicit BandwidthProbe(ThreadPool& pool);
  ~BandwidthProbe();
  BandwidthProbe(const BandwidthProbe&) = delete;
  BandwidthProbe& operator=(const BandwidthProbe&) = delete;

  // Every pattern, each for about min_seconds; the fastest pattern's fastest
  // read. Sample() reads with the pattern chosen here.
  Bandwidth Measure(double min_seconds);
  // One read of the buffer now; bytes per second.
  double Sample();

 private:
  struct ReadPattern {
    const char* name;
    uint64_t (*sum)(const uint8_t*, size_t);
  };
  static constexpr size_t kTaskBytes = size_t{32} << 20;
  double ReadSeconds(size_t pattern);

  ThreadPool& pool_;
  std::unique_ptr<uint8_t, void (*)(void*)> buf_;
  std::vector<ReadPattern> patterns_;
  std::vector<uint64_t> sink_;  // per task, so the reads are not optimised away
  size_t chosen_ = 0;
};

// BandwidthProbe(pool).Measure(min_seconds).
Bandwidth MeasureBandwidth(ThreadPool& pool, double min_seconds);

// The faster of two measurements (the same machine sampled twice).
Bandwidth Best(const Bandwidth& a, const Bandwidth& b);

struct PeakFlops {
  double f32 = 0;       // FMA on independent registers (AVX2 8-wide or AVX-512 16-wide); 0: no FMA
  double bf16_dot = 0;  // vdpbf16ps on 16 accumulators where the CPU has AVX512_BF16, else 0
  double amx_bf16 = 0;  // TDPBF16PS on 4 accumulator tiles where the CPU has AMX-BF16, else 0
  // The best bf16 GEMM rate of this machine: the largest of the three (a bf16
  // GEMM can always widen to f32).
  double BestBf16() const;
  // The name of the instruction BestBf16 comes from.
  const char* BestBf16Name() const;
};

// FLOP/s of every pool thread running register-only loops.
PeakFlops MeasurePeakFlops(ThreadPool& pool, double min_seconds);

// Each rate the larger of a's and b's.
PeakFlops Best(const PeakFlops& a, const PeakFlops& b);

// ---- The decode GEMV's compute alone (issue 22's compute bound) ----------

// W's first rows that fit kHotGemvBytes: in one core's L2 on every CPU here
// (512 KiB on Zen 3/4, 2 MiB on Zen 5 and Sapphire Rapids).
constexpr size_t kHotGemvBytes = size_t{512} << 10;

// Bytes of W per second a decode GEMV (m = 1) of those rows computes on one
// thread, run again and again so they stay in its L2: the kernel's compute
// rate with no DRAM stream under it (the fastest run, as for the limits).
// One thread: on two, ParallelFor's tasks change cores from call to call, so
// each call would read its rows from the other core's L2 or the L3 and time
// that. Times the threads of a run, it is that run's compute rate.
double HotGemvBytesPerSecond(const MatrixView& w, double min_seconds);

}  // namespace kvfork::cli

#include "core/timer.h"

namespace kvfork::cli {

template <typename Fn>
double TimeIt(const Fn& fn, double min_seconds) {
  fn();
  int runs = 0;
  Timer t;
  do {
    fn();
    ++runs;
  } while (runs < 3 || t.Seconds() < min_seconds);
  return t.Seconds() / runs;
}

template <typename Fn>
double TimeBest(const Fn& fn, double min_seconds) {
  fn();
  int runs = 0;
  double best = 0;
  Timer total;
  do {
    Timer t;
    fn();
    const double s = t.Seconds();
    best = runs == 0 || s < best ? s : best;
    ++runs;
  } while (runs < 3 || total.Seconds() < min_seconds);
  return best;
}

}  // namespace kvfork::cli
