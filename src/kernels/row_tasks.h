// The row blocks of the matrices of one MatMulShared call numbered as one
// range of tasks, so a single ParallelFor covers them all. Task t of target i
// is W rows [row0, row0 + rows) of that target; tasks follow target order,
// each target's in row order.
//
// Compiled without ISA flags and defined out of line, so the per-ISA kernels
// can use it without emitting weak symbols (ops_isa.h).
#pragma once

#include <cstdint>
#include <span>

#include "kernels/ops.h"

namespace kvfork {

// Most targets one ISA-level MatMulShared call takes; ops.cc splits longer lists.
inline constexpr int kMaxMatMulTargets = 4;

class RowTasks {
 public:
  struct Task {
    const MatMulTarget* target = nullptr;
    int64_t row0 = 0;
    int64_t rows = 0;
  };

  // targets: 1..kMaxMatMulTargets entries; rows_per_task > 0.
  RowTasks(std::span<const MatMulTarget> targets, int64_t rows_per_task);

  int64_t size() const { return first_task_[count_]; }
  Task operator[](int64_t t) const;

 private:
  std::span<const MatMulTarget> targets_;
  int64_t rows_per_task_;
  int count_;
  int64_t first_task_[kMaxMatMulTargets + 1];  // first task of each target, then the total
};

// W bytes per task of a decode (few X rows) call, which streams W from DRAM.
inline constexpr int64_t kGemvTaskBytes = 768 << 10;

// W rows per decode task: about kGemvTaskBytes of consecutive rows, so each
// thread reads a long run, but at least two tasks per thread over the call's
// rows; a multiple of 8.
int64_t GemvTaskRows(std::span<const MatMulTarget> targets, int64_t elem_bytes, int threads);

}  // namespace kvfork
