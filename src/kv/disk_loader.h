// I/O threads that read a sequence's run of disk blocks (disk_tier.h) into
// its pool blocks while the engine thread keeps stepping other sequences
// (issue 25: reads must not stall decode).
//
// The paged cache starts a load with one job per block, in chain order; the
// threads take jobs in order (the first load's first, so a run's leading
// blocks finish first) and write each block's bytes into its pool block,
// which belongs to the loading sequence alone until the load is collected.
// The engine thread polls Done(), or waits in WaitAnyDone when it has nothing
// else to run, then reads the results. A background load (the preload at
// start) is read only while no other load has a job waiting, and may call
// back when done (on_done) so an idle engine wakes for it. Cancel (a request
// cancelled or preempted while loading) skips the jobs not started and waits
// for the ones running, after which the pool blocks may be reused.
//
// Thread safety: Start / Done / Cancel / WaitAnyDone / Forget from the engine
// thread; the workers touch only the tier (thread-safe), the jobs' pool
// blocks, and the load's results under the loader's lock.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <cstddef>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <thread>
#include <vector>

#include "kv/disk_tier.h"

namespace kvfork {

// One block to read: its identity on disk and its place in the pool.
struct DiskReadJob {
  uint64_t hash = 0;
  std::optional<uint64_t> parent_hash;
  std::vector<int32_t> tokens;  // the block's token ids
  uint8_t* dst = nullptr;       // the pool block (block_bytes)
  bool partial = false;         // a partial block (hash is its DiskPartialKey)
};

// How a load is read (DiskLoader::Start).
struct DiskLoadOptions {
  // A background load (the preload at start) yields to every other: a
  // worker takes its jobs only when no other load has one waiting.
  bool background = false;
  // By default the jobs after the first that fails are skipped, not read:
  // a sequence uses its run only up to the first bad block. Independent:
  // every job is read whatever failed before it (the preload's batches
  // hold many chains, each checked on its own).
  bool independent = false;
  // Called by the worker that finishes the load's last job, without the
  // loader's lock (to wake the engine thread); not called after Cancel.
  std::function<void()> on_done;
};

// One sequence's run (or one batch of the preload). Fields under the
// loader's lock.
struct DiskLoad {
  std::vector<DiskReadJob> jobs;
  std::vector<char> ok;         // [jobs]: read and verified
  size_t next = 0;              // the next job a worker takes
  size_t finished = 0;          // jobs done, failed or skipped
  int64_t running = 0;          // jobs a worker is reading now
  bool cancelled = false;
  DiskLoadOptions options;
  size_t first_failed = SIZE_MAX;  // the first job that failed its read
  int64_t start_ns = 0;
  int64_t end_ns = 0;           // when the last job finished
  bool done() const { return finished == jobs.size() && running == 0; }
  // Jobs [0, n) all passed: the blocks the sequence may use.
  size_t LeadingOk() const;
};

class DiskLoader {
 public:
  // threads >= 1 workers reading from tier (which outlives the loader).
  DiskLoader(DiskTier* tier, size_t block_bytes, int threads);
  // Cancels every load and joins the workers.
  ~DiskLoader();
  DiskLoader(const DiskLoader&) = delete;
  DiskLoader& operator=(const DiskLoader&) = delete;

  std::shared_ptr<DiskLoad> Start(std::vector<DiskReadJob> jobs,
                                  DiskLoadOptions options = DiskLoadOptions());
  // Whether every job of load has finished (then its results are final).
  bool Done(const DiskLoad& load) const;
  // Blocks until load is done.
  void Wait(const DiskLoad& load);
  // Skips load's jobs not yet started, waits for the running ones, forgets it.
  void Cancel(const std::shared_ptr<DiskLoad>& load);
  // Forgets a done load (its results stay readable through the pointer).
  void Forget(const std::shared_ptr<DiskLoad>& load);
  // Waits until some load not yet forgotten is done, at most timeout_ms;
  // whether one is.
  bool WaitAnyDone(int64_t timeout_ms);
  int threads() const { return static_cast<int>(workers_.size()); }

 private:
  void WorkerLoop();
  // Calls a done load's on_done without the lock (lock is held on entry
  // and on return).
  void NotifyDone(const std::shared_ptr<DiskLoad>& load, std::unique_lock<std::mutex>* lock);

  DiskTier* tier_;
  size_t block_bytes_;
  mutable std::mutex mu_;
  std::condition_variable work_cv_;  // a job to take, or stopping
  std::condition_variable done_cv_;  // a job finished
  std::deque<std::shared_ptr<DiskLoad>> loads_;  // started, not forgotten; start order
  bool stop_ = false;
  std::vector<std::thread> workers_;  // last: start after the members above
};

}  // namespace kvfork
