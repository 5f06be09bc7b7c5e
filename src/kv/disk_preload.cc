#include "kv/disk_preload.h"

#include <algorithm>
#include <unordered_map>
#include <unordered_set>

#include "kv/block_hash.h"
#include "kv/disk_block_file.h"

namespace kvfork {
namespace {

// Whether a header names the block it holds: a full block's hash is the
// chained hash of its parent's (or the unsalted seed) and its tokens, a
// partial block's key is DiskPartialKey of its parent and tokens.
bool NamesItself(const DiskBlockHeader& h, int block_size) {
  const int64_t n = static_cast<int64_t>(h.tokens.size());
  if (h.partial) {
    return h.parent_hash.has_value() && n >= 1 && n < block_size &&
           DiskPartialKey(*h.parent_hash, h.tokens) == h.block_hash;
  }
  const uint64_t from = h.parent_hash ? *h.parent_hash : RootBlockHashSeed(0);
  return n == block_size && ChainBlockHash(from, h.tokens) == h.block_hash;
}

}  // namespace

std::vector<PreloadBlock> PlanDiskPreload(DiskTier& tier, int block_size, int64_t max_blocks,
                                          const std::atomic<bool>& stop) {
  std::vector<PreloadBlock> out;
  if (max_blocks <= 0) return out;
  std::unordered_set<uint64_t> taken;
  // Full blocks' headers read so far (nullopt: unusable), so a parent shared
  // by many chains is read once.
  std::unordered_map<uint64_t, std::optional<DiskBlockHeader>> headers;
  auto header = [&](uint64_t hash, bool partial) -> const std::optional<DiskBlockHeader>& {
    auto it = headers.find(hash);
    if (it != headers.end()) return it->second;
    std::optional<DiskBlockHeader> h;
    StatusOr<DiskBlockHeader> r = tier.ReadIdentity(hash, partial);
    if (r.ok() && r->partial == partial && NamesItself(*r, block_size)) h = *std::move(r);
    return headers.emplace(hash, std::move(h)).first->second;
  };
  for (const auto& [hash, partial] : tier.NewestFirst()) {
    if (stop.load()) break;
    if (taken.count(hash) != 0) continue;
    // The candidate, then its ancestors not taken yet, child to root.
    std::vector<const DiskBlockHeader*> chain;
    const std::optional<DiskBlockHeader>& first = header(hash, partial);
    if (!first) continue;
    chain.push_back(&*first);
    bool whole = true;
    for (std::optional<uint64_t> p = first->parent_hash; p && taken.count(*p) == 0;) {
      if (static_cast<int64_t>(taken.size() + chain.size()) >= max_blocks) break;  // too long
      if (stop.load() || !tier.Contains(*p)) {
        whole = false;
        break;
      }
      const std::optional<DiskBlockHeader>& h = header(*p, /*partial=*/false);
      if (!h) {
        whole = false;
        break;
      }
      chain.push_back(&*h);
      p = h->parent_hash;
    }
    if (!whole) continue;
    // Whole chains only: the first that does not fit ends the plan (a chain
    // cut short above, at the bound, cannot fit either).
    const bool reached_root = !chain.back()->parent_hash || taken.count(*chain.back()->parent_hash);
    if (!reached_root || static_cast<int64_t>(taken.size() + chain.size()) > max_blocks) break;
    for (auto it = chain.rbegin(); it != chain.rend(); ++it) {
      const DiskBlockHeader& h = **it;
      taken.insert(h.block_hash);
      out.push_back({h.block_hash, h.parent_hash, h.tokens, h.partial});
    }
  }
  return out;
}

DiskPreloadPlanner::DiskPreloadPlanner(DiskTier* tier, int block_size, int64_t max_blocks,
                                       std::function<void()> on_ready)
    : thread_([this, tier, block_size, max_blocks, on_ready = std::move(on_ready)] {
        plan_ = PlanDiskPreload(*tier, block_size, max_blocks, stop_);
        ready_.store(true);
        if (on_ready) on_ready();
      }) {}

DiskPreloadPlanner::~DiskPreloadPlanner() {
  stop_.store(true);
  if (thread_.joinable()) thread_.join();
}

std::vector<PreloadBlock> DiskPreloadPlanner::Take() {
  if (thread_.joinable()) thread_.join();  // ready: the thread has finished
  return std::move(plan_);
}

}  // namespace kvfork
