// AVX-512 MatMul: y[m, n] = sum_k x[m, k] * w[n, k].
//
// bf16 weights: X is rounded to bf16 and packed once per call ([m, kp] bf16,
// kp a multiple of 32, zero-padded); each output element has one 16-lane
// accumulator fed by vdpbf16ps over k in steps of 32 on the natural [N, K]
// layout (lane l takes pairs k = 2l, 2l+1 of every 32-step), the K tail a
// masked W load against zero-padded X; then Hsum (simd_avx512.h).
// f32 weights: the same with 16-lane FMA steps of 16.
// Register tiles of MR X rows x NR W rows share W and X loads but never change
// how an element accumulates, so M=1 and M=512 give equal bits (invariant 1);
// threads take blocks of kBlockRows W rows (of every matrix of a
// MatMulShared call, row_tasks.h).
// Decode (m <= kGemvMaxRows) is bound by reading W, so it reads W in address
// order: one W row at a time against every X row (NR = 1; with 5-8 X rows,
// two adjacent W rows, GemvTask), each task a long run of consecutive rows,
// the next lines prefetched a few KB ahead. Eight
// rows side by side (the prefill tile) are eight short streams 2-6 KB apart,
// which the hardware prefetchers follow far worse: on a 2-core Zen 5 VM a
// qwen3-0.6b-shaped GEMV sweep read 21-30 GB/s that way and 50-61 GB/s this
// way, 93-100% of a plain streaming read (docs/kernels.md). On Zen 4 (AMD
// family 0x19) the hardware prefetchers alone read faster, so decode tasks
// there issue no software prefetch (DecodePrefetch below).
// GCC 12's AVX-512 intrinsic headers build some results from _mm512_undefined_*
// and then warn about them (a known false positive).
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

#include <algorithm>
#include <atomic>

#include "core/cpu_features.h"
#include "kernels/ops_isa.h"
#include "kernels/row_tasks.h"
#include "kernels/scratch.h"
#include "kernels/simd_avx512.h"

