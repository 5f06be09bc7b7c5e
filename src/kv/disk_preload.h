// Which disk blocks to read into the pool when a server starts (issue 25,
// docs/kv_cache.md "Preload at start"): the ones the last clean shutdown or
// eviction wrote last, so the next turn of a conversation finds its prefix
// in RAM instead of reading it while the user waits.
//
// PlanDiskPreload walks the tier's files newest first (the tier's LRU order:
// at start, the files' mtime; the partial tail blocks a shutdown wrote come
// first) and takes each with the chain of full blocks above it, reading
// headers (one small read per file, never a payload) for the identities a
// read checks: parent hash and token ids. Only whole chains are taken (a
// block whose parent is neither taken nor on disk is useless), in chain
// order (every block after its parent), until the next chain would pass
// max_blocks. A chain is taken only if every block's name is the chained
// hash of its parent and tokens and its first block is unsalted: the files
// do not hold the salt, and an unsalted root is the one whose hash the
// planner can check (salted chains still load on request). A header that
// fails its checks is counted and deleted by the tier (ReadIdentity).
//
// DiskPreloadPlanner runs that on its own thread, so the server starts and
// answers while the headers are read; the engine thread takes the plan
// once ready() and does the reads (paged_kv_cache.h: StepBackground).
//
// Thread safety: PlanDiskPreload on any thread (the tier is thread-safe);
// a planner's methods from one thread (the engine's); on_ready is called
// from the planner's thread.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <optional>
#include <thread>
#include <vector>

#include "kv/disk_tier.h"

namespace kvfork {

// One block to preload, from its file's header.
struct PreloadBlock {
  uint64_t hash = 0;  // a full block's chained hash, or a partial block's key
  std::optional<uint64_t> parent_hash;  // none: a first block (unsalted)
  std::vector<int32_t> tokens;
  bool partial = false;
};

// Whole chains, newest first, each in chain order, at most max_blocks in
// all; stops early (returning what it has) once stop is set.
std::vector<PreloadBlock> PlanDiskPreload(DiskTier& tier, int block_size, int64_t max_blocks,
                                          const std::atomic<bool>& stop);

class DiskPreloadPlanner {
 public:
  // Starts the thread; on_ready (may be empty) is called when the plan is.
  DiskPreloadPlanner(DiskTier* tier, int block_size, int64_t max_blocks,
                     std::function<void()> on_ready);
  // Stops the planning (after the header being read) and joins.
  ~DiskPreloadPlanner();
  DiskPreloadPlanner(const DiskPreloadPlanner&) = delete;
  DiskPreloadPlanner& operator=(const DiskPreloadPlanner&) = delete;

  bool ready() const { return ready_.load(); }
  // The plan; call once, after ready().
  std::vector<PreloadBlock> Take();

 private:
  std::atomic<bool> stop_{false};
  std::atomic<bool> ready_{false};
  std::vector<PreloadBlock> plan_;  // written by the thread before ready_
  std::thread thread_;              // last: starts after the members above
};

}  // namespace kvfork
