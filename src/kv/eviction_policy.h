// Which cached block of the prefix index goes first when the pool needs room
// (issue 25: eviction as a policy beside the reuse tree, as TensorRT-LLM's
// block manager separates them). The prefix index (prefix_index.h) owns the
// tree and says which blocks are evictable leaves; this class owns their
// order and the pins:
//
//   unpinned leaves, least recently used first (by the pool's last-use tick);
//   pinned leaves (cache control), held back until their TTL runs out (then
//   they join the LRU) or until no unpinned leaf is left (then the oldest
//   pin goes first; Next says so, the index logs it).
//
// Pin state is per block and outlives leafhood: a pinned interior block is a
// pinned leaf once its children go. O(log n) per call.
//
// Thread affinity: the engine thread (with the index).
#pragma once

#include <cstdint>
#include <functional>
#include <set>
#include <utility>
#include <vector>

#include "core/status.h"
#include "kv/block_pool.h"

namespace kvfork {

class EvictionPolicy {
 public:
  explicit EvictionPolicy(int64_t num_blocks) : blocks_(num_blocks) {}

  // The clock TTLs run on, in ms (default: steady_clock). Must not go back.
  void set_clock(std::function<int64_t()> now_ms) { now_ms_ = std::move(now_ms); }
  int64_t NowMs() const;

  // A cached leaf becomes evictable (tick: its last use) / stops being one.
  void AddLeaf(BlockId id, uint64_t tick);
  void RemoveLeaf(BlockId id);
  bool IsLeaf(BlockId id) const { return blocks_[id].leaf; }
  int64_t num_leaves() const { return static_cast<int64_t>(lru_.size() + pinned_leaves_.size()); }

  // Pins id until now + ttl_ms (a later pin extends it and is the newest).
  void Pin(BlockId id, int64_t ttl_ms);
  void Unpin(BlockId id);
  void UnpinAll();
  // Pins whose TTL ran out join the LRU.
  void ExpirePins();
  bool IsPinned(BlockId id) const { return blocks_[id].pin_until_ms > 0; }
  int64_t num_pinned() const { return static_cast<int64_t>(pins_by_expiry_.size()); }
  int64_t pinned_at_ms(BlockId id) const { return blocks_[id].pinned_at_ms; }
  int64_t pin_until_ms(BlockId id) const { return blocks_[id].pin_until_ms; }

  // The leaf to evict next (expired pins first join the LRU): the least
  // recently used unpinned leaf, else the oldest pinned one (*pinned true);
  // kNoBlock when there is no leaf. Does not remove it.
  BlockId Next(bool* pinned);

  // The block left the index: drops its leaf and pin state.
  void Forget(BlockId id);

  // Checks a block's state against the index's view (is_leaf: a cached
  // leaf; full: a full block, the only kind pinned), then (CheckTotals)
  // that the orders hold nothing else.
  Status CheckBlock(BlockId id, bool is_leaf, bool full) const;
  Status CheckTotals(int64_t leaves, int64_t pinned) const;

 private:
  struct Block {
    bool leaf = false;
    uint64_t tick = 0;          // key in lru_ while an unpinned leaf
    int64_t pin_until_ms = 0;   // 0 = not pinned; else key in pins_by_expiry_
    int64_t pinned_at_ms = 0;   // key in pinned_leaves_ while a pinned leaf
  };

  std::vector<Block> blocks_;                             // [num_blocks]
  std::set<std::pair<uint64_t, BlockId>> lru_;            // unpinned leaves by tick
  std::set<std::pair<int64_t, BlockId>> pinned_leaves_;   // pinned leaves by pin time
  std::set<std::pair<int64_t, BlockId>> pins_by_expiry_;  // every pinned block by expiry
  std::function<int64_t()> now_ms_;
};

}  // namespace kvfork