namespace kvfork::avx512 {
namespace {

constexpr int64_t kBlockRows = 24;  // W rows per task: a multiple of every NR below

constexpr int64_t kGemvMaxRows = 8;            // X rows up to which MatMul runs the decode path
constexpr int64_t kGemvPrefetchBytes = 4096;   // how far ahead of its loads a decode task prefetches

// kPrefetch (decode): each K step's W line of each of the NR rows (adjacent
// rows, read in address order) is one 64-byte line; the line
// kGemvPrefetchBytes further is fetched.
template <int NR, typename T>
inline void PrefetchAhead(const T* const* wr, int64_t c) {
  for (int j = 0; j < NR; ++j)
    _mm_prefetch(reinterpret_cast<const char*>(wr[j] + c) + kGemvPrefetchBytes, _MM_HINT_T0);
}

template <int MR, int NR, bool kPrefetch = false>
inline void TileBf16(const uint16_t* const* xr, const uint16_t* const* wr, int64_t k, float* y,
                     int64_t ldy, int mr_valid, int nr_valid) {
  __m512 acc[MR][NR];
  for (int i = 0; i < MR; ++i)
    for (int j = 0; j < NR; ++j) acc[i][j] = _mm512_setzero_ps();
  const int64_t kfull = k & ~int64_t{31};
  for (int64_t c = 0; c < kfull; c += 32) {
    if constexpr (kPrefetch) PrefetchAhead<NR>(wr, c);
    __m512i wv[NR];
    for (int j = 0; j < NR; ++j) wv[j] = _mm512_loadu_si512(wr[j] + c);
    for (int i = 0; i < MR; ++i) {
      __m512bh xv = AsBf16x32(_mm512_load_si512(xr[i] + c));
      for (int j = 0; j < NR; ++j) acc[i][j] = _mm512_dpbf16_ps(acc[i][j], xv, AsBf16x32(wv[j]));
    }
  }
  if (kfull < k) {
    const __mmask32 mask = Mask32(k - kfull);
    __m512i wv[NR];
    for (int j = 0; j < NR; ++j) wv[j] = _mm512_maskz_loadu_epi16(mask, wr[j] + kfull);
    for (int i = 0; i < MR; ++i) {
      __m512bh xv = AsBf16x32(_mm512_load_si512(xr[i] + kfull));
      for (int j = 0; j < NR; ++j) acc[i][j] = _mm512_dpbf16_ps(acc[i][j], xv, AsBf16x32(wv[j]));
    }
  }
  for (int i = 0; i < mr_valid; ++i)
    for (int j = 0; j < nr_valid; ++j) y[i * ldy + j] = Hsum(acc[i][j]);
}

template <int MR, int NR, bool kPrefetch = false>
inline void TileF32(const float* const* xr, const float* const* wr, int64_t k, float* y,
                    int64_t ldy, int mr_valid, int nr_valid) {
  __m512 acc[MR][NR];
  for (int i = 0; i < MR; ++i)
    for (int j = 0; j < NR; ++j) acc[i][j] = _mm512_setzero_ps();
  const int64_t kfull = k & ~int64_t{15};
  for (int64_t c = 0; c < kfull; c += 16) {
    if constexpr (kPrefetch) PrefetchAhead<NR>(wr, c);
    __m512 wv[NR];
    for (int j = 0; j < NR; ++j) wv[j] = _mm512_loadu_ps(wr[j] + c);
    for (int i = 0; i < MR; ++i) {
      __m512 xv = _mm512_load_ps(xr[i] + c);
      for (int j = 0; j < NR; ++j) acc[i][j] = _mm512_fmadd_ps(xv, wv[j], acc[i][j]);
    }
  }
  if (kfull < k) {
    const __mmask16 mask = Mask16(k - kfull);
    __m512 wv[NR];
    for (int j = 0; j < NR; ++j) wv[j] = _mm512_maskz_loadu_ps(mask, wr[j] + kfull);
    for (int i = 0; i < MR; ++i) {
      __m512 xv = _mm512_load_ps(xr[i] + kfull);
      for (int j = 0; j < NR; ++j) acc[i][j] = _mm512_fmadd_ps(xv, wv[j], acc[i][j]);
    }
  }
  for (int i = 0; i < mr_valid; ++i)
    for (int j = 0; j < nr_valid; ++j) y[i * ldy + j] = Hsum(acc[i][j]);
}

template <int MR, int NR, typename T, bool kPrefetch = false>
inline void Tile(const T* const* xr, const T* const* wr, int64_t k, float* y, int64_t ldy,
                 int mr_valid, int nr_valid) {
  if constexpr (sizeof(T) == 2) {
    TileBf16<MR, NR, kPrefetch>(xr, wr, k, y, ldy, mr_valid, nr_valid);
  } else {
    TileF32<MR, NR, kPrefetch>(xr, wr, k, y, ldy, mr_valid, nr_valid);
  }
}

// Tile<MR, NR> over W rows [n0, n1) for X rows [i0, i0 + mr); w points at row n0.
// Unused tile slots repeat the last valid row (same work, results not stored).
// Decode tasks (kPrefetch, i0 = 0) read W in address order this way.
template <int MR, int NR, typename T, bool kPrefetch = false>
void TileRow(const T* xp, int64_t kp, int64_t i0, int mr, const T* w, int64_t k, int64_t n0,
             int64_t n1, float* y, int64_t n) {
  const T* xr[MR];
  for (int i = 0; i < MR; ++i) xr[i] = xp + (i0 + std::min(i, mr - 1)) * kp;
  for (int64_t j0 = n0; j0 < n1; j0 += NR) {
    const int nr = static_cast<int>(std::min<int64_t>(NR, n1 - j0));
    const T* wr[NR];
    for (int j = 0; j < NR; ++j) wr[j] = w + (j0 - n0 + std::min(j, nr - 1)) * k;
    Tile<MR, NR, T, kPrefetch>(xr, wr, k, y + i0 * n + j0, n, mr, nr);
  }
}

// Tile<MR, NR> over X rows [0, m_full) (a multiple of MR) and W rows [n0, n1),
// W-group-major: a group's NR rows stay in L1 while every X tile streams past
// (X-group-major, TileRow's order, reads the task's W rows from L2 once per X
// tile: a 512 x 3072 x 1024 GEMM on 2 Zen 5 threads ran 15-18% slower so).
// Only while a W group leaves room in L1 for an X tile (kWGroupInL1Bytes):
// at K = 3,072 (36 KB per group) it was up to 15% slower than TileRow.
constexpr int64_t kWGroupInL1Bytes = 24 << 10;
template <int MR, int NR, typename T>
void TileColumns(const T* xp, int64_t kp, int64_t m_full, const T* w, int64_t k, int64_t n0,
                 int64_t n1, float* y, int64_t n) {
  for (int64_t j0 = n0; j0 < n1; j0 += NR) {
    const int nr = static_cast<int>(std::min<int64_t>(NR, n1 - j0));
    const T* wr[NR];
    for (int j = 0; j < NR; ++j) wr[j] = w + (j0 - n0 + std::min(j, nr - 1)) * k;
    for (int64_t i0 = 0; i0 < m_full; i0 += MR) {
      const T* xr[MR];
      for (int i = 0; i < MR; ++i) xr[i] = xp + (i0 + i) * kp;
      Tile<MR, NR>(xr, wr, k, y + i0 * n + j0, n, MR, nr);
    }
  }
}

// -1: not decided yet (by CPU on first use); 0 / 1: off / on.
std::atomic<int> g_decode_prefetch{-1};

// Whether decode tasks prefetch W kGemvPrefetchBytes ahead. A decode-order
// GEMV sweep over qwen3-0.6b-shaped weights (2 threads, alternated in one
// process, medians of 30 rounds) on a Zen 4 VM read 47.0 GB/s without and
// 44.6 with it (a plain read of the same matrices: 45.2; T1 or 1-8 KB
// ahead: 41.6-45.3; docs/kernels.md): its L1
// and L2 stream prefetchers follow a row-ordered read on their own, and the
// extra prefetch loads only compete with them. The Zen 5 VM this path was
// tuned on (session 8) keeps it.
// (Decided on first use and kept in the atomic, not in a function-local
// static, whose guard would put a weak symbol in this ISA's object.)
bool DecodePrefetch() {
  int on = g_decode_prefetch.load(std::memory_order_relaxed);
  if (on < 0) {
    const CpuFeatures& f = DetectCpuFeatures();
    on = f.amd && f.family == 0x19 ? 0 : 1;
    g_decode_prefetch.store(on, std::memory_order_relaxed);
  }
  return on == 1;
}

// 1-4 X rows: one W row at a time. 5-8: one pass of 8 X rows against two W
// rows; the prefill tiles (4 x 6, then 1-3 rows) ran 5-8 rows at about half
// the compute rate of this tile, whose 16 chains keep the dot unit busy where
// 8 x 1's 8 did not (qwen3-0.6b's 28 layers of projections at m = 8, 2
// threads, Zen 5: W from L3 25.1 -> 17.9 ms, from DRAM 40 -> 31-35 ms; 8 x 1:
// 21.9 and 34-36).
template <bool kPrefetch, typename T>
void GemvTask(const T* xp, int64_t kp, int64_t m, const T* wb, int64_t k, int64_t n0, int64_t n1,
              float* y, int64_t n) {
  const int mi = static_cast<int>(m);
  switch (m) {
    case 1: TileRow<1, 1, T, kPrefetch>(xp, kp, 0, mi, wb, k, n0, n1, y, n); break;
    case 2: TileRow<2, 1, T, kPrefetch>(xp, kp, 0, mi, wb, k, n0, n1, y, n); break;
    case 3: TileRow<3, 1, T, kPrefetch>(xp, kp, 0, mi, wb, k, n0, n1, y, n); break;
    case 4: TileRow<4, 1, T, kPrefetch>(xp, kp, 0, mi, wb, k, n0, n1, y, n); break;
    default: TileRow<kGemvMaxRows, 2, T, kPrefetch>(xp, kp, 0, mi, wb, k, n0, n1, y, n); break;
  }
}

// Runs body(wb, k, n0, n1, y, n) for every task: W rows [n0, n1) of one
// target of n rows and k cols, wb pointing at row n0, y the target's output.
template <typename T, typename Body>
void ForEachTask(const RowTasks& tasks, ThreadPool& pool, const Body& body) {
  pool.ParallelFor(tasks.size(), [&](int64_t t) {
    const RowTasks::Task task = tasks[t];
    const int64_t n = task.target->w.rows, k = task.target->w.cols, n0 = task.row0;
    body(static_cast<const T*>(task.target->w.data) + n0 * k, k, n0, n0 + task.rows,
         task.target->y, n);
  });
}

// m: 1..kGemvMaxRows.
template <typename T>
void RunGemv(const T* xp, int64_t kp, int64_t m, std::span<const MatMulTarget> targets,
             ThreadPool& pool) {
  const RowTasks tasks(targets, GemvTaskRows(targets, sizeof(T), pool.num_threads()));
  const bool prefetch = DecodePrefetch();
  ForEachTask<T>(tasks, pool, [&](const T* wb, int64_t k, int64_t n0, int64_t n1, float* y,
                                  int64_t n) {
    if (prefetch) {
      GemvTask<true>(xp, kp, m, wb, k, n0, n1, y, n);
    } else {
      GemvTask<false>(xp, kp, m, wb, k, n0, n1, y, n);
    }
  });
}

template <typename T>
void RunBlocks(const T* xp, int64_t kp, int64_t m, std::span<const MatMulTarget> targets,
               ThreadPool& pool) {
  if (m <= kGemvMaxRows) {
    RunGemv(xp, kp, m, targets, pool);
    return;
  }
  const RowTasks tasks(targets, kBlockRows);
  ForEachTask<T>(tasks, pool, [&](const T* wb, int64_t k, int64_t n0, int64_t n1, float* y,
                                  int64_t n) {
    const int64_t i0 = m / 4 * 4;  // rows of whole 4 x 6 tiles
    if (6 * k * static_cast<int64_t>(sizeof(T)) <= kWGroupInL1Bytes) {
      TileColumns<4, 6>(xp, kp, i0, wb, k, n0, n1, y, n);
    } else {
      for (int64_t i = 0; i < i0; i += 4) TileRow<4, 6>(xp, kp, i, 4, wb, k, n0, n1, y, n);
    }
    switch (m - i0) {
      case 3: TileRow<3, 6>(xp, kp, i0, 3, wb, k, n0, n1, y, n); break;
      case 2: TileRow<2, 8>(xp, kp, i0, 2, wb, k, n0, n1, y, n); break;
      case 1: TileRow<1, 8>(xp, kp, i0, 1, wb, k, n0, n1, y, n); break;
      default: break;
    }
  });
}

}  // namespace

void SetDecodePrefetchForTesting(int on) { g_decode_prefetch.store(on < 0 ? -1 : on != 0); }

void MatMulShared(const float* x, int64_t m, std::span<const MatMulTarget> targets,
                  ThreadPool& pool) {
  const int64_t k = targets[0].w.cols;
  if (targets[0].w.dtype == DType::kBf16) {
    const int64_t kp = (k + 31) & ~int64_t{31};
    uint16_t* xp = static_cast<uint16_t*>(
        ThreadScratch(kScratchCaller, static_cast<size_t>(m * kp) * sizeof(uint16_t)));
    pool.ParallelFor(m, [&](int64_t i) {
      const float* src = x + i * k;
      uint16_t* dst = xp + i * kp;
      for (int64_t c = 0; c < kp; c += 16) {
        // Past k the masked load gives zeros: padded pairs add exactly nothing.
        __m512 v = _mm512_maskz_loadu_ps(Mask16(k > c ? k - c : 0), src + c);
        StoreBf16(dst + c, F32ToBf16Lanes(v));
      }
    });
    RunBlocks(xp, kp, m, targets, pool);
  } else {
    const int64_t kp = (k + 15) & ~int64_t{15};
    float* xp = static_cast<float*>(
        ThreadScratch(kScratchCaller, static_cast<size_t>(m * kp) * sizeof(float)));
    pool.ParallelFor(m, [&](int64_t i) {
      const float* src = x + i * k;
      float* dst = xp + i * kp;
      for (int64_t c = 0; c < kp; c += 16)
        _mm512_store_ps(dst + c, _mm512_maskz_loadu_ps(Mask16(k > c ? k - c : 0), src + c));
    });
    RunBlocks(xp, kp, m, targets, pool);
  }
}

}  // namespace kvfork::avx512
