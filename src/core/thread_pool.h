// Compute thread pool used only inside kernels; passed explicitly, never global.
//
// ParallelFor hands out tasks by an atomic counter and the calling thread takes
// part, so a worker that the OS deschedules delays only the one task it holds,
// never a whole step behind a barrier. Idle workers spin briefly (work usually
// follows within microseconds during a forward pass) and then sleep on a
// condition variable, so a pool never burns a core another process needs.
// Which thread runs a task never changes what the task computes: kernels keep
// one reduction order per output element (DESIGN.md invariant 1).
//
// Thread affinity: ParallelFor may be called from one thread at a time.
#pragma once

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <thread>
#include <vector>

namespace kvfork {

class ThreadPool {
 public:
  // num_threads counts the calling thread: 1 means no workers at all.
  explicit ThreadPool(int num_threads);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int num_threads() const { return num_threads_; }

  // Runs fn(task) for every task in [0, num_tasks); returns when all are done.
  template <typename Fn>
  void ParallelFor(int64_t num_tasks, const Fn& fn) {
    if (num_tasks <= 0) return;
    if (num_threads_ == 1 || num_tasks == 1) {
      for (int64_t i = 0; i < num_tasks; ++i) fn(i);
      return;
    }
    Run(num_tasks, &fn, [](const void* ctx, int64_t i) { (*static_cast<const Fn*>(ctx))(i); });
  }

  // Runs fn(r0, r1) over row ranges covering [0, rows): split across the pool
  // when there are many rows (prefill), inline otherwise (decode, where a sync
  // would cost more than the work). For row-wise ops that compute each row
  // alone, so the split changes no bits.
  template <typename Fn>
  void ParallelForRows(int64_t rows, const Fn& fn) {
    constexpr int64_t kMinRowsPerTask = 16;
    const int64_t tasks = std::min<int64_t>(rows / kMinRowsPerTask, 4 * int64_t{num_threads_});
    if (tasks < 2) {
      fn(int64_t{0}, rows);
      return;
    }
    ParallelFor(tasks, [&](int64_t t) { fn(rows * t / tasks, rows * (t + 1) / tasks); });
  }

  // Default thread count: the cores this process may run on.
  static int DefaultThreads();

 private:
  using TaskFn = void (*)(const void* ctx, int64_t task);
  void Run(int64_t num_tasks, const void* ctx, TaskFn fn);
  void WorkerLoop();
  void DrainTasks();

  const int num_threads_;
  std::vector<std::thread> workers_;

  // The current job. next_task_ packs (job id << 32 | next task index) so a
  // worker that wakes late for a finished job fails its claim instead of
  // running a task of the next one; the job fields are rewritten only after
  // every task of the previous job is done.
  std::atomic<const void*> job_ctx_{nullptr};
  std::atomic<TaskFn> job_fn_{nullptr};
  std::atomic<int64_t> job_tasks_{0};
  std::atomic<uint64_t> next_task_{0};
  std::atomic<int64_t> tasks_done_{0};
  uint32_t job_id_ = 0;
  std::atomic<uint64_t> generation_{0};
  std::atomic<int> sleepers_{0};
  std::atomic<bool> stop_{false};
  std::mutex mu_;
  std::condition_variable cv_;
};

}  // namespace kvfork
