// The prefix index of the paged KV cache: a trie of cached blocks whose
// nodes are found by their stable chained hash (block_hash.h), each with an
// optional pool block and an optional disk location (issue 25).
//
// A node (NodeId, its own id: not a pool slot) is one block of a prompt:
// (parent node, cache salt, token ids), its hash, and where its K/V is:
//   pool: a BlockId (node_of_block_ maps back): shared in place;
//   disk: the tier holds a file named by its hash (disk_tier.h owns the
//         file: bytes, LRU, the writer); nothing else is kept here.
// A node with neither location goes. Full blocks are found in O(1) through
// their hash; a hash is only a hint: a hit compares parent, salt and token
// ids, so a collision of block hashes can never hand out the wrong K/V.
//
// Placed and hash-only nodes: a node normally knows its parent, salt and
// tokens (placed). A block on disk whose parent the index does not hold
// (the files a restart's scan found, a chain whose write finished after its
// pool blocks went, the disk children of a node that lost both locations)
// is kept by its hash alone (hash-only: no parent, no tokens, no children).
// The planner's walk computes each block's chained hash from the prompt and
// takes a hash-only node on that hash; the read checks the file's hash,
// parent hash and tokens, so that costs nothing in safety, and a restart's
// first request reads every block on disk without a header read first.
// Reading it back places it (Register attaches the pool block and the
// identity). Invariants (Check): a node with a pool block has a parent with
// one (a referenced block holds its chain; eviction takes leaves); placed
// nodes only hang under placed nodes; a node whose parent goes (neither
// location) becomes hash-only with its subtree, which keeps the chain on
// disk reachable by hash once the missing block is computed again.
//
// Events: with a sink set, a full block that gets a pool block is announced
// (BlockStored, GPU) and one that loses it (BlockRemoved), in order, exactly
// as when a node was its pool slot; the disk side is the tier's change log
// (PagedKvCache turns it into medium=DISK events). ClearCachedSilently lets
// the cache announce a reset as AllBlocksCleared.
//
// A salt is known by its 64-bit hash (SaltKeyOf; "" is 0), not by an
// interned string: nothing is kept per salt but its root entry, which goes
// when its last root node does, so a stream of distinct salts costs no
// memory beyond their blocks. Two salts share prefixes only if their 64-bit
// hashes are equal: for a tenant who does not know another's salt (the
// server prefixes an API key's salt), a 2^-64 guess. Partial blocks (a
// finished sequence's last block) are registered as children too (pool
// only: the tier keeps its partial files itself, DiskTier::BestPartial) but
// are never shared in place; a prompt reuses them by copying the matched
// tokens (copy-on-write tail).
//
// Eviction (of pool blocks): the index keeps the cached leaves (refcount 0,
// no child with a pool block) ordered by last-use tick; PopLru takes the
// oldest pool block in O(log n) (its node stays if it is on disk), and its
// parent becomes a leaf candidate when its last pool child goes. Referenced
// blocks are never in that order, so they are never evicted.
// The order is the eviction policy's (eviction_policy.h): the tree says
// which blocks are evictable leaves, the policy which goes first.
// Pins (cache control, issue 25): a pinned full block is evicted only after
// its TTL (on the index's clock), or when no unpinned leaf is left; then the
// oldest pin goes first and the log says so.
// The eviction hook (set_eviction_hook) sees each block PopLru is about to
// drop while it is still registered: the disk tier (disk_tier.h) copies full
// ones out there. Resets and redundant partial blocks do not call it.
//
// The API below speaks of pool blocks (BlockId) where the cache's tables do,
// and of nodes where the planner walks the tree (Follow, node_*).
// Thread affinity: the engine thread (the tier's changes reach it through
// OnDiskStored / OnDiskRemoved, applied there). Memory: O(nodes * block_size)
// for placed nodes, O(1) for a hash-only one.
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

using NodeId = int32_t;
inline constexpr NodeId kNoNode = -1;

class PrefixIndex {
 public:
  // The pool provides refcounts and ticks; it must outlive the index.
  explicit PrefixIndex(BlockPool* pool);

