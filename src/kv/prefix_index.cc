#include "kv/prefix_index.h"

#include <algorithm>
#include <cstring>
#include <string>

#include "core/logging.h"

namespace kvfork {
namespace {

const std::vector<BlockId> kNoChildren;

}  // namespace

PrefixIndex::PrefixIndex(BlockPool* pool)
    : pool_(pool),
      block_size_(pool->layout().block_size),
      nodes_(pool->num_blocks()),
      policy_(pool->num_blocks()) {}

uint64_t PrefixIndex::ChildHash(BlockId parent, uint64_t salt_key, const int32_t* tokens, int n) const {
  const uint64_t start = parent == kNoBlock ? RootBlockHashSeed(salt_key) : nodes_[parent].hash;
  return ChainBlockHash(start, std::span<const int32_t>(tokens, n));
}

const std::vector<BlockId>& PrefixIndex::Children(BlockId parent, uint64_t salt_key) const {
  if (parent != kNoBlock) return nodes_[parent].children;
  auto it = root_children_.find(salt_key);
  return it == root_children_.end() ? kNoChildren : it->second;
}

std::vector<BlockId>& PrefixIndex::MutableChildren(BlockId parent, uint64_t salt_key) {
  return parent != kNoBlock ? nodes_[parent].children : root_children_[salt_key];
}

BlockId PrefixIndex::FindByHash(uint64_t hash, std::optional<uint64_t> parent_hash,
                               const int32_t* tokens) const {
  auto [lo, hi] = full_by_hash_.equal_range(hash);
  for (auto it = lo; it != hi; ++it) {
    const Node& n = nodes_[it->second];
    const std::optional<uint64_t> ph =
        n.parent == kNoBlock ? std::nullopt : std::optional<uint64_t>(nodes_[n.parent].hash);
    if (n.full && ph == parent_hash &&
        std::memcmp(n.tokens.data(), tokens, sizeof(int32_t) * block_size_) == 0)
      return it->second;
  }
  return kNoBlock;
}

BlockId PrefixIndex::FindFull(BlockId parent, uint64_t salt_key, const int32_t* tokens) const {
  uint64_t h = ChildHash(parent, salt_key, tokens, block_size_);
  auto [lo, hi] = full_by_hash_.equal_range(h);
  for (auto it = lo; it != hi; ++it) {
    const Node& n = nodes_[it->second];
    // Verify the whole key: a hash collision must never reuse the wrong K/V.
    if (n.parent == parent && n.salt_key == salt_key && n.full &&
        std::memcmp(n.tokens.data(), tokens, sizeof(int32_t) * block_size_) == 0) {
      return it->second;
    }
  }
  return kNoBlock;
}

std::pair<BlockId, int> PrefixIndex::BestPrefix(BlockId parent, uint64_t salt_key, const int32_t* tokens,
                                                int max_tokens) const {
  std::pair<BlockId, int> best{kNoBlock, 0};
  for (BlockId c : Children(parent, salt_key)) {
    const Node& n = nodes_[c];
    if (n.salt_key != salt_key) continue;
    int limit = std::min<int>(max_tokens, static_cast<int>(n.tokens.size()));
    int k = 0;
    while (k < limit && n.tokens[k] == tokens[k]) ++k;
    if (k > best.second) best = {c, k};
  }
  return best;
}

bool PrefixIndex::Covered(BlockId parent, uint64_t salt_key, std::span<const int32_t> tokens) const {
  auto [id, n] = BestPrefix(parent, salt_key, tokens.data(), static_cast<int>(tokens.size()));
  return id != kNoBlock && n == static_cast<int>(tokens.size());
}

void PrefixIndex::Register(BlockId id, BlockId parent, uint64_t salt_key,
                           std::span<const int32_t> tokens) {
  Node& n = nodes_[id];
  KVFORK_CHECK_MSG(!n.registered, "block " + std::to_string(id) + " registered twice");
  KVFORK_CHECK(!tokens.empty() && static_cast<int>(tokens.size()) <= block_size_);
  KVFORK_CHECK(parent == kNoBlock || nodes_[parent].registered);
  n.registered = true;
  ++num_registered_;
  n.full = static_cast<int>(tokens.size()) == block_size_;
  n.parent = parent;
  n.salt_key = salt_key;
  n.tokens.assign(tokens.begin(), tokens.end());
  n.children.clear();
  n.hash = ChildHash(parent, salt_key, tokens.data(), static_cast<int>(tokens.size()));
  if (n.full) {
    full_by_hash_.emplace(n.hash, id);
    if (sink_ != nullptr) {
      KvEvent e;
      e.kind = KvEvent::Kind::kBlockStored;
      e.block_hash = n.hash;
      if (parent != kNoBlock) e.parent_hash = nodes_[parent].hash;
      e.token_ids = n.tokens;
      sink_->Emit(std::move(e));
    }
  }
  MutableChildren(parent, salt_key).push_back(id);
  // The parent has a child now, so it is no longer an evictable leaf.
  if (parent != kNoBlock) RemoveLeaf(parent);
  if (pool_->refcount(id) == 0) {
    ++num_cached_;
    MaybeAddLeaf(id);
  }
}

bool PrefixIndex::IsLeafCandidate(BlockId id) const {
  const Node& n = nodes_[id];
  return n.registered && n.children.empty() && pool_->refcount(id) == 0;
}

void PrefixIndex::MaybeAddLeaf(BlockId id) {
  if (policy_.IsLeaf(id) || !IsLeafCandidate(id)) return;
  policy_.AddLeaf(id, pool_->tick(id));
}

void PrefixIndex::RemoveLeaf(BlockId id) { policy_.RemoveLeaf(id); }

void PrefixIndex::Pin(BlockId id, int64_t ttl_ms) {
  const Node& n = nodes_[id];
  KVFORK_CHECK(n.registered && n.full && ttl_ms > 0);
  policy_.Pin(id, ttl_ms);
}

void PrefixIndex::OnCached(BlockId id) {
  KVFORK_CHECK(nodes_[id].registered && pool_->refcount(id) == 0);
  ++num_cached_;
  MaybeAddLeaf(id);
}

void PrefixIndex::OnReferenced(BlockId id) {
  KVFORK_CHECK(nodes_[id].registered && pool_->refcount(id) == 1);
  --num_cached_;
  RemoveLeaf(id);
}

void PrefixIndex::Unregister(BlockId id, bool announce) {
  Node& n = nodes_[id];
  KVFORK_CHECK(n.registered && n.children.empty() && pool_->refcount(id) == 0);
  policy_.Forget(id);
  if (n.full) {
    auto [lo, hi] = full_by_hash_.equal_range(n.hash);
    for (auto it = lo; it != hi; ++it) {
      if (it->second == id) {
        full_by_hash_.erase(it);
        break;
      }
    }
    if (announce && sink_ != nullptr) {
      KvEvent e;
      e.kind = KvEvent::Kind::kBlockRemoved;
      e.block_hash = n.hash;
      sink_->Emit(std::move(e));
    }
  }
  std::vector<BlockId>& siblings = MutableChildren(n.parent, n.salt_key);
  siblings.erase(std::find(siblings.begin(), siblings.end(), id));
  if (n.parent == kNoBlock && siblings.empty()) root_children_.erase(n.salt_key);
  BlockId parent = n.parent;
  n = Node();
  --num_registered_;
  --num_cached_;
  if (parent != kNoBlock) MaybeAddLeaf(parent);
}

BlockId PrefixIndex::PopLru() {
  bool pinned = false;
  const BlockId id = policy_.Next(&pinned);
  if (id == kNoBlock) return kNoBlock;
  if (pinned) {
    const int64_t now = policy_.NowMs();
    KVFORK_LOG(kWarn) << "KV cache: evicting pinned block " << nodes_[id].hash << " (pinned "
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
  for (BlockId id = 0; id < static_cast<BlockId>(nodes_.size()); ++id)
    if (nodes_[id].registered && pool_->refcount(id) > 0) return false;
  return true;
}

std::vector<uint64_t> PrefixIndex::FullBlockHashes() const {
  std::vector<uint64_t> out;
  out.reserve(full_by_hash_.size());
  for (const Node& n : nodes_)
    if (n.registered && n.full) out.push_back(n.hash);
  return out;
}

std::vector<BlockId> PrefixIndex::RedundantPartials(BlockId parent, uint64_t salt_key,
                                                    std::span<const int32_t> tokens) const {
  std::vector<BlockId> out;
  for (BlockId c : Children(parent, salt_key)) {
    const Node& n = nodes_[c];
    if (n.full || n.tokens.size() >= tokens.size() || !IsLeafCandidate(c)) continue;
    if (std::equal(n.tokens.begin(), n.tokens.end(), tokens.begin())) out.push_back(c);
  }
  return out;
}

void PrefixIndex::SnapshotTree(int64_t max_nodes, PrefixTreeSnapshot* out) const {
  out->num_registered = num_registered_;
  out->num_salts = static_cast<int64_t>(root_children_.size()) - (root_children_.count(0) ? 1 : 0);
  // Salt keys in a fixed order so two snapshots list roots alike; the key
  // itself never leaves the index.
  std::vector<uint64_t> salts;
  salts.reserve(root_children_.size());
  for (const auto& [salt, kids] : root_children_) salts.push_back(salt);
  std::sort(salts.begin(), salts.end());
  std::vector<PrefixTreeNode>& nodes = out->nodes;
  nodes.clear();
  auto add = [&](BlockId id) {
    if (static_cast<int64_t>(nodes.size()) >= max_nodes) return false;
    const Node& n = nodes_[id];
    nodes.push_back(PrefixTreeNode{id, n.parent, static_cast<int32_t>(n.tokens.size()),
                                   pool_->refcount(id), pool_->tick(id)});
    return true;
  };
  bool complete = true;
  for (uint64_t salt : salts)
    for (BlockId id : root_children_.at(salt)) complete = complete && add(id);
  // Breadth-first: nodes doubles as the queue.
  for (size_t i = 0; complete && i < nodes.size(); ++i)
    for (BlockId c : nodes_[nodes[i].id].children) complete = complete && add(c);
  out->truncated = static_cast<int64_t>(nodes.size()) < num_registered_;
}

Status PrefixIndex::Check() const {
  int64_t registered = 0;
  int64_t cached = 0;
  int64_t leaves = 0;
  size_t full = 0;
  int64_t pinned = 0;
  for (BlockId id = 0; id < static_cast<BlockId>(nodes_.size()); ++id) {
    const Node& n = nodes_[id];
    auto b = [id] { return "block " + std::to_string(id); };
    if (!n.registered) {
      if (policy_.IsLeaf(id) || policy_.IsPinned(id) || !n.children.empty())
        return InternalError(b() + ": unregistered but linked");
      continue;
    }
    ++registered;
    if (pool_->IsFree(id)) return InternalError(b() + ": registered and free");
    if (pool_->refcount(id) == 0) ++cached;
    if (n.full) ++full;
    if (n.full != (static_cast<int>(n.tokens.size()) == block_size_))
      return InternalError(b() + ": full flag disagrees with its token count");
    if (n.parent != kNoBlock && !nodes_[n.parent].registered)
      return InternalError(b() + ": parent " + std::to_string(n.parent) + " not registered");
    if (n.parent != kNoBlock && !nodes_[n.parent].full)
      return InternalError(b() + ": parent is a partial block");
    const std::vector<BlockId>& sib = Children(n.parent, n.salt_key);
    if (std::count(sib.begin(), sib.end(), id) != 1)
      return InternalError(b() + ": not exactly once among its parent's children");
    if (n.hash !=
        ChildHash(n.parent, n.salt_key, n.tokens.data(), static_cast<int>(n.tokens.size())))
      return InternalError(b() + ": stale hash");
    if (n.full && FindFull(n.parent, n.salt_key, n.tokens.data()) != id)
      return InternalError(b() + ": full block not found by its key (duplicate or missing)");
    for (BlockId c : n.children) {
      if (!nodes_[c].registered || nodes_[c].parent != id)
        return InternalError(b() + ": child " + std::to_string(c) + " does not point back");
      // A referenced child pins its whole chain: its table holds the parent.
      if (pool_->refcount(c) > 0 && pool_->refcount(id) == 0)
        return InternalError(b() + ": cached parent of referenced child " + std::to_string(c));
    }
    const bool leaf = IsLeafCandidate(id);
    KVFORK_RETURN_IF_ERROR(policy_.CheckBlock(id, leaf, n.full));
    leaves += leaf;
    pinned += policy_.IsPinned(id);
  }
  if (cached != num_cached_)
    return InternalError("cached count " + std::to_string(num_cached_) + " but " +
                         std::to_string(cached) + " cached blocks");
  if (registered != num_registered_)
    return InternalError("registered count " + std::to_string(num_registered_) + " but " +
                         std::to_string(registered) + " registered blocks");
  KVFORK_RETURN_IF_ERROR(policy_.CheckTotals(leaves, pinned));
  if (full != full_by_hash_.size()) return InternalError("hash map has stale entries");
  for (const auto& [salt, kids] : root_children_) {
    for (BlockId c : kids) {
      if (!nodes_[c].registered || nodes_[c].parent != kNoBlock || nodes_[c].salt_key != salt)
        return InternalError("root child " + std::to_string(c) + " is stale");
    }
  }
  return OkStatus();
}

}  // namespace kvfork
