// The prefix index of the paged KV cache: a trie whose edges are blocks.
//
// A registered block is keyed by (parent block, its token ids, cache salt).
// Full blocks (block_size tokens) are found in O(1) through their stable
// chained hash (block_hash.h): hash(parent) or the salt's seed, then the
// token ids. A hash is only a hint: every hit compares parent, salt and token
// ids, so a collision of block hashes can never hand out the wrong K/V.
//
// Events: with a sink set, every full block registered is announced
// (BlockStored) and every full block unregistered (BlockRemoved), in order;
// ClearCachedSilently lets the cache announce a reset as AllBlocksCleared.
//
// A salt is known by its 64-bit hash (SaltKeyOf; "" is 0), not by an
// interned string: nothing is kept per salt but its root entry, which goes
// when its last root block does, so a stream of distinct salts costs no
// memory beyond their blocks (interning kept every salt forever). Two salts
// share prefixes only if their 64-bit hashes are equal: for a tenant who
// does not know another's salt (the server prefixes an API key's salt),
// a 2^-64 guess. Partial blocks (a finished sequence's
// last block) are registered as children too but are never shared in place;
// a prompt reuses them by copying the matched tokens (copy-on-write tail).
//
// Eviction: the index keeps the cached leaves (refcount 0, no registered
// children) ordered by last-use tick; PopLru removes the oldest in O(log n),
// and its parent becomes a leaf candidate when its last child goes.
// Referenced blocks are never in that order, so they are never evicted.
// The order is the eviction policy's (eviction_policy.h): the tree says
// which blocks are evictable leaves, the policy which goes first.
// Pins (cache control, issue 25): a pinned full block is evicted only after
// its TTL (on the index's clock), or when no unpinned leaf is left; then the
// oldest pin goes first and the log says so.
// The eviction hook (set_eviction_hook) sees each block PopLru is about to
// drop while it is still registered: the disk tier (disk_tier.h) copies full
// ones out there. Resets and redundant partial blocks do not call it.
//
// Thread affinity: the engine thread. Memory: O(registered blocks * block_size).
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <set>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "core/status.h"
#include "kv/block_hash.h"
#include "kv/block_pool.h"
#include "kv/eviction_policy.h"
#include "kv/kv_events.h"
#include "kv/prefix_tree.h"

namespace kvfork {

class PrefixIndex {
 public:
  // The pool provides refcounts and ticks; it must outlive the index.
  explicit PrefixIndex(BlockPool* pool);

  // The key of a salt: 0 for "", a 64-bit hash of its bytes otherwise
  // (never 0). Stable across runs and processes.
  static uint64_t SaltKeyOf(std::string_view salt) { return kvfork::SaltKeyOf(salt); }
  // Distinct salts with root blocks now: all the per-salt state the index
  // keeps (the interned-string table it replaced grew with every salt).
  int64_t num_salts() const { return static_cast<int64_t>(root_children_.size()); }

  // The registered full child of parent (kNoBlock = root) under salt whose
  // tokens equal tokens[0, block_size), or kNoBlock.
  BlockId FindFull(BlockId parent, uint64_t salt_key, const int32_t* tokens) const;
  // The registered full block named hash whose parent's hash is parent_hash
  // (none: a first block) and whose tokens are tokens[0, block_size), or
  // kNoBlock. For a caller that knows a block by its stable hash, not its
  // parent's id (the preload at start: the parent may be one a request
  // registered meanwhile). O(blocks with that hash).
  BlockId FindByHash(uint64_t hash, std::optional<uint64_t> parent_hash,
                     const int32_t* tokens) const;
  // Among parent's registered children (full or partial), the one sharing the
  // longest run of leading tokens with tokens[0, max_tokens); {kNoBlock, 0}
  // if none shares a token.
  std::pair<BlockId, int> BestPrefix(BlockId parent, uint64_t salt_key, const int32_t* tokens,
                                     int max_tokens) const;
  // True if some child of parent already holds tokens as its leading tokens.
  bool Covered(BlockId parent, uint64_t salt_key, std::span<const int32_t> tokens) const;

  // Registers a referenced or cached block as a child of parent (which must be
  // registered, or kNoBlock). tokens.size() in [1, block_size]; a full block
  // must not duplicate an existing one (FindFull first).
  void Register(BlockId id, BlockId parent, uint64_t salt_key, std::span<const int32_t> tokens);
  bool IsRegistered(BlockId id) const { return nodes_[id].registered; }
  bool IsFull(BlockId id) const { return nodes_[id].full; }
  BlockId parent(BlockId id) const { return nodes_[id].parent; }
  uint64_t salt_key(BlockId id) const { return nodes_[id].salt_key; }
  // The stable hash of a registered block (block_hash.h).
  uint64_t hash(BlockId id) const { return nodes_[id].hash; }
  // The parent's stable hash, none for a first block.
  std::optional<uint64_t> parent_hash(BlockId id) const {
    BlockId p = nodes_[id].parent;
    return p == kNoBlock ? std::nullopt : std::optional<uint64_t>(nodes_[p].hash);
  }
  // Hashes of every registered full block (referenced or cached), in block id
  // order: the set the KV events describe. Cost O(blocks).
  std::vector<uint64_t> FullBlockHashes() const;
  int64_t num_registered_full() const { return static_cast<int64_t>(full_by_hash_.size()); }