  // The key of a salt: 0 for "", a 64-bit hash of its bytes otherwise
  // (never 0). Stable across runs and processes.
  static uint64_t SaltKeyOf(std::string_view salt) { return kvfork::SaltKeyOf(salt); }
  // Distinct salts with root nodes now: all the per-salt state the index
  // keeps (the interned-string table it replaced grew with every salt).
  int64_t num_salts() const { return static_cast<int64_t>(root_children_.size()); }

  // The full child of parent (kNoBlock = root) under salt whose tokens
  // equal tokens[0, block_size) and that has a pool block: that block, or
  // kNoBlock (none, or one on disk only).
  BlockId FindFull(BlockId parent, uint64_t salt_key, const int32_t* tokens) const;
  // The pool block of the full node named hash whose parent's hash is
  // parent_hash (none: a first block) and whose tokens are tokens[0,
  // block_size), or kNoBlock. For a caller that knows a block by its stable
  // hash, not its parent's id (the preload at start: the parent may be one
  // a request registered meanwhile). O(nodes with that hash).
  BlockId FindByHash(uint64_t hash, std::optional<uint64_t> parent_hash,
                     const int32_t* tokens) const;
  // The planner's step: the full node after parent (kNoNode = root) for the
  // block named hash with tokens[0, block_size) under salt: the placed
  // child with that key, else a hash-only node on disk named hash; kNoNode
  // when neither exists. O(nodes with that hash).
  NodeId Follow(NodeId parent, uint64_t salt_key, uint64_t hash, const int32_t* tokens) const;
  // A node's locations (Follow's answers).
  BlockId node_block(NodeId n) const { return nodes_[n].block; }
  bool node_on_disk(NodeId n) const { return nodes_[n].on_disk; }
  uint64_t node_hash(NodeId n) const { return nodes_[n].hash; }
  // The node of a pool block, or kNoNode when the block is not registered.
  NodeId node_of_block(BlockId id) const { return node_of_block_[id]; }
  // Among parent's children with a pool block (full or partial), the one
  // sharing the longest run of leading tokens with tokens[0, max_tokens);
  // {kNoBlock, 0} if none shares a token.
  std::pair<BlockId, int> BestPrefix(BlockId parent, uint64_t salt_key, const int32_t* tokens,
                                     int max_tokens) const;
  // True if some child of parent with a pool block already holds tokens as
  // its leading tokens.
  bool Covered(BlockId parent, uint64_t salt_key, std::span<const int32_t> tokens) const;

  // Gives a referenced or cached pool block its node as a child of parent
  // (which must be registered, or kNoBlock): the node already there for
  // this key on disk only (placed, or hash-only under this hash: it is
  // placed now), else a new one. tokens.size() in [1, block_size]; a full
  // block must not duplicate one in the pool (FindFull first).
  void Register(BlockId id, BlockId parent, uint64_t salt_key, std::span<const int32_t> tokens);
  bool IsRegistered(BlockId id) const { return node_of_block_[id] != kNoNode; }
  bool IsFull(BlockId id) const { return at(id).full; }
  // The parent's pool block (a node with a pool block has a parent with one).
  BlockId parent(BlockId id) const {
    const NodeId p = at(id).parent;
    return p == kNoNode ? kNoBlock : nodes_[p].block;
  }
  uint64_t salt_key(BlockId id) const { return at(id).salt_key; }
  // The stable hash of a registered block (block_hash.h).
  uint64_t hash(BlockId id) const { return at(id).hash; }
  // The parent's stable hash, none for a first block.
  std::optional<uint64_t> parent_hash(BlockId id) const {
    const NodeId p = at(id).parent;
    return p == kNoNode ? std::nullopt : std::optional<uint64_t>(nodes_[p].hash);
  }
  // Whether the tier holds a registered block's copy (as the index knows it).
  bool OnDisk(BlockId id) const { return at(id).on_disk; }
  // Hashes of every full node with a pool block (referenced or cached), in
  // block id order: the set the KV events describe (GPU). Cost O(blocks).
  std::vector<uint64_t> FullBlockHashes() const;
  int64_t num_registered_full() const { return num_pool_full_; }

