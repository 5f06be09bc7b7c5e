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

namespace {

// One task of QuantMatMulGrouped: W rows [row0, row0 + rows) of one group.
struct GroupTask {
  int64_t group;
  int64_t row0;
  int64_t rows;
};

}  // namespace

void QuantMatMulGrouped(std::span<const MatMulGroup> groups, ThreadPool& pool) {
  const int64_t n = static_cast<int64_t>(groups.size());
  // Bounds for the scratch: every group's x quantized as if none shared it.
  int64_t max_views = 0;
  size_t max_act_bytes = 0;
  int64_t pass_bytes = 0;
  for (const MatMulGroup& g : groups) {
    if (!InQuantGroupedPass(g)) continue;
    const MatrixView& w = g.target.w;
    max_views += g.m;
    max_act_bytes += static_cast<size_t>(g.m) * Q8RowBytes(w.cols, ActivationBlockElems(w.dtype));
    pass_bytes += w.rows * static_cast<int64_t>(w.row_bytes());
  }
  if (max_views == 0) return;
  // Tasks of about kGemvTaskBytes of one group's consecutive rows (so each
  // thread streams long runs), smaller where the whole pass would give fewer
  // than four per thread: the pool hands tasks out as threads free up, so
  // many even tasks let both threads finish together.
  const int64_t task_bytes =
      std::max<int64_t>(1, std::min(kGemvTaskBytes, pass_bytes / (4 * int64_t{pool.num_threads()})));
  auto rows_per_task = [&](const MatrixView& w) {
    const int64_t bytes = w.rows * static_cast<int64_t>(w.row_bytes());
    const int64_t parts = std::max<int64_t>(1, (bytes + task_bytes - 1) / task_bytes);
    return std::max<int64_t>(8, ((w.rows + parts - 1) / parts + 7) / 8 * 8);
  };
  int64_t num_tasks = 0;
  for (const MatMulGroup& g : groups) {
    if (!InQuantGroupedPass(g)) continue;
    const int64_t step = rows_per_task(g.target.w);
    num_tasks += (g.target.w.rows + step - 1) / step;
  }

  // One scratch block: the activation rows, then each group's first view
  // (-1: not in the pass) and kernel, the views, the tasks.
  const auto align = [](size_t b) { return (b + 63) & ~size_t{63}; };
  const size_t first_off = align(max_act_bytes);
  const size_t kernel_off = first_off + align(static_cast<size_t>(n) * sizeof(int64_t));
  const size_t views_off = kernel_off + align(static_cast<size_t>(n) * sizeof(QuantDotFn));
  const size_t tasks_off = views_off + align(static_cast<size_t>(max_views) * sizeof(Q8Row));
  uint8_t* scratch = static_cast<uint8_t*>(ThreadScratch(
      kScratchCaller, tasks_off + static_cast<size_t>(num_tasks) * sizeof(GroupTask)));
  int64_t* first_view = reinterpret_cast<int64_t*>(scratch + first_off);
  QuantDotFn* kernels = reinterpret_cast<QuantDotFn*>(scratch + kernel_off);
  Q8Row* views = reinterpret_cast<Q8Row*>(scratch + views_off);
  GroupTask* tasks = reinterpret_cast<GroupTask*>(scratch + tasks_off);

  // Quantize each distinct (x, m, cols, block size) once, on this thread: a
  // few rows, cheaper than a sync.
  int64_t num_views = 0;
  size_t act_bytes = 0;
  for (int64_t i = 0; i < n; ++i) {
    first_view[i] = -1;
    const MatMulGroup& g = groups[i];
    if (!InQuantGroupedPass(g)) continue;
    const MatrixView& w = g.target.w;
    const int elems = ActivationBlockElems(w.dtype);
    kernels[i] = KernelFor(w.dtype);
    for (int64_t j = 0; j < i && first_view[i] < 0; ++j) {
      const MatMulGroup& h = groups[j];
      if (first_view[j] >= 0 && h.x == g.x && h.m == g.m && h.target.w.cols == w.cols &&
          ActivationBlockElems(h.target.w.dtype) == elems)
        first_view[i] = first_view[j];
    }
    if (first_view[i] >= 0) continue;
    first_view[i] = num_views;
    const size_t row_bytes = Q8RowBytes(w.cols, elems);
    for (int64_t r = 0; r < g.m; ++r) {
      uint8_t* mem = scratch + act_bytes;
      QuantizeQ8Row(g.x + r * w.cols, w.cols, elems, mem);
      views[num_views++] = Q8RowAt(mem, w.cols, elems);
      act_bytes += row_bytes;
    }
  }
  int64_t t = 0;
  for (int64_t i = 0; i < n; ++i) {
    if (first_view[i] < 0) continue;
    const MatrixView& w = groups[i].target.w;
    const int64_t step = rows_per_task(w);
    for (int64_t r = 0; r < w.rows; r += step) tasks[t++] = {i, r, std::min(step, w.rows - r)};
  }

  pool.ParallelFor(num_tasks, [&](int64_t task_index) {
    const GroupTask task = tasks[task_index];
    const MatMulGroup& g = groups[task.group];
    const MatrixView& w = g.target.w;
    kernels[task.group](w.row(task.row0), w.row_bytes(), task.rows, views + first_view[task.group],
                        g.m, g.target.y + task.row0, w.rows);
  });
}

}  // namespace kvfork
