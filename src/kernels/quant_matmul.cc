#include "kernels/quant_matmul.h"

#include <algorithm>
#include <cstring>

#include "core/cpu_features.h"
#include "kernels/quant.h"
#include "kernels/quant_isa.h"
#include "kernels/row_tasks.h"
#include "kernels/scratch.h"

namespace kvfork {
namespace {

// x rows up to which a call is a decode step, which streams W from DRAM.
constexpr int64_t kDecodeMaxRows = 4;
// W rows per prefill task: their blocks stay in L1 while every x row passes
// (16 rows of a 3,072-col Q8_0 matrix are 52 KB, of Q4_K 27 KB).
constexpr int64_t kPrefillTaskRows = 16;

// The kernel of the active level for this format; scalar where it has none.
QuantDotFn KernelFor(DType weights) {
  QuantDotFn fn = nullptr;
  switch (ActiveIsa()) {
    case Isa::kAmx:  // AMX-INT8 takes prefill panels where it has them (PanelKernelFor)
    case Isa::kAvx512:
      fn = avx512::QuantDotKernel(weights);
      if (fn == nullptr) fn = avx2::QuantDotKernel(weights);
      break;
    case Isa::kAvx2:
      fn = avx2::QuantDotKernel(weights);
      break;
    case Isa::kScalar:
      break;
  }
  return fn != nullptr ? fn : reference::QuantDotKernel(weights);
}

// The AMX-INT8 prefill kernel for this format on the active level, or nullptr.
QuantPanelFn PanelKernelFor(DType weights) {
  return ActiveIsa() == Isa::kAmx ? amx::QuantPanelKernel(weights) : nullptr;
}

// W rows per decode task: about kGemvTaskBytes of consecutive rows, at least
// two tasks per thread; a multiple of 8.
int64_t DecodeTaskRows(std::span<const MatMulTarget> targets, int threads) {
  int64_t rows = 0;
  size_t row_bytes = 1;
  for (const MatMulTarget& t : targets) {
    rows += t.w.rows;
    row_bytes = std::max(row_bytes, t.w.row_bytes());
  }
  const int64_t by_bytes = kGemvTaskBytes / static_cast<int64_t>(row_bytes);
  const int64_t by_threads = rows / (2 * int64_t{threads});
  return std::max<int64_t>(8, std::min(by_bytes, by_threads) / 8 * 8);
}

}  // namespace

void QuantMatMulShared(const float* x, int64_t m, std::span<const MatMulTarget> targets,
                       ThreadPool& pool) {
  const int64_t k = targets[0].w.cols;
  const bool prefill = m > kDecodeMaxRows;
  static_assert(kPrefillTaskRows == kQuantPanelRows, "a prefill task is one panel");
  // Prefill rows are padded with zero rows to whole panels of x rows, which
  // the AMX-INT8 kernels read as tiles.
  const int64_t rows_x = prefill ? (m + kQuantPanelRows - 1) / kQuantPanelRows * kQuantPanelRows : m;
  bool need[2] = {false, false};  // activation rows in blocks of 32, of 256
  for (const MatMulTarget& t : targets) need[ActivationBlockElems(t.w.dtype) == 256] = true;
  const size_t row_bytes[2] = {need[0] ? Q8RowBytes(k, 32) : 0, need[1] ? Q8RowBytes(k, 256) : 0};
  // One scratch block: the rows' views (per kind, for the kernels), then the
  // rows of 32-blocks, then those of 256-blocks.
  const size_t views_bytes = (static_cast<size_t>(2 * rows_x) * sizeof(Q8Row) + 63) & ~size_t{63};
  uint8_t* scratch = static_cast<uint8_t*>(ThreadScratch(
      kScratchCaller, views_bytes + static_cast<size_t>(rows_x) * (row_bytes[0] + row_bytes[1])));
  Q8Row* views = reinterpret_cast<Q8Row*>(scratch);
  uint8_t* const xq_base[2] = {scratch + views_bytes,
                               scratch + views_bytes + static_cast<size_t>(rows_x) * row_bytes[0]};
  pool.ParallelFor(m, [&](int64_t i) {
    if (need[0]) QuantizeQ8Row(x + i * k, k, 32, xq_base[0] + i * row_bytes[0]);
    if (need[1]) QuantizeQ8Row(x + i * k, k, 256, xq_base[1] + i * row_bytes[1]);
  });
  for (int kind = 0; kind < 2; ++kind) {
    if (!need[kind]) continue;
    std::memset(xq_base[kind] + m * row_bytes[kind], 0,
                static_cast<size_t>(rows_x - m) * row_bytes[kind]);
    for (int64_t i = 0; i < rows_x; ++i)
      views[kind * rows_x + i] = Q8RowAt(xq_base[kind] + i * row_bytes[kind], k, kind ? 256 : 32);
  }

  for (size_t first = 0; first < targets.size(); first += kMaxMatMulTargets) {
    const auto chunk =
        targets.subspan(first, std::min<size_t>(kMaxMatMulTargets, targets.size() - first));
    QuantDotFn kernels[kMaxMatMulTargets];
    QuantPanelFn panels[kMaxMatMulTargets];
    for (size_t i = 0; i < chunk.size(); ++i) {
      kernels[i] = KernelFor(chunk[i].w.dtype);
      panels[i] = prefill ? PanelKernelFor(chunk[i].w.dtype) : nullptr;
    }
    const RowTasks tasks(
        chunk, prefill ? kPrefillTaskRows : DecodeTaskRows(chunk, pool.num_threads()));
    pool.ParallelFor(tasks.size(), [&](int64_t t) {
      const RowTasks::Task task = tasks[t];
      const MatrixView& w = task.target->w;
      const size_t target = static_cast<size_t>(task.target - chunk.data());
      const int kind = ActivationBlockElems(w.dtype) == 256;
      if (panels[target] != nullptr) {
        panels[target](w.row(task.row0), w.row_bytes(), task.rows, views + kind * rows_x,
                       row_bytes[kind], m, task.target->y + task.row0, w.rows);
      } else {
        kernels[target](w.row(task.row0), w.row_bytes(), task.rows, views + kind * rows_x, m,
                        task.target->y + task.row0, w.rows);
      }
    });
  }
}

}  // namespace kvfork