  // The disk tier's changes (its change log, applied on the engine thread):
  // a full block's file was written or found by a header read (identity
  // known) ...
  void OnDiskStored(uint64_t hash, std::optional<uint64_t> parent_hash,
                    std::span<const int32_t> tokens);
  // ... or found by the start-up scan (hash alone) ...
  void OnDiskFound(uint64_t hash);
  // ... or is gone (LRU, corrupt, another process evicted it).
  void OnDiskRemoved(uint64_t hash);
  // Nodes now: with a pool block, on disk, hash-only (of those on disk).
  int64_t num_nodes() const { return num_nodes_; }
  int64_t num_on_disk() const { return num_on_disk_; }
  int64_t num_hash_only() const { return num_hash_only_; }

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
  // empties the pool side). Cost O(blocks).
  bool NoneReferenced() const;
  std::span<const int32_t> tokens(BlockId id) const { return at(id).tokens; }

  // State changes of a registered block reported by the cache:
  // refcount went to 0 (it becomes cached; the caller touched its tick) ...
  void OnCached(BlockId id);
  // ... or a cached block got a reference (leaves the LRU).
  void OnReferenced(BlockId id);

  int64_t num_cached() const { return num_cached_; }
  // Pool blocks with a node.
  int64_t num_registered() const { return num_registered_; }
  int64_t num_evictable_leaves() const { return policy_.num_leaves(); }

  // Unregisters the least recently used cached leaf's pool block and
  // returns it (the caller frees it), or kNoBlock when there is none. Its
  // node stays when it is on disk. Unpinned leaves (and pins past their
  // TTL) go first; only when none is left, the oldest pinned leaf (logged).
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

  // Fills out->nodes with at most max_nodes nodes, breadth-first from the
  // roots (the unsalted ones first), then the hash-only ones, and
  // num_registered, num_nodes, num_salts, truncated. Cost O(returned nodes +
  // salts).
  void SnapshotTree(int64_t max_nodes, PrefixTreeSnapshot* out) const;

  // Consistency of the trie, its locations (every node has one; pool block
  // <-> node both ways), the hash map, leaf order and cached count with the
  // pool's refcounts. Cost O(nodes).
  Status Check() const;

 private:
  struct Node {
    bool used = false;    // a live node (else on the free list)
    bool placed = false;  // parent, salt and tokens known (else hash-only)
    bool full = false;
    bool on_disk = false;
    BlockId block = kNoBlock;
    NodeId parent = kNoNode;
    uint64_t salt_key = 0;
    uint64_t hash = 0;
    int32_t pool_children = 0;  // children with a pool block
    std::vector<int32_t> tokens;
    std::vector<NodeId> children;
  };

  const Node& at(BlockId id) const { return nodes_[node_of_block_[id]]; }
  uint64_t ChildHash(NodeId parent, uint64_t salt_key, const int32_t* tokens, int n) const;
  const std::vector<NodeId>& Children(NodeId parent, uint64_t salt_key) const;
  std::vector<NodeId>& MutableChildren(NodeId parent, uint64_t salt_key);
  NodeId FindPlaced(NodeId parent, uint64_t salt_key, uint64_t hash, const int32_t* tokens) const;
  NodeId NewNode();
  void Place(NodeId n, NodeId parent, uint64_t salt_key, std::span<const int32_t> tokens);
  void AttachBlock(NodeId n, BlockId id);
  // Removes a node with neither location (and no pool children): its
  // children become hash-only, with their subtrees.
  void RemoveNode(NodeId n);
  void MakeHashOnly(NodeId n);
  bool IsLeafCandidate(BlockId id) const;
  void MaybeAddLeaf(BlockId id);
  void RemoveLeaf(BlockId id);
  void Unregister(BlockId id, bool announce = true);

  BlockPool* pool_;
  int block_size_;
  std::vector<Node> nodes_;            // by NodeId; grows, slots reused
  std::vector<NodeId> free_nodes_;
  std::vector<NodeId> node_of_block_;  // [num_blocks]
  // By salt key; an entry is erased with its last child.
  std::unordered_map<uint64_t, std::vector<NodeId>> root_children_;
  std::unordered_multimap<uint64_t, NodeId> full_by_hash_;  // every full node
  EvictionPolicy policy_;  // the order of the cached leaves, and the pins
  int64_t num_cached_ = 0;
  KvEventSink* sink_ = nullptr;
  int64_t num_registered_ = 0;
  int64_t num_pool_full_ = 0;
  int64_t num_nodes_ = 0;
  int64_t num_on_disk_ = 0;
  int64_t num_hash_only_ = 0;
  std::function<void(BlockId)> eviction_hook_;
};

}  // namespace kvfork
