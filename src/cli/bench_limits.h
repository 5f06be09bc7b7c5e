// The machine's limits that benchmarks compare against, measured in the same
// run (the machine is shared and its speed varies, so a limit measured an
// hour ago is not a fair denominator).
//
// Thread affinity: call from the thread that owns the pool. Cost: each
// measurement runs for about min_seconds; MeasureBandwidth also allocates
// and touches 1 GiB.
#pragma once

#include "core/thread_pool.h"

namespace kvfork::cli {

// Runs fn repeatedly for at least min_seconds (and 3 times) after one warm-up;
// returns the mean seconds per run.
template <typename Fn>
double TimeIt(const Fn& fn, double min_seconds);

// Bytes per second of a streaming read of a 1 GiB buffer by every pool thread.
double MeasureBandwidth(ThreadPool& pool, double min_seconds);

struct PeakFlops {
  double f32 = 0;   // FMA on independent registers (AVX2 8-wide or AVX-512 16-wide); 0: no FMA
  double bf16 = 0;  // vdpbf16ps where the CPU has AVX512_BF16, else 0
  // The rate a bf16 GEMM can reach on the active ISA: vdpbf16ps on AVX-512,
  // f32 FMA otherwise (bf16 is widened to f32).
  double ForBf16Gemm() const;
};

// FLOP/s of every pool thread running register-only FMA loops.
PeakFlops MeasurePeakFlops(ThreadPool& pool, double min_seconds);

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

}  // namespace kvfork::cli
