#include "kv/sliding_kv_group.h"

#include <string>

#include "core/logging.h"
#include "kernels/ops.h"

namespace kvfork {

StatusOr<std::unique_ptr<SlidingKvGroup>> SlidingKvGroup::Create(const KvGroup& group,
                                                                 int64_t num_blocks,
                                                                 int64_t num_nodes) {
  if (group.window <= 0 || group.layout.num_layers <= 0)
    return InvalidArgumentError("KV sliding group: needs a window and layers, got window " +
                                std::to_string(group.window) + ", " +
                                std::to_string(group.layout.num_layers) + " layers");
  KVFORK_ASSIGN_OR_RETURN(std::unique_ptr<BlockPool> pool,
                          BlockPool::Create(group.layout, num_blocks));
  return std::unique_ptr<SlidingKvGroup>(
      new SlidingKvGroup(group.window, std::move(pool), num_nodes));
}

SlidingKvGroup::SlidingKvGroup(int64_t window, std::unique_ptr<BlockPool> pool, int64_t num_nodes)
    : window_(window),
      pool_(std::move(pool)),
      hole_(new uint8_t[pool_->block_bytes()]()),
      attached_(num_nodes, kNoBlock),
      node_of_(pool_->num_blocks(), kNoBlock) {}

int64_t SlidingKvGroup::FirstVisibleBlock(int64_t pos) const {
  return AttentionWindowStart(pos, window_) / pool_->layout().block_size;
}

BlockId SlidingKvGroup::Take(const PrefixIndex& index) {
  if (pool_->num_free() == 0) {
    KVFORK_CHECK_MSG(!lru_.empty(), "KV sliding group: no free block and no cached one");
    // The least recently cached block whose node is not pinned; the oldest
    // pinned one only when every cached block is pinned (as the index does).
    auto victim = lru_.begin();
    while (victim != lru_.end() && index.IsPinned(node_of_[victim->second])) ++victim;
    if (victim == lru_.end()) {
      victim = lru_.begin();
      ++pinned_evictions_;
      KVFORK_LOG(kWarn) << "KV sliding group (window " << window_
                        << "): evicting the block of a pinned prefix: every cached block of "
                           "the group is pinned ("
                        << lru_.size() << ")";
    }
    const BlockId id = victim->second;
    lru_.erase(victim);
    Detach(id);
    pool_->Free(id);
    ++evictions_;
  }
  return pool_->Allocate();
}

void SlidingKvGroup::Ref(BlockId id) {
  if (pool_->refcount(id) == 0) lru_.erase({pool_->tick(id), id});
  pool_->AddRef(id);
}

void SlidingKvGroup::Unref(BlockId id) {
  if (pool_->DecRef(id) > 0) return;
  if (node_of_[id] == kNoBlock) {
    pool_->Free(id);
    return;
  }
  lru_.emplace(pool_->Touch(id), id);
}

void SlidingKvGroup::Attach(BlockId node, BlockId id) {
  KVFORK_CHECK(attached_[node] == kNoBlock && node_of_[id] == kNoBlock && pool_->refcount(id) > 0);
  attached_[node] = id;
  node_of_[id] = node;
}

void SlidingKvGroup::Detach(BlockId id) {
  attached_[node_of_[id]] = kNoBlock;
  node_of_[id] = kNoBlock;
}

void SlidingKvGroup::OnNodeGone(BlockId node) {
  const BlockId id = attached_[node];
  if (id == kNoBlock) return;
  Detach(id);
  if (pool_->refcount(id) == 0) {
    lru_.erase({pool_->tick(id), id});
    pool_->Free(id);
  }
}

void SlidingKvGroup::DropCached() {
  for (const auto& [tick, id] : lru_) {
    Detach(id);
    pool_->Free(id);
  }
  lru_.clear();
}

Status SlidingKvGroup::Check(std::span<const int32_t> holders, const PrefixIndex& index) const {
  KVFORK_RETURN_IF_ERROR(pool_->CheckFreeList());
  int64_t cached = 0;
  for (BlockId b = 0; b < pool_->num_blocks(); ++b) {
    auto name = [b] { return "sliding block " + std::to_string(b); };
    const int32_t rc = pool_->refcount(b);
    if (rc != holders[b])
      return InternalError(name() + ": refcount " + std::to_string(rc) + " but " +
                           std::to_string(holders[b]) + " tables hold it");
    const BlockId node = node_of_[b];
    if (node != kNoBlock && (attached_[node] != b || !index.IsRegistered(node)))
      return InternalError(name() + ": attached to node " + std::to_string(node) +
                           " that is not registered or not attached back");
    const bool free = pool_->IsFree(b);
    const bool is_cached = rc == 0 && node != kNoBlock;
    if ((free ? 1 : 0) + (rc > 0 ? 1 : 0) + (is_cached ? 1 : 0) != 1)
      return InternalError(name() + " is not exactly one of free, referenced, cached");
    if (is_cached != (lru_.count({pool_->tick(b), b}) == 1))
      return InternalError(name() + ": LRU membership disagrees with its state");
    cached += is_cached;
  }
  if (cached != num_cached()) return InternalError("sliding group: stale LRU entries");
  for (BlockId n = 0; n < static_cast<BlockId>(attached_.size()); ++n) {
    const BlockId b = attached_[n];
    if (b != kNoBlock && node_of_[b] != n)
      return InternalError("node " + std::to_string(n) + ": attached sliding block " +
                           std::to_string(b) + " does not point back");
  }
  return OkStatus();
}

}  // namespace kvfork
