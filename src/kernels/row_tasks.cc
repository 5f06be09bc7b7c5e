#include "kernels/row_tasks.h"

#include <algorithm>

#include "core/status.h"

namespace kvfork {

RowTasks::RowTasks(std::span<const MatMulTarget> targets, int64_t rows_per_task)
    : targets_(targets), rows_per_task_(rows_per_task), count_(static_cast<int>(targets.size())) {
  KVFORK_CHECK(count_ >= 1 && count_ <= kMaxMatMulTargets && rows_per_task > 0);
  first_task_[0] = 0;
  for (int i = 0; i < count_; ++i) {
    const int64_t rows = std::max<int64_t>(targets[i].w.rows, 0);
    first_task_[i + 1] = first_task_[i] + (rows + rows_per_task - 1) / rows_per_task;
  }
}

RowTasks::Task RowTasks::operator[](int64_t t) const {
  int i = 0;
  while (t >= first_task_[i + 1]) ++i;
  const MatMulTarget& target = targets_[i];
  const int64_t row0 = (t - first_task_[i]) * rows_per_task_;
  return {&target, row0, std::min(rows_per_task_, target.w.rows - row0)};
}

int64_t GemvTaskRows(std::span<const MatMulTarget> targets, int64_t elem_bytes, int threads) {
  int64_t rows = 0;
  for (const MatMulTarget& t : targets) rows += t.w.rows;
  const int64_t row_bytes = std::max<int64_t>(targets[0].w.cols * elem_bytes, 1);
  const int64_t by_bytes = kGemvTaskBytes / row_bytes;
  const int64_t by_threads = rows / (2 * int64_t{threads});
  return std::max<int64_t>(8, std::min(by_bytes, by_threads) / 8 * 8);
}

}  // namespace kvfork
