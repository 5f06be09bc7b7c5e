// A bounded copy of the prefix index's tree, for the cache view of the web
// page (GET /v1/cache/tree). It carries structure and state only: no token
// ids and no salt, so it shows how prefixes are shared without showing what
// they say or whose they are (salts appear only as a count).
//
// Taken on the engine thread between two steps (Engine::SnapshotPrefixTree);
// the copy is then read on any thread. Cost: O(nodes returned + roots).
#pragma once

#include <cstdint>
#include <vector>

namespace kvfork {

struct PrefixTreeNode {
  int32_t id = -1;         // the node id (stable while the node lives)
  int32_t parent = -1;     // parent node id; -1 = a root (first block of a prompt)
  int32_t num_tokens = 0;  // block_size for a full block, fewer for a partial tail
  int32_t refcount = 0;    // sequences holding it now; 0 = cached or not in the pool
  uint64_t last_use = 0;   // the pool's use tick when it was last touched (LRU order)
  // Where its K/V is: the pool, the disk tier, or both (never neither).
  bool in_pool = false;
  bool on_disk = false;
};

struct PrefixTreeSnapshot {
  bool has_tree = false;  // false for the dense backend, which keeps no prefix tree
  int block_size = 0;
  int64_t blocks_total = 0;
  int64_t blocks_free = 0;
  int64_t blocks_used = 0;     // referenced by running sequences (registered or not)
  int64_t blocks_cached = 0;   // refcount 0, registered, evictable
  int64_t num_registered = 0;  // nodes with a pool block
  int64_t num_nodes = 0;       // nodes in the tree (nodes.size() when not truncated)
  // Blocks on disk known by their hash alone (a restart's files not read
  // yet): nodes of the index with no place in the tree, so not in nodes.
  int64_t num_hash_only = 0;
  int64_t num_salts = 0;       // distinct non-empty cache salts that have root blocks
  uint64_t clock = 0;          // the pool's use tick now: last_use is at most this
  bool truncated = false;      // more than the requested cap: nodes is a prefix of the BFS
  // Breadth-first from the roots (every parent before its children), so a
  // truncated snapshot keeps the shallow, most shared part of the tree.
  std::vector<PrefixTreeNode> nodes;
};

}  // namespace kvfork
