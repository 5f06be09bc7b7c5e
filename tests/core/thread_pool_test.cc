#include "core/thread_pool.h"

#include <gtest/gtest.h>

#include <atomic>
#include <vector>

namespace kvfork {
namespace {

TEST(ThreadPool, RunsEveryTaskOnce) {
  for (int threads : {1, 2, 4}) {
    ThreadPool pool(threads);
    for (int round = 0; round < 200; ++round) {
      int n = 1 + round % 37;
      std::vector<std::atomic<int>> hits(n);
      pool.ParallelFor(n, [&](int64_t i) { hits[i].fetch_add(1); });
      for (int i = 0; i < n; ++i) ASSERT_EQ(hits[i].load(), 1) << threads << " " << round;
    }
  }
}

TEST(ThreadPool, ZeroTasksAndOneThread) {
  ThreadPool pool(1);
  int calls = 0;
  pool.ParallelFor(0, [&](int64_t) { ++calls; });
  pool.ParallelFor(5, [&](int64_t) { ++calls; });
  EXPECT_EQ(calls, 5);
  EXPECT_EQ(pool.num_threads(), 1);
}

TEST(ThreadPool, MoreThreadsThanCoresStillFinish) {
  // Oversubscribed: workers get descheduled; tasks must still all complete.
  ThreadPool pool(8);
  std::atomic<int64_t> sum{0};
  for (int round = 0; round < 50; ++round)
    pool.ParallelFor(1000, [&](int64_t i) { sum.fetch_add(i); });
  EXPECT_EQ(sum.load(), 50 * (999 * 1000 / 2));
}

}  // namespace
}  // namespace kvfork
