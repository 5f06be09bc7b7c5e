// The paged cache's preload at start (issue 25; docs/kv_cache.md, "Preload
// at start"): the disk blocks the last shutdown or eviction wrote last are
// read into free pool blocks in the background and registered as cached
// (refcount 0, in the LRU), as a request's load registers them.
//
// A planner thread reads the headers (disk_preload.h); the engine thread,
// in StepBackground, reads the plan in batches of kPreloadBatch blocks on
// the cache's I/O threads (a background load: requests' loads go first)
// and registers each batch when it is done. Before a batch, blocks a
// request has registered meanwhile are skipped; only free blocks are used,
// nothing is evicted, and the preload ends when none is free.
#include <algorithm>
#include <cstdio>

#include "core/logging.h"
#include "core/timer.h"
#include "kv/paged_kv_cache.h"

namespace kvfork {

void PagedKvCache::StartPreload() {
  if (disk_ == nullptr || options_.disk_preload_bytes == 0) return;
  const int64_t half = pool_->num_blocks() / 2;
  const int64_t blocks =
      options_.disk_preload_bytes < 0
          ? half
          : std::min(pool_->num_blocks(),
                     options_.disk_preload_bytes / static_cast<int64_t>(pool_->block_bytes()));
  if (blocks <= 0 || disk_->Stats().blocks == 0) return;
  preload_ = std::make_unique<Preload>();
  preload_->start_ns = NowNanos();
  preload_->planner = std::make_unique<DiskPreloadPlanner>(
      disk_.get(), pool_->layout().block_size, blocks, [this] { WakeBackground(); });
}

void PagedKvCache::WakeBackground() {
  std::lock_guard<std::mutex> lock(wake_mu_);
  if (background_wake_) background_wake_();
}

void PagedKvCache::SetBackgroundWake(std::function<void()> wake) {
  std::lock_guard<std::mutex> lock(wake_mu_);
  background_wake_ = std::move(wake);
}

void PagedKvCache::StepBackground() {
  // Each step: the tier's writes and losses reach the index (cheap when none).
  ApplyDiskChanges();
  if (preload_ == nullptr || preload_->done) return;
  Preload& p = *preload_;
  if (p.planner != nullptr) {
    if (!p.planner->ready()) return;
    p.plan = p.planner->Take();
    p.planner.reset();
    stats_.disk_preload_planned_blocks = static_cast<int64_t>(p.plan.size());
  }
  while (!p.batches.empty() && loader_->Done(*p.batches.front().load)) ApplyPreloadBatch();
  // While a request reads its prefix from disk, no new batch: its reads get
  // the I/O threads, and the batches after it skip what it registers (a
  // batch planned now would read the blocks it is reading).
  for (const auto& [id, s] : seqs_)
    if (s.load != nullptr) return;
  while (p.batches.size() < kPreloadBatchesInFlight && StartPreloadBatch()) {
  }
  if (p.batches.empty())
    EndPreload(p.next < p.plan.size() ? "no free pool block left" : "done");
}

BlockId PagedKvCache::PreloadResolved(uint64_t hash) const {
  auto it = preload_->resolved.find(hash);
  if (it == preload_->resolved.end()) return kNoBlock;
  const BlockId b = it->second;
  // Evicted since (and maybe reused for another block): gone.
  return index_->IsRegistered(b) && index_->IsFull(b) && index_->hash(b) == hash ? b : kNoBlock;
}

bool PagedKvCache::StartPreloadBatch() {
  Preload& p = *preload_;
  std::vector<DiskReadJob> jobs;
  Preload::Batch batch;
  while (p.next < p.plan.size() && jobs.size() < kPreloadBatch) {
    const PreloadBlock& e = p.plan[p.next];
    BlockId parent = kNoBlock;
    bool parent_in_batch = false;
    if (e.parent_hash) {
      parent = PreloadResolved(*e.parent_hash);
      parent_in_batch = parent == kNoBlock && p.in_flight.count(*e.parent_hash) != 0;
      if (parent == kNoBlock && !parent_in_batch) {
        ++p.next;  // its parent failed or was evicted: useless
        continue;
      }
    }
    // A request may have registered it meanwhile (read by its own load),
    // under a parent the preload may not know yet (its parent in flight).
    // Preloaded chains are unsalted (disk_preload.h): salt key 0.
    if (!e.partial) {
      const BlockId have = index_->FindByHash(e.hash, e.parent_hash, e.tokens.data());
      if (have != kNoBlock && index_->salt_key(have) == 0) {
        p.resolved[e.hash] = have;
        ++p.next;
        continue;
      }
    } else if (!parent_in_batch && index_->Covered(parent, 0, e.tokens)) {
      ++p.next;
      continue;
    }
    if (pool_->num_free() == 0) break;  // never evicts to make room
    const BlockId id = pool_->Allocate();
    DiskReadJob job;
    job.hash = e.hash;
    job.parent_hash = e.parent_hash;
    job.tokens = e.tokens;
    job.dst = pool_->Data(id);
    job.partial = e.partial;
    jobs.push_back(std::move(job));
    batch.blocks.push_back(id);
    batch.entries.push_back(p.next);
    if (!e.partial) p.in_flight.insert(e.hash);
    ++p.next;
  }
  if (jobs.empty()) return false;
  // Independent jobs: a failed block fails only its own chain's later
  // blocks (ApplyPreloadBatch skips a block whose parent is not in the pool).
  DiskLoadOptions o;
  o.background = true;
  o.independent = true;
  o.on_done = [this] { WakeBackground(); };
  batch.load = loader_->Start(std::move(jobs), std::move(o));
  p.batches.push_back(std::move(batch));
  return true;
}

void PagedKvCache::ApplyPreloadBatch() {
  Preload& p = *preload_;
  Preload::Batch b = std::move(p.batches.front());
  p.batches.pop_front();
  loader_->Forget(b.load);
  const DiskLoad& load = *b.load;
  auto drop = [&](BlockId id) {
    pool_->DecRef(id);
    pool_->Free(id);
  };
  for (size_t j = 0; j < b.blocks.size(); ++j) {
    const BlockId id = b.blocks[j];
    const PreloadBlock& e = p.plan[b.entries[j]];
    if (!e.partial) p.in_flight.erase(e.hash);
    const BlockId parent = e.parent_hash ? PreloadResolved(*e.parent_hash) : kNoBlock;
    if (!load.ok[j] || (e.parent_hash && parent == kNoBlock)) {
      drop(id);  // failed (counted and deleted by the tier), or its chain broke
      continue;
    }
    std::span<const int32_t> tokens(e.tokens);
    if (!e.partial) {
      const BlockId have = index_->FindFull(parent, 0, tokens.data());
      if (have != kNoBlock) {
        // A request read it too and registered first: same bits; ours goes.
        p.resolved[e.hash] = have;
        drop(id);
        continue;
      }
    } else if (index_->Covered(parent, 0, tokens)) {
      drop(id);
      continue;
    }
    RegisterReplacingPartials(id, parent, 0, tokens);
    if (!e.partial) p.resolved[e.hash] = id;
    Unref(id);  // cached: refcount 0, in the LRU
    ++stats_.disk_preloaded_blocks;
    stats_.disk_preloaded_bytes += static_cast<int64_t>(pool_->block_bytes());
  }
  UpdatePeaks();
}

void PagedKvCache::EndPreload(const char* why) {
  Preload& p = *preload_;
  if (p.done) return;
  p.planner.reset();
  for (Preload::Batch& b : p.batches) {
    loader_->Cancel(b.load);
    for (BlockId id : b.blocks) {
      pool_->DecRef(id);
      pool_->Free(id);
    }
  }
  p.batches.clear();
  p.in_flight.clear();
  p.done = true;
  stats_.disk_preload_ms = static_cast<double>(NowNanos() - p.start_ns) * 1e-6;
  char line[256];
  std::snprintf(line, sizeof(line),
                "KV disk preload: %lld of %lld planned blocks read into the pool (%.1f MiB) in "
                "%.1f ms since start (%s)",
                static_cast<long long>(stats_.disk_preloaded_blocks),
                static_cast<long long>(stats_.disk_preload_planned_blocks),
                static_cast<double>(stats_.disk_preloaded_bytes) / (1 << 20),
                stats_.disk_preload_ms, why);
  KVFORK_LOG(kInfo) << line;
}

}  // namespace kvfork
