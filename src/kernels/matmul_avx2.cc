// AVX2 + FMA MatMul: y[m, n] = sum_k x[m, k] * w[n, k].
//
// One reduction order per output element, whatever M, tile or thread split
// (DESIGN.md invariant 1): lane l of one 8-wide accumulator sums the products
// at k = l, l + 8, l + 16, ... in increasing k with FMA; the K tail is the
// same FMA on zero-padded lanes; then Hsum (simd_avx2.h) reduces the lanes.
// Register tiles (MR X rows x NR W rows) only decide which accumulators live
// side by side, never how one accumulates, so M=1 and M=512 give equal bits.
//
// Blocking: X is packed once per call into [m, kp] f32 (zero-padded to a
// multiple of 8, rounded through bf16 for bf16 weights); threads take blocks
// of kBlockRows W rows (which stay in L2; of every matrix of a MatMulShared
// call, row_tasks.h) and run every X tile over them. Decode (m <=
// kGemvMaxRows) reads W once from DRAM instead: tasks of ~768 KB of
// consecutive rows, read as several sequential streams (StreamRows).
#include <algorithm>
#include <cstring>
#include <type_traits>

#include "kernels/ops_isa.h"
#include "kernels/row_tasks.h"
#include "kernels/scratch.h"
#include "kernels/simd_avx2.h"

