#include "kv/prefix_index.h"

#include <algorithm>
#include <cstring>
#include <string>

#include "core/logging.h"

namespace kvfork {
namespace {

const std::vector<NodeId> kNoChildren;

}  // namespace

PrefixIndex::PrefixIndex(BlockPool* pool)
    : pool_(pool),
      block_size_(pool->layout().block_size),
      node_of_block_(pool->num_blocks(), kNoNode),
      policy_(pool->num_blocks()) {}

uint64_t PrefixIndex::ChildHash(NodeId parent, uint64_t salt_key, const int32_t* tokens,
                                int n) const {
  const uint64_t start = parent == kNoNode ? RootBlockHashSeed(salt_key) : nodes_[parent].hash;
  return ChainBlockHash(start, std::span<const int32_t>(tokens, n));
}

const std::vector<NodeId>& PrefixIndex::Children(NodeId parent, uint64_t salt_key) const {
  if (parent != kNoNode) return nodes_[parent].children;
  auto it = root_children_.find(salt_key);
  return it == root_children_.end() ? kNoChildren : it->second;
}

std::vector<NodeId>& PrefixIndex::MutableChildren(NodeId parent, uint64_t salt_key) {
  return parent != kNoNode ? nodes_[parent].children : root_children_[salt_key];
}

NodeId PrefixIndex::FindPlaced(NodeId parent, uint64_t salt_key, uint64_t hash,
                               const int32_t* tokens) const {
  auto [lo, hi] = full_by_hash_.equal_range(hash);
  for (auto it = lo; it != hi; ++it) {
    const Node& n = nodes_[it->second];
    // Verify the whole key: a hash collision must never reuse the wrong K/V.
    if (n.placed && n.parent == parent && n.salt_key == salt_key &&
        std::memcmp(n.tokens.data(), tokens, sizeof(int32_t) * block_size_) == 0)
      return it->second;
  }
  return kNoNode;
}

BlockId PrefixIndex::FindByHash(uint64_t hash, std::optional<uint64_t> parent_hash,
                                const int32_t* tokens) const {
  auto [lo, hi] = full_by_hash_.equal_range(hash);
  for (auto it = lo; it != hi; ++it) {
    const Node& n = nodes_[it->second];
    if (!n.placed || n.block == kNoBlock) continue;
    const std::optional<uint64_t> ph =
        n.parent == kNoNode ? std::nullopt : std::optional<uint64_t>(nodes_[n.parent].hash);
    if (ph == parent_hash &&
        std::memcmp(n.tokens.data(), tokens, sizeof(int32_t) * block_size_) == 0)
      return n.block;
  }
  return kNoBlock;
}

BlockId PrefixIndex::FindFull(BlockId parent, uint64_t salt_key, const int32_t* tokens) const {
  const NodeId p = parent == kNoBlock ? kNoNode : node_of_block_[parent];
  const NodeId n = FindPlaced(p, salt_key, ChildHash(p, salt_key, tokens, block_size_), tokens);
  return n == kNoNode ? kNoBlock : nodes_[n].block;
}

NodeId PrefixIndex::Follow(NodeId parent, uint64_t salt_key, uint64_t hash,
                           const int32_t* tokens) const {
  const NodeId placed = FindPlaced(parent, salt_key, hash, tokens);
  if (placed != kNoNode) return placed;
  // Known by its hash alone: the read checks hash, parent hash and tokens.
  auto [lo, hi] = full_by_hash_.equal_range(hash);
  for (auto it = lo; it != hi; ++it)
    if (!nodes_[it->second].placed) return it->second;
  return kNoNode;
}

std::pair<BlockId, int> PrefixIndex::BestPrefix(BlockId parent, uint64_t salt_key,
                                                const int32_t* tokens, int max_tokens) const {
  std::pair<BlockId, int> best{kNoBlock, 0};
  const NodeId p = parent == kNoBlock ? kNoNode : node_of_block_[parent];
  for (NodeId c : Children(p, salt_key)) {
    const Node& n = nodes_[c];
    if (n.block == kNoBlock || n.salt_key != salt_key) continue;
    int limit = std::min<int>(max_tokens, static_cast<int>(n.tokens.size()));
    int k = 0;
    while (k < limit && n.tokens[k] == tokens[k]) ++k;
    if (k > best.second) best = {n.block, k};
  }
  return best;
}

bool PrefixIndex::Covered(BlockId parent, uint64_t salt_key, std::span<const int32_t> tokens) const {
  auto [id, n] = BestPrefix(parent, salt_key, tokens.data(), static_cast<int>(tokens.size()));
  return id != kNoBlock && n == static_cast<int>(tokens.size());
}

NodeId PrefixIndex::NewNode() {
  NodeId n;
  if (!free_nodes_.empty()) {
    n = free_nodes_.back();
    free_nodes_.pop_back();
  } else {
    n = static_cast<NodeId>(nodes_.size());
    nodes_.emplace_back();
  }
  nodes_[n] = Node();
  nodes_[n].used = true;
  ++num_nodes_;
  return n;
}

void PrefixIndex::Place(NodeId n, NodeId parent, uint64_t salt_key,
                        std::span<const int32_t> tokens) {
  Node& x = nodes_[n];
  x.placed = true;
  x.parent = parent;
  x.salt_key = salt_key;
  x.tokens.assign(tokens.begin(), tokens.end());
  MutableChildren(parent, salt_key).push_back(n);
}

void PrefixIndex::Register(BlockId id, BlockId parent, uint64_t salt_key,
                           std::span<const int32_t> tokens) {
  KVFORK_CHECK_MSG(node_of_block_[id] == kNoNode, "block " + std::to_string(id) + " registered twice");
  KVFORK_CHECK(!tokens.empty() && static_cast<int>(tokens.size()) <= block_size_);
  const NodeId p = parent == kNoBlock ? kNoNode : node_of_block_[parent];
  KVFORK_CHECK(parent == kNoBlock || p != kNoNode);
  const bool full = static_cast<int>(tokens.size()) == block_size_;
  const uint64_t h = ChildHash(p, salt_key, tokens.data(), static_cast<int>(tokens.size()));
  // A full block may have a node on disk already: it gets its pool block
  // back (the same node), placed if it was known by its hash alone.
  NodeId n = full ? Follow(p, salt_key, h, tokens.data()) : kNoNode;
  if (n != kNoNode) {
    KVFORK_CHECK_MSG(nodes_[n].block == kNoBlock, "block " + std::to_string(id) +
                                                      " duplicates block " +
                                                      std::to_string(nodes_[n].block));
    if (!nodes_[n].placed) {
      --num_hash_only_;
      Place(n, p, salt_key, tokens);
    }
  } else {
    n = NewNode();
    nodes_[n].full = full;
    nodes_[n].hash = h;
    if (full) full_by_hash_.emplace(h, n);
    Place(n, p, salt_key, tokens);
  }
  Node& x = nodes_[n];
  x.block = id;
  node_of_block_[id] = n;
  ++num_registered_;
  if (full) {
    ++num_pool_full_;
    if (sink_ != nullptr) {
      KvEvent e;
      e.kind = KvEvent::Kind::kBlockStored;
      e.block_hash = x.hash;
      if (p != kNoNode) e.parent_hash = nodes_[p].hash;
      e.token_ids = x.tokens;
      sink_->Emit(std::move(e));
    }
  }
  // The parent has a pool child now, so it is no longer an evictable leaf.
  if (p != kNoNode) {
    ++nodes_[p].pool_children;
    RemoveLeaf(parent);
  }
  if (pool_->refcount(id) == 0) {
    ++num_cached_;
    MaybeAddLeaf(id);
  }
}

bool PrefixIndex::IsLeafCandidate(BlockId id) const {
  const NodeId n = node_of_block_[id];
  return n != kNoNode && nodes_[n].pool_children == 0 && pool_->refcount(id) == 0;
}

void PrefixIndex::MaybeAddLeaf(BlockId id) {
  if (policy_.IsLeaf(id) || !IsLeafCandidate(id)) return;
  policy_.AddLeaf(id, pool_->tick(id));
}

void PrefixIndex::RemoveLeaf(BlockId id) { policy_.RemoveLeaf(id); }

void PrefixIndex::Pin(BlockId id, int64_t ttl_ms) {
  KVFORK_CHECK(IsRegistered(id) && at(id).full && ttl_ms > 0);
  policy_.Pin(id, ttl_ms);
}

void PrefixIndex::OnCached(BlockId id) {
  KVFORK_CHECK(IsRegistered(id) && pool_->refcount(id) == 0);
  ++num_cached_;
  MaybeAddLeaf(id);
}

void PrefixIndex::OnReferenced(BlockId id) {
  KVFORK_CHECK(IsRegistered(id) && pool_->refcount(id) == 1);
  --num_cached_;
  RemoveLeaf(id);
}

void PrefixIndex::MakeHashOnly(NodeId root) {
  // Iteratively: a chain on disk can be as long as the tier is large.
  std::vector<NodeId> stack{root};
  while (!stack.empty()) {
    const NodeId n = stack.back();
    stack.pop_back();
    Node& x = nodes_[n];
    KVFORK_CHECK(x.placed && x.full && x.block == kNoBlock && x.on_disk);
    stack.insert(stack.end(), x.children.begin(), x.children.end());
    x.placed = false;
    x.parent = kNoNode;
    x.salt_key = 0;
    std::vector<int32_t>().swap(x.tokens);
    std::vector<NodeId>().swap(x.children);
    ++num_hash_only_;
  }
}

void PrefixIndex::RemoveNode(NodeId n) {
  Node& x = nodes_[n];
  KVFORK_CHECK(x.used && x.block == kNoBlock && !x.on_disk && x.pool_children == 0);
  // Its children (on disk only: a node with a pool block has a parent with
  // one) lose their place in the chain; their files stay, found by hash.
  std::vector<NodeId> kids;
  kids.swap(x.children);
  for (NodeId c : kids) MakeHashOnly(c);
  Node& y = nodes_[n];
  if (y.full) {
    auto [lo, hi] = full_by_hash_.equal_range(y.hash);
    for (auto it = lo; it != hi; ++it) {
      if (it->second == n) {
        full_by_hash_.erase(it);
        break;
      }
    }
  }
  if (y.placed) {
    std::vector<NodeId>& siblings = MutableChildren(y.parent, y.salt_key);
    siblings.erase(std::find(siblings.begin(), siblings.end(), n));
    if (y.parent == kNoNode && siblings.empty()) root_children_.erase(y.salt_key);
  } else {
    --num_hash_only_;
  }
  y = Node();
  free_nodes_.push_back(n);
  --num_nodes_;
}

void PrefixIndex::Unregister(BlockId id, bool announce) {
  const NodeId n = node_of_block_[id];
  KVFORK_CHECK(n != kNoNode && nodes_[n].pool_children == 0 && pool_->refcount(id) == 0);
  Node& x = nodes_[n];
  policy_.Forget(id);
  if (x.full) {
    --num_pool_full_;
    if (announce && sink_ != nullptr) {
      KvEvent e;
      e.kind = KvEvent::Kind::kBlockRemoved;
      e.block_hash = x.hash;
      sink_->Emit(std::move(e));
    }
  }
  x.block = kNoBlock;
  node_of_block_[id] = kNoNode;
  --num_registered_;
  --num_cached_;
  const NodeId parent = x.parent;
  if (parent != kNoNode) --nodes_[parent].pool_children;
  // On disk: the node stays, its copy there (reading it back gives it a
  // pool block again).
  if (!x.on_disk) RemoveNode(n);
  if (parent != kNoNode) MaybeAddLeaf(nodes_[parent].block);
}

void PrefixIndex::OnDiskStored(uint64_t hash, std::optional<uint64_t> parent_hash,
                               std::span<const int32_t> tokens) {
  if (static_cast<int>(tokens.size()) != block_size_) return;  // full blocks only
  NodeId target = kNoNode;
  auto [lo, hi] = full_by_hash_.equal_range(hash);
  for (auto it = lo; it != hi; ++it) {
    const Node& n = nodes_[it->second];
    if (n.on_disk) return;  // the tier has one file per hash: known already
    if (!n.placed) {
      target = it->second;
    } else {
      const std::optional<uint64_t> ph =
          n.parent == kNoNode ? std::nullopt : std::optional<uint64_t>(nodes_[n.parent].hash);
      if (ph == parent_hash && std::equal(tokens.begin(), tokens.end(), n.tokens.begin()))
        target = it->second;
    }
  }
  if (target != kNoNode) {
    nodes_[target].on_disk = true;
    ++num_on_disk_;
    return;
  }
  // A new node: under its parent when the index holds that one placed (its
  // salt is the parent's); a first block's salt is not in its file, and a
  // parent known by hash alone has no place to give: hash-only then.
  NodeId p = kNoNode;
  if (parent_hash.has_value() && ChainBlockHash(*parent_hash, tokens) == hash) {
    auto [plo, phi] = full_by_hash_.equal_range(*parent_hash);
    for (auto it = plo; it != phi && p == kNoNode; ++it)
      if (nodes_[it->second].placed) p = it->second;
  }
  const NodeId n = NewNode();
  nodes_[n].full = true;
  nodes_[n].hash = hash;
  nodes_[n].on_disk = true;
  ++num_on_disk_;
  full_by_hash_.emplace(hash, n);
  if (p != kNoNode && FindPlaced(p, nodes_[p].salt_key, hash, tokens.data()) == kNoNode) {
    Place(n, p, nodes_[p].salt_key, tokens);
  } else {
    ++num_hash_only_;
  }
}

void PrefixIndex::OnDiskFound(uint64_t hash) {
  auto [lo, hi] = full_by_hash_.equal_range(hash);
  for (auto it = lo; it != hi; ++it) {
    Node& n = nodes_[it->second];
    if (n.on_disk) return;
    // The tier names a block by its hash: a node with that hash is the file.
    n.on_disk = true;
    ++num_on_disk_;
    return;
  }
  const NodeId n = NewNode();
  nodes_[n].full = true;
  nodes_[n].hash = hash;
  nodes_[n].on_disk = true;
  ++num_on_disk_;
  ++num_hash_only_;
  full_by_hash_.emplace(hash, n);
}

void PrefixIndex::OnDiskRemoved(uint64_t hash) {
  auto [lo, hi] = full_by_hash_.equal_range(hash);
  for (auto it = lo; it != hi; ++it) {
    const NodeId n = it->second;
    if (!nodes_[n].on_disk) continue;
    nodes_[n].on_disk = false;
    --num_on_disk_;
    if (nodes_[n].block == kNoBlock) RemoveNode(n);  // invalidates it: done
    return;
  }
}

BlockId PrefixIndex::PopLru() {
  bool pinned = false;
  const BlockId id = policy_.Next(&pinned);
  if (id == kNoBlock) return kNoBlock;
  if (pinned) {
    const int64_t now = policy_.NowMs();
    KVFORK_LOG(kWarn) << "KV cache: evicting pinned block " << at(id).hash << " (pinned "
                      << (now - policy_.pinned_at_ms(id)) / 1000 << " s ago, "
                      << (policy_.pin_until_ms(id) - now) / 1000
                      << " s of its TTL left): no unpinned block is left to evict; "
                      << policy_.num_pinned() << " blocks pinned";
  }
  if (eviction_hook_) eviction_hook_(id);
  Unregister(id);
  return id;
}

void PrefixIndex::Evict(BlockId id) { Unregister(id); }

std::vector<BlockId> PrefixIndex::ClearCachedSilently() {
  std::vector<BlockId> out;
  UnpinAll();
  bool pinned = false;
  for (BlockId id = policy_.Next(&pinned); id != kNoBlock; id = policy_.Next(&pinned)) {
    Unregister(id, /*announce=*/false);
    out.push_back(id);
  }
  return out;
}

bool PrefixIndex::NoneReferenced() const {
  for (BlockId id = 0; id < static_cast<BlockId>(node_of_block_.size()); ++id)
    if (node_of_block_[id] != kNoNode && pool_->refcount(id) > 0) return false;
  return true;
}

std::vector<uint64_t> PrefixIndex::FullBlockHashes() const {
  std::vector<uint64_t> out;
  out.reserve(static_cast<size_t>(num_pool_full_));
  for (NodeId n : node_of_block_)
    if (n != kNoNode && nodes_[n].full) out.push_back(nodes_[n].hash);
  return out;
}

std::vector<BlockId> PrefixIndex::RedundantPartials(BlockId parent, uint64_t salt_key,
                                                    std::span<const int32_t> tokens) const {
  std::vector<BlockId> out;
  const NodeId p = parent == kNoBlock ? kNoNode : node_of_block_[parent];
  for (NodeId c : Children(p, salt_key)) {
    const Node& n = nodes_[c];
    if (n.block == kNoBlock || n.full || n.tokens.size() >= tokens.size() ||
        !IsLeafCandidate(n.block))
      continue;
    if (std::equal(n.tokens.begin(), n.tokens.end(), tokens.begin())) out.push_back(n.block);
  }
  return out;
}

void PrefixIndex::SnapshotTree(int64_t max_nodes, PrefixTreeSnapshot* out) const {
  out->num_registered = num_registered_;
  // The tree: every node but those on disk known by hash alone, which have
  // no place in it yet (they are counted, not listed).
  out->num_nodes = num_nodes_ - num_hash_only_;
  out->num_hash_only = num_hash_only_;
  out->num_salts = static_cast<int64_t>(root_children_.size()) - (root_children_.count(0) ? 1 : 0);
  // Salt keys in a fixed order so two snapshots list roots alike; the key
  // itself never leaves the index.
  std::vector<uint64_t> salts;
  salts.reserve(root_children_.size());
  for (const auto& [salt, kids] : root_children_) salts.push_back(salt);
  std::sort(salts.begin(), salts.end());
  std::vector<PrefixTreeNode>& nodes = out->nodes;
  nodes.clear();
  auto add = [&](NodeId id) {
    if (static_cast<int64_t>(nodes.size()) >= max_nodes) return false;
    const Node& n = nodes_[id];
    PrefixTreeNode t;
    t.id = id;
    t.parent = n.parent;
    t.num_tokens = n.placed ? static_cast<int32_t>(n.tokens.size()) : block_size_;
    t.in_pool = n.block != kNoBlock;
    t.on_disk = n.on_disk;
    if (t.in_pool) {
      t.refcount = pool_->refcount(n.block);
      t.last_use = pool_->tick(n.block);
    }
    nodes.push_back(t);
    return true;
  };
  bool complete = true;
  for (uint64_t salt : salts)
    for (NodeId id : root_children_.at(salt)) complete = complete && add(id);
  // Breadth-first: nodes doubles as the queue.
  for (size_t i = 0; complete && i < nodes.size(); ++i)
    for (NodeId c : nodes_[nodes[i].id].children) complete = complete && add(c);
  out->truncated = static_cast<int64_t>(nodes.size()) < out->num_nodes;
}

Status PrefixIndex::Check() const {
  int64_t registered = 0, cached = 0, leaves = 0, pinned = 0, pool_full = 0;
  int64_t live = 0, on_disk = 0, hash_only = 0;
  size_t full = 0;
  for (NodeId id = 0; id < static_cast<NodeId>(nodes_.size()); ++id) {
    const Node& n = nodes_[id];
    auto b = [id] { return "node " + std::to_string(id); };
    if (!n.used) {
      if (n.block != kNoBlock || !n.children.empty())
        return InternalError(b() + ": free but linked");
      continue;
    }
    ++live;
    if (n.block == kNoBlock && !n.on_disk)
      return InternalError(b() + ": neither a pool block nor a disk location");
    on_disk += n.on_disk;
    if (n.full) ++full;
    int64_t by_hash = 0;
    auto [lo, hi] = full_by_hash_.equal_range(n.hash);
    for (auto it = lo; it != hi; ++it) {
      by_hash += it->second == id;
      if (it->second != id && n.on_disk && nodes_[it->second].on_disk)
        return InternalError(b() + ": two nodes on disk under one hash");
    }
    if (by_hash != (n.full ? 1 : 0))
      return InternalError(b() + ": found " + std::to_string(by_hash) + " times by its hash");
    if (!n.placed) {
      if (!n.full || !n.on_disk || n.block != kNoBlock || n.parent != kNoNode ||
          !n.children.empty() || !n.tokens.empty())
        return InternalError(b() + ": hash-only but not a full block on disk alone");
      ++hash_only;
      continue;
    }
    if (n.full != (static_cast<int>(n.tokens.size()) == block_size_))
      return InternalError(b() + ": full flag disagrees with its token count");
    if (n.parent != kNoNode) {
      const Node& p = nodes_[n.parent];
      if (!p.used || !p.placed) return InternalError(b() + ": parent not a placed node");
      if (!p.full) return InternalError(b() + ": parent is a partial block");
      if (n.block != kNoBlock && p.block == kNoBlock)
        return InternalError(b() + ": in the pool, its parent is not");
    }
    const std::vector<NodeId>& sib = Children(n.parent, n.salt_key);
    if (std::count(sib.begin(), sib.end(), id) != 1)
      return InternalError(b() + ": not exactly once among its parent's children");
    if (n.hash !=
        ChildHash(n.parent, n.salt_key, n.tokens.data(), static_cast<int>(n.tokens.size())))
      return InternalError(b() + ": stale hash");
    if (n.full && FindPlaced(n.parent, n.salt_key, n.hash, n.tokens.data()) != id)
      return InternalError(b() + ": full node not found by its key (duplicate or missing)");
    int32_t pool_kids = 0;
    for (NodeId c : n.children) {
      if (!nodes_[c].used || !nodes_[c].placed || nodes_[c].parent != id)
        return InternalError(b() + ": child " + std::to_string(c) + " does not point back");
      const BlockId cb = nodes_[c].block;
      pool_kids += cb != kNoBlock;
      // A referenced child pins its whole chain: its table holds the parent.
      if (cb != kNoBlock && pool_->refcount(cb) > 0 && pool_->refcount(n.block) == 0)
        return InternalError(b() + ": cached parent of referenced child " + std::to_string(c));
    }
    if (pool_kids != n.pool_children)
      return InternalError(b() + ": " + std::to_string(n.pool_children) +
                           " pool children counted, " + std::to_string(pool_kids) + " found");
    if (n.block == kNoBlock) continue;
    if (n.block < 0 || n.block >= static_cast<BlockId>(node_of_block_.size()) ||
        node_of_block_[n.block] != id)
      return InternalError(b() + ": pool block " + std::to_string(n.block) +
                           " does not map back to it");
    ++registered;
    pool_full += n.full;
    if (pool_->IsFree(n.block)) return InternalError(b() + ": registered and free");
    if (pool_->refcount(n.block) == 0) ++cached;
    const bool leaf = IsLeafCandidate(n.block);
    KVFORK_RETURN_IF_ERROR(policy_.CheckBlock(n.block, leaf, n.full));
    leaves += leaf;
    pinned += policy_.IsPinned(n.block);
  }
  for (BlockId blk = 0; blk < static_cast<BlockId>(node_of_block_.size()); ++blk) {
    const NodeId n = node_of_block_[blk];
    if (n == kNoNode) {
      if (policy_.IsLeaf(blk) || policy_.IsPinned(blk))
        return InternalError("block " + std::to_string(blk) + ": unregistered but linked");
      continue;
    }
    if (n < 0 || n >= static_cast<NodeId>(nodes_.size()) || !nodes_[n].used ||
        nodes_[n].block != blk)
      return InternalError("block " + std::to_string(blk) + ": its node " + std::to_string(n) +
                           " does not hold it");
  }
  if (live != num_nodes_ || live + static_cast<int64_t>(free_nodes_.size()) !=
                                static_cast<int64_t>(nodes_.size()))
    return InternalError("node count " + std::to_string(num_nodes_) + " but " +
                         std::to_string(live) + " live nodes");
  if (on_disk != num_on_disk_ || hash_only != num_hash_only_)
    return InternalError("disk counts disagree with the nodes");
  if (cached != num_cached_)
    return InternalError("cached count " + std::to_string(num_cached_) + " but " +
                         std::to_string(cached) + " cached blocks");
  if (registered != num_registered_ || pool_full != num_pool_full_)
    return InternalError("registered count " + std::to_string(num_registered_) + " but " +
                         std::to_string(registered) + " registered blocks");
  KVFORK_RETURN_IF_ERROR(policy_.CheckTotals(leaves, pinned));
  if (full != full_by_hash_.size()) return InternalError("hash map has stale entries");
  for (const auto& [salt, kids] : root_children_) {
    if (kids.empty()) return InternalError("empty root entry kept");
    for (NodeId c : kids) {
      if (!nodes_[c].used || !nodes_[c].placed || nodes_[c].parent != kNoNode ||
          nodes_[c].salt_key != salt)
        return InternalError("root child " + std::to_string(c) + " is stale");
    }
  }
  return OkStatus();
}

}  // namespace kvfork
