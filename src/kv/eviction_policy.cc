#include "kv/eviction_policy.h"

#include <chrono>
#include <string>

namespace kvfork {

int64_t EvictionPolicy::NowMs() const {
  if (now_ms_) return now_ms_();
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

void EvictionPolicy::AddLeaf(BlockId id, uint64_t tick) {
  Block& b = blocks_[id];
  if (b.leaf) return;
  b.leaf = true;
  b.tick = tick;
  if (b.pin_until_ms > 0) {
    pinned_leaves_.emplace(b.pinned_at_ms, id);
  } else {
    lru_.emplace(b.tick, id);
  }
}

void EvictionPolicy::RemoveLeaf(BlockId id) {
  Block& b = blocks_[id];
  if (!b.leaf) return;
  if (b.pin_until_ms > 0) {
    pinned_leaves_.erase({b.pinned_at_ms, id});
  } else {
    lru_.erase({b.tick, id});
  }
  b.leaf = false;
}

void EvictionPolicy::Pin(BlockId id, int64_t ttl_ms) {
  Block& b = blocks_[id];
  const int64_t now = NowMs();
  const bool leaf = b.leaf;
  RemoveLeaf(id);
  if (b.pin_until_ms > 0) pins_by_expiry_.erase({b.pin_until_ms, id});
  b.pin_until_ms = std::max(b.pin_until_ms, now + ttl_ms);
  b.pinned_at_ms = now;
  pins_by_expiry_.emplace(b.pin_until_ms, id);
  if (leaf) AddLeaf(id, b.tick);
}

void EvictionPolicy::Unpin(BlockId id) {
  Block& b = blocks_[id];
  if (b.pin_until_ms == 0) return;
  const bool leaf = b.leaf;
  RemoveLeaf(id);
  pins_by_expiry_.erase({b.pin_until_ms, id});
  b.pin_until_ms = 0;
  b.pinned_at_ms = 0;
  if (leaf) AddLeaf(id, b.tick);
}

void EvictionPolicy::UnpinAll() {
  while (!pins_by_expiry_.empty()) Unpin(pins_by_expiry_.begin()->second);
}

void EvictionPolicy::ExpirePins() {
  if (pins_by_expiry_.empty()) return;
  const int64_t now = NowMs();
  while (!pins_by_expiry_.empty() && pins_by_expiry_.begin()->first <= now)
    Unpin(pins_by_expiry_.begin()->second);
}

BlockId EvictionPolicy::Next(bool* pinned) {
  ExpirePins();
  *pinned = false;
  if (!lru_.empty()) return lru_.begin()->second;
  if (pinned_leaves_.empty()) return kNoBlock;
  *pinned = true;
  return pinned_leaves_.begin()->second;
}

void EvictionPolicy::Forget(BlockId id) {
  RemoveLeaf(id);
  Block& b = blocks_[id];
  if (b.pin_until_ms > 0) pins_by_expiry_.erase({b.pin_until_ms, id});
  b = Block();
}

Status EvictionPolicy::CheckBlock(BlockId id, bool is_leaf, bool full) const {
  const Block& b = blocks_[id];
  auto name = [id] { return "block " + std::to_string(id); };
  if (b.leaf != is_leaf) return InternalError(name() + ": LRU membership disagrees with leaf state");
  if (b.pin_until_ms > 0) {
    if (!full) return InternalError(name() + ": a partial block is pinned");
    if (!pins_by_expiry_.count({b.pin_until_ms, id}))
      return InternalError(name() + ": pinned but missing from the expiry order");
  }
  if (b.leaf) {
    const bool found = b.pin_until_ms > 0 ? pinned_leaves_.count({b.pinned_at_ms, id}) != 0
                                          : lru_.count({b.tick, id}) != 0;
    if (!found) return InternalError(name() + ": missing from its leaf order (LRU or pinned)");
  }
  return OkStatus();
}

Status EvictionPolicy::CheckTotals(int64_t leaves, int64_t pinned) const {
  if (leaves != num_leaves()) return InternalError("LRU or pinned leaf set has stale entries");
  if (pinned != num_pinned()) return InternalError("pin expiry set has stale entries");
  return OkStatus();
}

}  // namespace kvfork
