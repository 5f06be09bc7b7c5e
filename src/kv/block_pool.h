// The memory of the paged KV cache: num_blocks blocks of layout.BlockBytes()
// each, in one anonymous mapping reserved up front (MAP_NORESERVE, so pages
// are touched lazily as blocks are first written), plus per-block refcount,
// a free list and a last-use tick.
//
// The pool knows nothing of prefixes: a block with refcount 0 that is not on
// the free list is "cached", and the prefix index (prefix_index.h) decides
// when it goes back to the free list.
//
// Thread affinity: one thread (the engine thread). Every operation is O(1).
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "core/status.h"
#include "kernels/kv_layout.h"

namespace kvfork {

using BlockId = int32_t;
inline constexpr BlockId kNoBlock = -1;

class BlockPool {
 public:
  // Maps num_blocks * layout.BlockBytes() bytes; ResourceExhausted if the
  // mapping fails (the message gives the size). A layout of 0 layers (an
  // empty layer group) maps nothing: its blocks are ids only and Data() is
  // nullptr.
  static StatusOr<std::unique_ptr<BlockPool>> Create(const KvLayout& layout, int64_t num_blocks);
  ~BlockPool();
  BlockPool(const BlockPool&) = delete;
  BlockPool& operator=(const BlockPool&) = delete;

  const KvLayout& layout() const { return layout_; }
  int64_t num_blocks() const { return num_blocks_; }
  int64_t num_free() const { return static_cast<int64_t>(free_list_.size()); }
  size_t block_bytes() const { return block_bytes_; }

  // nullptr for blocks of 0 bytes (no arithmetic on the null base).
  uint8_t* Data(BlockId id) const {
    return base_ == nullptr ? nullptr : base_ + static_cast<size_t>(id) * block_bytes_;
  }

  // Pops a free block with refcount 1; CHECK-fails when the free list is
  // empty (callers check num_free() first so allocation is all-or-nothing).
  BlockId Allocate();
  // Back on the free list; refcount must be 0.
  void Free(BlockId id);
  bool IsFree(BlockId id) const { return is_free_[id] != 0; }
  // The free list holds each free block exactly once, and only those.
  Status CheckFreeList() const;

  int32_t refcount(BlockId id) const { return refcount_[id]; }
  void AddRef(BlockId id) { ++refcount_[id]; }
  // Returns the refcount after the decrement.
  int32_t DecRef(BlockId id);

  // A global use counter; Touch stamps the block with the next value (LRU).
  uint64_t Touch(BlockId id) { return ticks_[id] = ++clock_; }
  uint64_t tick(BlockId id) const { return ticks_[id]; }
  uint64_t clock() const { return clock_; }  // the last tick handed out

 private:
  BlockPool(const KvLayout& layout, int64_t num_blocks, uint8_t* base, size_t map_bytes);

  KvLayout layout_;
  int64_t num_blocks_;
  size_t block_bytes_;
  uint8_t* base_;  // owned mapping of map_bytes_
  size_t map_bytes_;
  std::vector<BlockId> free_list_;  // LIFO: recently freed (warm) blocks first
  std::vector<uint8_t> is_free_;    // [num_blocks]
  std::vector<int32_t> refcount_;   // [num_blocks]
  std::vector<uint64_t> ticks_;     // [num_blocks]
  uint64_t clock_ = 0;
};

// Copies K/V (and int8 or q4 scales) of token slots [start, start + n) of every
// (layer, K/V, head) plane from block src to block dst, same positions.
// Cost: O(n * layers * kv_heads * head_dim) bytes.
void CopyBlockTokens(const KvLayout& layout, const uint8_t* src, uint8_t* dst, int start, int n);

}  // namespace kvfork