  // Called by PopLru with the victim before it is unregistered (its hash,
  // parent and tokens still readable, its pool bytes intact); empty = none.
  void set_eviction_hook(std::function<void(BlockId)> hook) { eviction_hook_ = std::move(hook); }

  // Where events go (nullptr = nowhere); the sink must outlive the index.
  void set_event_sink(KvEventSink* sink) { sink_ = sink; }
  // Unregisters every cached leaf, repeatedly, like PopLru until empty, but
  // announces nothing; returns the blocks for the caller to free. The caller
  // announces the reset (AllBlocksCleared when nothing stays registered).
  std::vector<BlockId> ClearCachedSilently();
  // True when no registered block is referenced (so clearing the cached ones
  // empties the index). Cost O(blocks).
  bool NoneReferenced() const;
  std::span<const int32_t> tokens(BlockId id) const { return nodes_[id].tokens; }

  // State changes of a registered block reported by the cache:
  // refcount went to 0 (it becomes cached; the caller touched its tick) ...
  void OnCached(BlockId id);
  // ... or a cached block got a reference (leaves the LRU).
  void OnReferenced(BlockId id);

  int64_t num_cached() const { return num_cached_; }
  int64_t num_registered() const { return num_registered_; }
  int64_t num_evictable_leaves() const { return policy_.num_leaves(); }

  // Unregisters the least recently used cached leaf and returns it (the caller
  // frees it), or kNoBlock when there is none. Unpinned leaves (and pins past
  // their TTL) go first; only when none is left, the oldest pinned leaf
  // (logged).
  BlockId PopLru();

  // Pins a registered full block until now + ttl_ms (a later pin of the same
  // block extends it and counts as the newest pin). ttl_ms > 0.
  void Pin(BlockId id, int64_t ttl_ms);
  // Drops every pin (a cache reset). Cost O(pins).
  void UnpinAll() { policy_.UnpinAll(); }
  // Moves pins whose TTL has run out back to plain LRU order. O(expired log n).
  void ExpirePins() { policy_.ExpirePins(); }
  // Registered blocks pinned now (expired pins count until ExpirePins).
  int64_t num_pinned() const { return policy_.num_pinned(); }
  bool IsPinned(BlockId id) const { return policy_.IsPinned(id); }
  // The clock pins are measured on, in ms (default: steady_clock); tests set
  // a fake one. Must not go backwards.
  void set_clock(std::function<int64_t()> now_ms) { policy_.set_clock(std::move(now_ms)); }
  // Unregisters a specific cached leaf (a redundant partial block).
  void Evict(BlockId id);
  // Partial cached leaf children of parent whose tokens are a strict prefix of
  // tokens (made redundant by a longer block).
  std::vector<BlockId> RedundantPartials(BlockId parent, uint64_t salt_key,
                                         std::span<const int32_t> tokens) const;

  // Fills out->nodes with at most max_nodes registered blocks, breadth-first
  // from the roots (the unsalted ones first), and num_registered, num_salts,
  // truncated. Cost O(returned nodes + salts).
  void SnapshotTree(int64_t max_nodes, PrefixTreeSnapshot* out) const;

  // Consistency of the trie, hash map, leaf order and cached count with the
  // pool's refcounts. Cost O(blocks).
  Status Check() const;

 private:
  struct Node {
    bool registered = false;
    bool full = false;
    BlockId parent = kNoBlock;
    uint64_t salt_key = 0;
    uint64_t hash = 0;
    std::vector<int32_t> tokens;
    std::vector<BlockId> children;
  };

  uint64_t ChildHash(BlockId parent, uint64_t salt_key, const int32_t* tokens, int n) const;
  const std::vector<BlockId>& Children(BlockId parent, uint64_t salt_key) const;
  std::vector<BlockId>& MutableChildren(BlockId parent, uint64_t salt_key);
  bool IsLeafCandidate(BlockId id) const;
  void MaybeAddLeaf(BlockId id);
  void RemoveLeaf(BlockId id);
  void Unregister(BlockId id, bool announce = true);

  BlockPool* pool_;
  int block_size_;
  std::vector<Node> nodes_;                                      // [num_blocks]
  // By salt key; an entry is erased with its last child.
  std::unordered_map<uint64_t, std::vector<BlockId>> root_children_;
  std::unordered_multimap<uint64_t, BlockId> full_by_hash_;
  EvictionPolicy policy_;  // the order of the cached leaves, and the pins
  int64_t num_cached_ = 0;
  KvEventSink* sink_ = nullptr;
  int64_t num_registered_ = 0;
  std::function<void(BlockId)> eviction_hook_;
};

}  // namespace kvfork
