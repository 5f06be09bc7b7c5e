// One sliding-window layer group of the paged KV cache (issue 24): its own
// pool of blocks that hold K/V of the group's layers only, and which of them
// belong to a node of the prefix index.
//
// Blocks here attach to the pool blocks of the prefix index's nodes (the
// global group's blocks in the paged cache's primary pool; "node" below is
// that block id): each is the identity of one block of positions (its
// chained hash, its place in the trie). A node's pool block may have a block
// of this group attached (Attach): the same positions' K/V for the sliding
// layers. When the node loses its pool block (evicted; a node may live on
// with a disk location only, prefix_index.h), OnNodeGone detaches it: the
// disk tier holds no sliding group, so that K/V is gone with it. A node
// can exist without one: a running sequence gives back the blocks no future
// query of the window can see, and this group evicts its cached blocks on
// its own (LRU), so a cached chain may have holes here. The cache reuses a
// prefix only where every group holds what its first new query needs
// (docs/kv_cache.md, "Sliding windows").
//
// A block here is exactly one of: free, referenced (refcount = the sequence
// tables holding it), or cached (refcount 0, attached to a node, in the LRU).
//
// Thread affinity: the engine thread. Cost: O(1) per operation, O(log n)
// where the LRU changes.
#pragma once

#include <cstdint>
#include <memory>
#include <set>
#include <span>
#include <utility>
#include <vector>

#include "core/status.h"
#include "kernels/kv_group.h"
#include "kv/block_pool.h"
#include "kv/prefix_index.h"

namespace kvfork {

class SlidingKvGroup {
 public:
  // num_blocks of group.layout (group.window > 0, at least one layer);
  // num_nodes = the primary pool's block count ("node" ids here are the
  // nodes' primary pool blocks, not PrefixIndex's NodeIds).
  static StatusOr<std::unique_ptr<SlidingKvGroup>> Create(const KvGroup& group, int64_t num_blocks,
                                                          int64_t num_nodes);

  const KvLayout& layout() const { return pool_->layout(); }
  int64_t window() const { return window_; }
  const BlockPool& pool() const { return *pool_; }
  uint8_t* Data(BlockId id) const { return pool_->Data(id); }
  // The table entry of a block given back: a zeroed block outside the pool.
  // Attention never reads it (it lies before every query's window).
  uint8_t* hole() const { return hole_.get(); }

  // The first block a query at position pos, or any later one, can see.
  int64_t FirstVisibleBlock(int64_t pos) const;

  int64_t num_free() const { return pool_->num_free(); }
  int64_t num_cached() const { return static_cast<int64_t>(lru_.size()); }
  int64_t num_used() const { return pool_->num_blocks() - num_free() - num_cached(); }
  // Blocks Take can still hand out: free + cached.
  int64_t Available() const { return num_free() + num_cached(); }
  int64_t evictions() const { return evictions_; }
  // Evictions of a pinned prefix's block (every cached block was pinned).
  int64_t pinned_evictions() const { return pinned_evictions_; }

  // A block with refcount 1: a free one, else the least recently cached one
  // (detached from its node) whose node index has not pinned; a pinned one
  // only when every cached block is (counted, logged). So a pinned prefix
  // keeps every window it can be reused at (cache control, issue 25). Cost:
  // O(pinned cached blocks skipped). The caller has checked Available() > 0.
  BlockId Take(const PrefixIndex& index);
  // A table's reference; a cached block leaves the LRU.
  void Ref(BlockId id);
  // Drops a table's reference; at 0 the block is cached if attached, else free.
  void Unref(BlockId id);

  // The block attached to a node of the prefix index, or kNoBlock.
  BlockId AttachedTo(BlockId node) const { return attached_[node]; }
  // Attaches a referenced block that has no node to a node that has no block.
  void Attach(BlockId node, BlockId id);
  // The node left the prefix index: its block, if any, is detached, and
  // freed if cached.
  void OnNodeGone(BlockId node);
  // Frees every cached block (a cache reset); referenced ones stay.
  void DropCached();

  // Invariants: each block in exactly one state, refcount == holders[b]
  // (the tables holding it), attachments both ways and only to registered
  // nodes of index, the LRU holding exactly the cached blocks. O(blocks).
  Status Check(std::span<const int32_t> holders, const PrefixIndex& index) const;

 private:
  SlidingKvGroup(int64_t window, std::unique_ptr<BlockPool> pool, int64_t num_nodes);
  void Detach(BlockId id);

  int64_t window_;
  std::unique_ptr<BlockPool> pool_;
  std::unique_ptr<uint8_t[]> hole_;             // [layout().BlockBytes()] zeros
  std::vector<BlockId> attached_;               // [num_nodes]: node -> block here, or kNoBlock
  std::vector<BlockId> node_of_;                // [num_blocks]: block -> its node, or kNoBlock
  std::set<std::pair<uint64_t, BlockId>> lru_;  // cached blocks by (tick when cached, id)
  int64_t evictions_ = 0;
  int64_t pinned_evictions_ = 0;
};

}  // namespace kvfork