namespace kvfork::avx2 {
namespace {

constexpr int64_t kBlockRows = 24;  // W rows per task: a multiple of every NR below

constexpr int64_t kGemvMaxRows = 2;  // X rows up to which tasks are decode-sized

// Loads 8 weights at k = c of row p as f32; `rem` < 8 valid ones for the tail.
inline __m256 LoadW(const uint16_t* p) { return LoadBf16(p); }
inline __m256 LoadW(const float* p) { return _mm256_loadu_ps(p); }
inline __m256 LoadWTail(const uint16_t* p, int64_t rem) {
  alignas(16) uint16_t buf[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  std::memcpy(buf, p, static_cast<size_t>(rem) * sizeof(uint16_t));
  return LoadBf16(buf);
}
inline __m256 LoadWTail(const float* p, int64_t rem) {
  return _mm256_maskload_ps(p, TailMask(rem));
}

// Computes y[i * ldy + j * ldc] for i < mr_valid, j < nr_valid. xr: MR packed
// X rows (kp floats each); wr: NR W rows of k elements. Unused slots repeat
// the last valid row (same work, results not stored).
template <int MR, int NR, typename WT>
inline void Tile(const float* const* xr, const WT* const* wr, int64_t k, float* y, int64_t ldy,
                 int64_t ldc, int mr_valid, int nr_valid) {
  __m256 acc[MR][NR];
  for (int i = 0; i < MR; ++i)
    for (int j = 0; j < NR; ++j) acc[i][j] = _mm256_setzero_ps();
  const int64_t kfull = k & ~int64_t{7};
  // X rows in registers, one W vector at a time: MR * NR + MR + 1 <= 16 ymm.
  for (int64_t c = 0; c < kfull; c += 8) {
    __m256 xv[MR];
    for (int i = 0; i < MR; ++i) xv[i] = _mm256_load_ps(xr[i] + c);
    for (int j = 0; j < NR; ++j) {
      const __m256 wv = LoadW(wr[j] + c);
      for (int i = 0; i < MR; ++i) acc[i][j] = _mm256_fmadd_ps(xv[i], wv, acc[i][j]);
    }
  }
  if (kfull < k) {
    __m256 wv[NR];
    for (int j = 0; j < NR; ++j) wv[j] = LoadWTail(wr[j] + kfull, k - kfull);
    for (int i = 0; i < MR; ++i) {
      __m256 xv = _mm256_load_ps(xr[i] + kfull);
      for (int j = 0; j < NR; ++j) acc[i][j] = _mm256_fmadd_ps(xv, wv[j], acc[i][j]);
    }
  }
  for (int i = 0; i < mr_valid; ++i)
    for (int j = 0; j < nr_valid; ++j) y[i * ldy + j * ldc] = Hsum(acc[i][j]);
}

// Runs Tile<MR, NR> over W rows [n0, n1) for X rows [i0, i0 + mr); w points at row n0.
template <int MR, int NR, typename WT>
void TileRow(const float* xp, int64_t kp, int64_t i0, int mr, const WT* w, int64_t k, int64_t n0,
             int64_t n1, float* y, int64_t n) {
  const float* xr[MR];
  for (int i = 0; i < MR; ++i) xr[i] = xp + (i0 + std::min(i, mr - 1)) * kp;
  for (int64_t j0 = n0; j0 < n1; j0 += NR) {
    const int nr = static_cast<int>(std::min<int64_t>(NR, n1 - j0));
    const WT* wr[NR];
    for (int j = 0; j < NR; ++j) wr[j] = w + (j0 - n0 + std::min(j, nr - 1)) * k;
    Tile<MR, NR>(xr, wr, k, y + i0 * n + j0, n, 1, mr, nr);
  }
}

// Decode (m = mr <= kGemvMaxRows X rows): W rows [n0, n1) as NR streams, stream
// s the consecutive rows [n0 + s * per, n0 + (s + 1) * per), each tile taking
// the next row of every stream. Each stream is one long sequential read that
// the hardware prefetchers follow across rows; a tile of NR adjacent rows
// instead jumps to a new 2-6 KB run every few hundred bytes. On the Zen 3 VM
// (2 threads, 8 MB of bf16 W from DRAM, alternated runs): 0.75-0.9 of a plain
// 4-stream read, against 0.6-0.75 for adjacent rows with the next tile
// prefetched. Which rows share a tile changes no result.
template <int MR, int NR, typename WT>
void StreamRows(const float* xp, int64_t kp, int mr, const WT* w, int64_t k, int64_t n0, int64_t n1,
                float* y, int64_t n) {
  const float* xr[MR];
  for (int i = 0; i < MR; ++i) xr[i] = xp + std::min(i, mr - 1) * kp;
  const int64_t rows = n1 - n0, per = (rows + NR - 1) / NR;
  for (int64_t r = 0; r < per; ++r) {
    // Streams s with s * per + r < rows are valid: the first `nr`.
    const int nr = static_cast<int>(std::min<int64_t>(NR, (rows - r + per - 1) / per));
    const WT* wr[NR];
    for (int j = 0; j < NR; ++j) wr[j] = w + (std::min(j, nr - 1) * per + r) * k;
    Tile<MR, NR>(xr, wr, k, y + n0 + r, n, per, mr, nr);
  }
}

// All X tiles over W rows [n0, n1); w points at row n0.
template <typename WT>
void RunTiles(const float* xp, int64_t kp, int64_t m, const WT* w, int64_t n, int64_t k, int64_t n0,
              int64_t n1, float* y) {
  if (m <= kGemvMaxRows) {
    if (m == 2) StreamRows<2, 6>(xp, kp, 2, w, k, n0, n1, y, n);
    if (m == 1) StreamRows<1, 8>(xp, kp, 1, w, k, n0, n1, y, n);
    return;
  }
  int64_t i0 = 0;
  for (; i0 + 3 <= m; i0 += 3) TileRow<3, 4>(xp, kp, i0, 3, w, k, n0, n1, y, n);
  switch (m - i0) {
    case 2:
      TileRow<2, 6>(xp, kp, i0, 2, w, k, n0, n1, y, n);
      break;
    case 1:
      TileRow<1, 8>(xp, kp, i0, 1, w, k, n0, n1, y, n);
      break;
    default:
      break;
  }
}

template <typename WT>
void RunBlocks(const float* xp, int64_t kp, int64_t m, std::span<const MatMulTarget> targets,
               ThreadPool& pool) {
  // Decode reads W once from DRAM: long runs of rows per task (and the
  // prefetch above); prefill keeps L2-sized blocks that every X tile reuses.
  const RowTasks tasks(targets, m <= kGemvMaxRows
                                    ? GemvTaskRows(targets, sizeof(WT), pool.num_threads())
                                    : kBlockRows);
  pool.ParallelFor(tasks.size(), [&](int64_t t) {
    const RowTasks::Task task = tasks[t];
    const int64_t n = task.target->w.rows, k = task.target->w.cols;
    const int64_t n0 = task.row0, n1 = n0 + task.rows;
    const WT* w = static_cast<const WT*>(task.target->w.data);
    float* y = task.target->y;
    if constexpr (std::is_same_v<WT, uint16_t>) {
      if (m >= 4) {
        // Many X tiles will reuse this block: convert it to f32 once (exact,
        // the same values the bf16 loads give) instead of once per tile.
        float* panel = static_cast<float*>(
            ThreadScratch(kScratchTask, static_cast<size_t>((n1 - n0) * k) * sizeof(float)));
        const uint16_t* src = w + n0 * k;
        const int64_t total = (n1 - n0) * k;
        int64_t c = 0;
        for (; c + 8 <= total; c += 8) _mm256_storeu_ps(panel + c, LoadBf16(src + c));
        if (c < total)
          _mm256_maskstore_ps(panel + c, TailMask(total - c), LoadWTail(src + c, total - c));
        RunTiles(xp, kp, m, static_cast<const float*>(panel), n, k, n0, n1, y);
        return;
      }
    }
    RunTiles(xp, kp, m, w + n0 * k, n, k, n0, n1, y);
  });
}

}  // namespace

void MatMulShared(const float* x, int64_t m, std::span<const MatMulTarget> targets,
                  ThreadPool& pool) {
  const int64_t k = targets[0].w.cols;
  const int64_t kp = (k + 7) & ~int64_t{7};
  const bool bf16 = targets[0].w.dtype == DType::kBf16;
  float* xp = static_cast<float*>(
      ThreadScratch(kScratchCaller, static_cast<size_t>(m * kp) * sizeof(float)));
  pool.ParallelFor(m, [&](int64_t i) {
    const float* src = x + i * k;
    float* dst = xp + i * kp;
    int64_t c = 0;
    for (; c + 8 <= k; c += 8) {
      __m256 v = _mm256_loadu_ps(src + c);
      _mm256_store_ps(dst + c, bf16 ? RoundToBf16(v) : v);
    }
    if (c < kp) {  // tail and padding: zeros past k
      __m256 v = _mm256_maskload_ps(src + c, TailMask(k - c));
      _mm256_store_ps(dst + c, bf16 ? RoundToBf16(v) : v);
    }
  });
  if (bf16) {
    RunBlocks<uint16_t>(xp, kp, m, targets, pool);
  } else {
    RunBlocks<float>(xp, kp, m, targets, pool);
  }
}

}  // namespace kvfork::avx2
