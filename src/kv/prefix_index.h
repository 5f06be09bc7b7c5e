// The prefix index of the paged KV cache: a trie whose edges are blocks.
//
// A registered block is keyed by (parent block, its token ids, cache salt).
// Full blocks (block_size tokens) are found in O(1) through a chained hash:
// hash(block) = Mix(hash(parent) or the salt's seed, token ids). A hash is
// only a hint: every hit compares parent, salt and token ids, so a collision
// can never hand out the wrong K/V. Partial blocks (a finished sequence's
// last block) are registered as children too but are never shared in place;
// a prompt reuses them by copying the matched tokens (copy-on-write tail).
//
// Eviction: the index keeps the cached leaves (refcount 0, no registered
// children) ordered by last-use tick; PopLru removes the oldest in O(log n),
// and its parent becomes a leaf candidate when its last child goes.
// Referenced blocks are never in that order, so they are never evicted.
//
// Thread affinity: the engine thread. Memory: O(registered blocks * block_size).
#pragma once

#include <cstdint>
#include <set>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "core/status.h"
#include "kv/block_pool.h"

namespace kvfork {

class PrefixIndex {
 public:
  // The pool provides refcounts and ticks; it must outlive the index.
  explicit PrefixIndex(BlockPool* pool);

  // Salt ids: interned strings; salt "" is id 0. Find returns -1 if unseen.
  int InternSalt(std::string_view salt);
  int FindSalt(std::string_view salt) const;

  // The registered full child of parent (kNoBlock = root) under salt whose
  // tokens equal tokens[0, block_size), or kNoBlock.
  BlockId FindFull(BlockId parent, int salt_id, const int32_t* tokens) const;
  // Among parent's registered children (full or partial), the one sharing the
  // longest run of leading tokens with tokens[0, max_tokens); {kNoBlock, 0}
  // if none shares a token.
  std::pair<BlockId, int> BestPrefix(BlockId parent, int salt_id, const int32_t* tokens,
                                     int max_tokens) const;
  // True if some child of parent already holds tokens as its leading tokens.
  bool Covered(BlockId parent, int salt_id, std::span<const int32_t> tokens) const;

  // Registers a referenced or cached block as a child of parent (which must be
  // registered, or kNoBlock). tokens.size() in [1, block_size]; a full block
  // must not duplicate an existing one (FindFull first).
  void Register(BlockId id, BlockId parent, int salt_id, std::span<const int32_t> tokens);
  bool IsRegistered(BlockId id) const { return nodes_[id].registered; }
  bool IsFull(BlockId id) const { return nodes_[id].full; }
  BlockId parent(BlockId id) const { return nodes_[id].parent; }
  int salt_id(BlockId id) const { return nodes_[id].salt_id; }
  std::span<const int32_t> tokens(BlockId id) const { return nodes_[id].tokens; }

  // State changes of a registered block reported by the cache:
  // refcount went to 0 (it becomes cached; the caller touched its tick) ...
  void OnCached(BlockId id);
  // ... or a cached block got a reference (leaves the LRU).
  void OnReferenced(BlockId id);

  int64_t num_cached() const { return num_cached_; }
  int64_t num_evictable_leaves() const { return static_cast<int64_t>(lru_.size()); }

  // Unregisters the least recently used cached leaf and returns it (the caller
  // frees it), or kNoBlock when there is none.
  BlockId PopLru();
  // Unregisters a specific cached leaf (a redundant partial block).
  void Evict(BlockId id);
  // Partial cached leaf children of parent whose tokens are a strict prefix of
  // tokens (made redundant by a longer block).
  std::vector<BlockId> RedundantPartials(BlockId parent, int salt_id,
                                         std::span<const int32_t> tokens) const;

  // Consistency of the trie, hash map, leaf order and cached count with the
  // pool's refcounts. Cost O(blocks).
  Status Check() const;

 private:
  struct Node {
    bool registered = false;
    bool full = false;
    bool in_lru = false;
    BlockId parent = kNoBlock;
    int salt_id = 0;
    uint64_t hash = 0;
    uint64_t lru_tick = 0;  // key in lru_ while in_lru
    std::vector<int32_t> tokens;
    std::vector<BlockId> children;
  };

  uint64_t ChildHash(BlockId parent, int salt_id, const int32_t* tokens, int n) const;
  const std::vector<BlockId>& Children(BlockId parent, int salt_id) const;
  std::vector<BlockId>& MutableChildren(BlockId parent, int salt_id);
  bool IsLeafCandidate(BlockId id) const;
  void MaybeAddLeaf(BlockId id);
  void RemoveLeaf(BlockId id);
  void Unregister(BlockId id);

  BlockPool* pool_;
  int block_size_;
  std::vector<Node> nodes_;                                      // [num_blocks]
  std::unordered_map<int, std::vector<BlockId>> root_children_;  // by salt id
  std::unordered_multimap<uint64_t, BlockId> full_by_hash_;
  std::set<std::pair<uint64_t, BlockId>> lru_;  // cached leaves by tick
  std::unordered_map<std::string, int> salt_ids_;
  int64_t num_cached_ = 0;
};

}  // namespace kvfork
