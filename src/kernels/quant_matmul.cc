#include "kernels/quant_matmul.h"

#include <algorithm>

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
    case Isa::kAmx:  // AMX is bf16 tiles here: quantized weights run the AVX-512 kernels
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
  bool need[2] = {false, false};  // activation rows in blocks of 32, of 256
  for (const MatMulTarget& t : targets) need[ActivationBlockElems(t.w.dtype) == 256] = true;
  const size_t row_bytes[2] = {need[0] ? Q8RowBytes(k, 32) : 0, need[1] ? Q8RowBytes(k, 256) : 0};
  uint8_t* xq = static_cast<uint8_t*>(
      ThreadScratch(kScratchCaller, static_cast<size_t>(m) * (row_bytes[0] + row_bytes[1])));
  uint8_t* const xq_base[2] = {xq, xq + static_cast<size_t>(m) * row_bytes[0]};
  pool.ParallelFor(m, [&](int64_t i) {
    if (need[0]) QuantizeQ8Row(x + i * k, k, 32, xq_base[0] + i * row_bytes[0]);
    if (need[1]) QuantizeQ8Row(x + i * k, k, 256, xq_base[1] + i * row_bytes[1]);
  });

  for (size_t first = 0; first < targets.size(); first += kMaxMatMulTargets) {
    const auto chunk =
        targets.subspan(first, std::min<size_t>(kMaxMatMulTargets, targets.size() - first));
    QuantDotFn kernels[kMaxMatMulTargets];
    for (size_t i = 0; i < chunk.size(); ++i) kernels[i] = KernelFor(chunk[i].w.dtype);
    const RowTasks tasks(
        chunk, m <= kDecodeMaxRows ? DecodeTaskRows(chunk, pool.num_threads()) : kPrefillTaskRows);
    pool.ParallelFor(tasks.size(), [&](int64_t t) {
      const RowTasks::Task task = tasks[t];
      const MatrixView& w = task.target->w;
      const QuantDotFn kernel = kernels[task.target - chunk.data()];
      const int block = ActivationBlockElems(w.dtype);
      const int kind = block == 256;
      for (int64_t i = 0; i < m; ++i) {
        const Q8Row xr = Q8RowAt(xq_base[kind] + i * row_bytes[kind], k, block);
        kernel(w.row(task.row0), w.row_bytes(), task.rows, xr,
               task.target->y + i * w.rows + task.row0);
      }
    });
  }
}

}  // namespace kvfork
