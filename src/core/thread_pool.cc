#include "core/thread_pool.h"

#include <sched.h>

#include <chrono>

#include "core/status.h"

namespace kvfork {
namespace {

inline void CpuRelax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#endif
}

// ~50 µs of spinning before a worker sleeps: long enough to bridge the gap
// between kernels of one forward pass, short enough not to steal a core.
constexpr int kSpinIterations = 20000;

}  // namespace

int ThreadPool::DefaultThreads() {
  cpu_set_t set;
  if (sched_getaffinity(0, sizeof(set), &set) == 0) {
    int n = CPU_COUNT(&set);
    if (n > 0) return n;
  }
  unsigned n = std::thread::hardware_concurrency();
  return n == 0 ? 1 : static_cast<int>(n);
}

ThreadPool::ThreadPool(int num_threads) : num_threads_(num_threads < 1 ? 1 : num_threads) {
  workers_.reserve(num_threads_ - 1);
  for (int i = 1; i < num_threads_; ++i) workers_.emplace_back([this] { WorkerLoop(); });
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_.store(true);
    generation_.fetch_add(1, std::memory_order_release);
  }
  cv_.notify_all();
  for (auto& t : workers_) t.join();
}

void ThreadPool::DrainTasks() {
  uint64_t v = next_task_.load(std::memory_order_acquire);
  for (;;) {
    int64_t index = static_cast<int64_t>(v & 0xffffffffu);
    if (index >= job_tasks_.load(std::memory_order_acquire)) return;
    if (!next_task_.compare_exchange_weak(v, v + 1, std::memory_order_acq_rel,
                                          std::memory_order_acquire)) {
      continue;  // v now holds the current value (maybe of a newer job)
    }
    job_fn_.load(std::memory_order_relaxed)(job_ctx_.load(std::memory_order_relaxed), index);
    tasks_done_.fetch_add(1, std::memory_order_acq_rel);
    v = next_task_.load(std::memory_order_acquire);
  }
}

void ThreadPool::Run(int64_t num_tasks, const void* ctx, TaskFn fn) {
  KVFORK_CHECK(num_tasks < (int64_t{1} << 32));
  // Order matters: job_tasks_ is 0 between jobs, and is raised only after the
  // new job id is in next_task_, so a stale claim always fails its CAS.
  job_ctx_.store(ctx, std::memory_order_relaxed);
  job_fn_.store(fn, std::memory_order_relaxed);
  tasks_done_.store(0, std::memory_order_relaxed);
  ++job_id_;
  next_task_.store(static_cast<uint64_t>(job_id_) << 32, std::memory_order_release);
  job_tasks_.store(num_tasks, std::memory_order_release);
  {
    // The lock orders the publish against a worker deciding to sleep.
    std::lock_guard<std::mutex> lock(mu_);
    generation_.fetch_add(1, std::memory_order_release);
  }
  if (sleepers_.load(std::memory_order_acquire) > 0) cv_.notify_all();
  DrainTasks();
  int spins = 0;
  while (tasks_done_.load(std::memory_order_acquire) < num_tasks) {
    if (++spins < kSpinIterations) {
      CpuRelax();
    } else {
      std::this_thread::yield();  // a worker holding a task was descheduled
    }
  }
  job_tasks_.store(0, std::memory_order_release);
}

void ThreadPool::WorkerLoop() {
  uint64_t seen = 0;
  for (;;) {
    uint64_t gen = generation_.load(std::memory_order_acquire);
    int spins = 0;
    while (gen == seen && spins < kSpinIterations) {
      CpuRelax();
      ++spins;
      gen = generation_.load(std::memory_order_acquire);
    }
    if (gen == seen) {
      std::unique_lock<std::mutex> lock(mu_);
      sleepers_.fetch_add(1, std::memory_order_acq_rel);
      cv_.wait(lock, [&] { return generation_.load(std::memory_order_acquire) != seen; });
      sleepers_.fetch_sub(1, std::memory_order_acq_rel);
      gen = generation_.load(std::memory_order_acquire);
    }
    seen = gen;
    if (stop_.load(std::memory_order_acquire)) return;
    DrainTasks();
  }
}

}  // namespace kvfork
