#include "kv/paged_kv_cache.h"

#include <algorithm>
#include <cstdio>
#include <string>
#include <thread>

#include "core/cpu_features.h"
#include "core/logging.h"
#include "kv/disk_block_file.h"
#include "kv/kv_group_split.h"

namespace kvfork {
namespace {

int64_t CeilDiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

}  // namespace

StatusOr<std::unique_ptr<PagedKvCache>> PagedKvCache::Create(const KvCacheOptions& options) {
  KVFORK_RETURN_IF_ERROR(ValidateKvLayout(options.layout));
  KVFORK_RETURN_IF_ERROR(ValidateKvGroups(options));
  KVFORK_ASSIGN_OR_RETURN(int64_t num_blocks, ResolveNumBlocks(options));
  const bool sliding = options.groups.size() > 1;
  if (sliding && !options.disk_dir.empty())
    return InvalidArgumentError(
        "--kv-disk-dir: the disk tier does not hold sliding-window layer groups yet (run the "
        "model with every layer in one block, as the engine does when a disk tier is set)");
  std::unique_ptr<DiskTier> disk;
  if (!options.disk_dir.empty()) {
    if (!options.prefix_cache)
      return InvalidArgumentError("--kv-disk-dir needs the prefix cache (drop --no-prefix-cache)");
    if (options.model_fingerprint == 0)
      return InvalidArgumentError("KV disk tier: no model fingerprint given");
    DiskTierOptions d;
    d.dir = options.disk_dir;
    d.capacity_bytes = options.disk_capacity_bytes;
    d.queue_blocks = options.disk_queue_blocks;
    d.read_hook = options.disk_read_hook;
    d.prefault = options.disk_prefault;
    d.fingerprint =
        DiskFingerprint(options.model_fingerprint, options.layout, IsaName(ActiveIsa()));
    KVFORK_ASSIGN_OR_RETURN(disk, DiskTier::Open(d));
  }
  int64_t primary_blocks = num_blocks;
  std::vector<int64_t> sliding_blocks;
  if (sliding) SplitKvPool(options, num_blocks, &primary_blocks, &sliding_blocks);
  KVFORK_ASSIGN_OR_RETURN(
      std::unique_ptr<BlockPool> pool,
      BlockPool::Create(sliding ? options.groups[0].layout : options.layout, primary_blocks));
  std::vector<std::unique_ptr<SlidingKvGroup>> groups;
  for (size_t g = 1; sliding && g < options.groups.size(); ++g) {
    KVFORK_ASSIGN_OR_RETURN(
        std::unique_ptr<SlidingKvGroup> group,
        SlidingKvGroup::Create(options.groups[g], sliding_blocks[g - 1], primary_blocks));
    groups.push_back(std::move(group));
  }
  return std::unique_ptr<PagedKvCache>(
      new PagedKvCache(options, std::move(pool), std::move(disk), std::move(groups)));
}

PagedKvCache::PagedKvCache(const KvCacheOptions& options, std::unique_ptr<BlockPool> pool,
                           std::unique_ptr<DiskTier> disk,
                           std::vector<std::unique_ptr<SlidingKvGroup>> sliding)
    : options_(options),
      pool_(std::move(pool)),
      index_(std::make_unique<PrefixIndex>(pool_.get())),
      disk_(std::move(disk)),
      sliding_(std::move(sliding)) {
  stats_.blocks_total = pool_->num_blocks();
  stats_.block_bytes = static_cast<int64_t>(pool_->block_bytes());
  if (options_.clock_ms) index_->set_clock(options_.clock_ms);
  if (disk_ != nullptr) {
    // The index holds the tier's blocks as nodes: those on disk now by
    // their hash (read on use, which checks them), then every change the
    // tier logs (ApplyDiskChanges). Tracking starts first, so a file lost
    // between the two is either not listed or logged as removed.
    disk_->TrackChanges();
    for (const auto& [hash, partial] : disk_->NewestFirst())
      if (!partial) index_->OnDiskFound(hash);
    index_->set_eviction_hook([this](BlockId id) { SpillToDisk(id); });
    const int64_t threads =
        options_.disk_read_threads > 0
            ? std::clamp<int64_t>(options_.disk_read_threads, 1, 16)
            : std::clamp<int64_t>(std::thread::hardware_concurrency(), 2, kMaxDiskReadThreads);
    loader_ = std::make_unique<DiskLoader>(disk_.get(), pool_->block_bytes(),
                                           static_cast<int>(threads));
    StartPreload();
  }
}

PagedKvCache::~PagedKvCache() {
  // Reads still running write into blocks about to go: stop them first.
  for (auto& [id, s] : seqs_)
    if (s.load != nullptr) loader_->Cancel(s.load);
  // The preload's planner and reads too (its blocks are not registered, so
  // the shutdown does not write them).
  if (preload_ != nullptr)
    for (auto& batch : preload_->batches) loader_->Cancel(batch.load);
  preload_.reset();
  // A clean shutdown keeps the whole cache; disk_'s destructor then finishes
  // the queued writes.
  if (disk_ != nullptr) WriteAllToDisk();
}

DiskBlockWrite PagedKvCache::DiskCopyOf(BlockId id) const {
  DiskBlockWrite w;
  w.hash = index_->hash(id);
  w.parent_hash = index_->parent_hash(id);
  w.tokens.assign(index_->tokens(id).begin(), index_->tokens(id).end());
  if (!index_->IsFull(id)) {
    w.partial = true;
    w.hash = DiskPartialKey(w.parent_hash.value_or(0), w.tokens);
  }
  const uint8_t* data = pool_->Data(id);
  w.payload.assign(data, data + pool_->block_bytes());
  return w;
}

void PagedKvCache::SpillToDisk(BlockId id) {
  // Only full blocks have a place in the chain others can reach.
  if (resetting_ || !index_->IsFull(id) || disk_->Contains(index_->hash(id))) return;
  disk_->Enqueue(index_->hash(id), [&] { return DiskCopyOf(id); });
}

int64_t PagedKvCache::WriteAllToDisk() {
  if (disk_ == nullptr) return 0;
  int64_t written = 0;
  for (BlockId b = 0; b < pool_->num_blocks(); ++b) {
    if (!index_->IsRegistered(b)) continue;
    // A partial block is found on disk under its parent's hash; a first
    // block that is partial (a prompt under one block) is cheaper to compute.
    if (!index_->IsFull(b) && !index_->parent_hash(b).has_value()) continue;
    const uint64_t key = index_->IsFull(b)
                             ? index_->hash(b)
                             : DiskPartialKey(*index_->parent_hash(b), index_->tokens(b));
    if (disk_->Contains(key)) continue;
    if (disk_->WriteNow(DiskCopyOf(b)).ok()) ++written;
  }
  // One flush for all (an fsync per file would make shutdown slow).
  if (written > 0) disk_->Sync();
  return written;
}

const PagedKvCache::Sequence& PagedKvCache::Get(SeqId seq) const {
  auto it = seqs_.find(seq);
  KVFORK_CHECK_MSG(it != seqs_.end(), "unknown KV sequence " + std::to_string(seq));
  return it->second;
}

PagedKvCache::Sequence& PagedKvCache::Get(SeqId seq) {
  auto it = seqs_.find(seq);
  KVFORK_CHECK_MSG(it != seqs_.end(), "unknown KV sequence " + std::to_string(seq));
  return it->second;
}

bool PagedKvCache::ReadBeatsCompute(int64_t tokens) const {
  // Unmeasured: read (on every machine measured so far a block read back in
  // 1-6 ms against 50-130 ms to compute it; docs/kv_cache.md).
  if (disk_ns_per_block_ <= 0 || prefill_ns_per_token_ <= 0) return true;
  return disk_ns_per_block_ < prefill_ns_per_token_ * static_cast<double>(tokens);
}

void PagedKvCache::PlanDiskTail(uint64_t parent_hash, const int32_t* rest, int64_t max_tail,
                                int min_tokens, Plan* plan) const {
  if (max_tail <= 0) return;
  std::optional<DiskPartialMatch> m = disk_->BestPartial(
      parent_hash, std::span<const int32_t>(rest, static_cast<size_t>(max_tail)));
  if (!m || m->matched <= min_tokens || !ReadBeatsCompute(m->matched)) return;
  plan->tail_src = kNoBlock;
  plan->tail_tokens = m->matched;
  plan->disk_tail = std::move(m);
}

PagedKvCache::Plan PagedKvCache::MakePlan(std::span<const int32_t> prompt, uint64_t salt_key,
                                          bool force_read) const {
  Plan plan;
  const int64_t bs = pool_->layout().block_size;
  // The last prompt token is always recomputed so its logits exist.
  const int64_t limit = static_cast<int64_t>(prompt.size()) - 1;
  // One walk of the index: nodes with a pool block are shared, then a run
  // of nodes on disk only (placed, or known by the hash the walk computes)
  // is read. A node with a pool block never hangs under one without, so
  // the pool part comes first (PrefixIndex::Check).
  BlockId parent = kNoBlock;  // the last shared block
  NodeId node = kNoNode;
  uint64_t h = RootBlockHashSeed(salt_key);
  int64_t k = 0;
  while ((k + 1) * bs <= limit) {
    const int32_t* tokens = prompt.data() + k * bs;
    h = ChainBlockHash(h, std::span<const int32_t>(tokens, bs));
    const NodeId n = index_->Follow(node, salt_key, h, tokens);
    if (n == kNoNode) break;
    const BlockId b = index_->node_block(n);
    if (b != kNoBlock && plan.disk.empty()) {
      plan.shared.push_back(b);
      parent = b;
    } else if (disk_ != nullptr && index_->node_on_disk(n)) {
      plan.disk.push_back(h);
    } else {
      break;
    }
    node = n;
    ++k;
  }
  const int64_t shared = static_cast<int64_t>(plan.shared.size());
  if (disk_ != nullptr) {
    plan.disk_miss = (k + 1) * bs <= limit;
    // Read or recompute: one estimate of each side for every block of the
    // run, so the choice is the run's (docs/kv_cache.md says why). A run
    // computed goes on like a miss: the pool's partial tail may still match.
    if (!plan.disk.empty() && !force_read && !ReadBeatsCompute(bs)) {
      plan.disk_recomputed = static_cast<int64_t>(plan.disk.size());
      plan.disk.clear();
    }
    // After a disk run, the tail can only be a partial block on disk (the
    // pool holds no child of a block it does not hold).
    if (!plan.disk.empty()) {
      if (options_.tail_copy)
        PlanDiskTail(plan.disk.back(), prompt.data() + k * bs, std::min(bs, limit - k * bs), 0,
                     &plan);
      return plan;
    }
  }
  if (options_.tail_copy) {
    int64_t max_tail = std::min(bs, limit - shared * bs);
    if (max_tail > 0) {
      auto [src, n] = index_->BestPrefix(parent, salt_key, prompt.data() + shared * bs,
                                         static_cast<int>(max_tail));
      plan.tail_src = src;
      plan.tail_tokens = n;
      // A partial block on disk (a restart's, say) wins only if it matches
      // more. Partial blocks without a parent are never written.
      if (disk_ != nullptr && parent != kNoBlock)
        PlanDiskTail(index_->hash(parent), prompt.data() + shared * bs, max_tail, n, &plan);
    }
  }
  FitWindows(&plan);
  return plan;
}

int64_t PagedKvCache::MissingInWindows(const Plan& plan, int64_t num_shared, bool with_tail) const {
  const int64_t bs = pool_->layout().block_size;
  const int64_t reuse = num_shared * bs + (with_tail ? plan.tail_tokens : 0);
  int64_t missing = -1;
  for (const auto& g : sliding_) {
    // The first new query (at position `reuse`) sees keys from its window's
    // start on: those blocks must be attached, the ones before need not be.
    if (with_tail && g->AttachedTo(plan.tail_src) == kNoBlock) return num_shared;
    for (int64_t i = num_shared - 1; i > missing && i >= g->FirstVisibleBlock(reuse); --i) {
      if (g->AttachedTo(plan.shared[i]) == kNoBlock) {
        missing = i;
        break;
      }
    }
  }
  return missing;
}

void PagedKvCache::FitWindows(Plan* plan) const {
  if (sliding_.empty()) return;
  int64_t k = static_cast<int64_t>(plan->shared.size());
  bool tail = plan->tail_src != kNoBlock && plan->tail_tokens > 0;
  // Longest first: the whole match, then without the tail, then the
  // prefix ending where the highest missing block starts (every longer one
  // has that block in its window); reusing nothing always fits. O(matched
  // blocks) in all.
  while (k > 0 || tail) {
    const int64_t missing = MissingInWindows(*plan, k, tail);
    if (missing < 0) break;
    tail = false;
    k = std::min(k, missing);
  }
  plan->shared.resize(k);
  if (!tail) {
    plan->tail_src = kNoBlock;
    plan->tail_tokens = 0;
  }
}

PrefixMatch PagedKvCache::Match(std::span<const int32_t> prompt, std::string_view salt) const {
  PrefixMatch m;
  if (!options_.prefix_cache) return m;
  ApplyDiskChanges();
  Plan plan = MakePlan(prompt, PrefixIndex::SaltKeyOf(salt));
  m.num_shared_blocks = static_cast<int64_t>(plan.shared.size() + plan.disk.size());
  m.num_tail_tokens = plan.tail_tokens;
  m.num_reused_tokens = m.num_shared_blocks * pool_->layout().block_size + m.num_tail_tokens;
  return m;
}

int64_t PagedKvCache::AvailableBlocks() const {
  int64_t n = PrimaryAvailable();
  for (const auto& g : sliding_) n = std::min(n, g->Available());
  return n;
}

void PagedKvCache::FreeNode(BlockId id) {
  for (const auto& g : sliding_) g->OnNodeGone(id);
  pool_->Free(id);
}

void PagedKvCache::ShareOrAttach(Sequence* s, size_t g, int64_t i, BlockId node) {
  SlidingKvGroup& group = *sliding_[g];
  SideTable& t = s->side[g];
  const BlockId mine = t.blocks[i];
  if (mine == kNoBlock) return;  // given back already: the node stays without
  const BlockId attached = group.AttachedTo(node);
  if (attached == mine) return;
  if (attached == kNoBlock) {
    group.Attach(node, mine);
    return;
  }
  // Another sequence's copy of the same positions (same bits, invariant 1).
  group.Ref(attached);
  t.blocks[i] = attached;
  t.table[i] = group.Data(attached);
  group.Unref(mine);
}

void PagedKvCache::DropOutOfWindow(Sequence* s) {
  const int64_t n = static_cast<int64_t>(s->tokens.size());
  for (size_t g = 0; g < sliding_.size(); ++g) {
    SlidingKvGroup& group = *sliding_[g];
    SideTable& t = s->side[g];
    const int64_t first = group.FirstVisibleBlock(n);
    for (; t.first < first; ++t.first) {
      if (t.blocks[t.first] == kNoBlock) continue;
      group.Unref(t.blocks[t.first]);
      t.blocks[t.first] = kNoBlock;
      t.table[t.first] = group.hole();
    }
  }
}

void PagedKvCache::Ref(BlockId id) {
  pool_->AddRef(id);
  if (pool_->refcount(id) == 1 && index_->IsRegistered(id)) index_->OnReferenced(id);
}

void PagedKvCache::Unref(BlockId id) {
  if (pool_->DecRef(id) > 0) return;
  if (index_->IsRegistered(id)) {
    pool_->Touch(id);
    index_->OnCached(id);
  } else {
    pool_->Free(id);
  }
}

void PagedKvCache::TakeBlocks(int64_t n, Sequence* s) {
  for (int64_t i = 0; i < n; ++i) {
    if (pool_->num_free() == 0) {
      index_->ExpirePins();
      const int64_t pinned = index_->num_pinned();
      BlockId victim = index_->PopLru();
      KVFORK_CHECK_MSG(victim != kNoBlock, "KV pool: no free block and no evictable leaf");
      // PopLru takes a pinned block only when no other is left (and logs it).
      if (index_->num_pinned() < pinned) ++stats_.pinned_evictions;
      FreeNode(victim);
      ++stats_.evictions;
    }
    BlockId id = pool_->Allocate();
    s->blocks.push_back(id);
    s->table.push_back(pool_->Data(id));
  }
  for (size_t g = 0; g < sliding_.size(); ++g) {
    for (int64_t i = 0; i < n; ++i) {
      const BlockId id = sliding_[g]->Take(*index_);
      s->side[g].blocks.push_back(id);
      s->side[g].table.push_back(sliding_[g]->Data(id));
    }
  }
}

std::shared_ptr<DiskLoad> PagedKvCache::StartLoad(const Plan& plan, int64_t shared,
                                                  std::span<const int32_t> prompt,
                                                  const Sequence& s) {
  const int64_t bs = pool_->layout().block_size;
  const std::vector<uint64_t>& hashes = plan.disk;
  std::vector<DiskReadJob> jobs(hashes.size());
  for (size_t j = 0; j < hashes.size(); ++j) {
    const int64_t i = shared + static_cast<int64_t>(j);
    DiskReadJob& job = jobs[j];
    job.hash = hashes[j];
    if (j > 0) {
      job.parent_hash = hashes[j - 1];
    } else if (i > 0) {
      job.parent_hash = index_->hash(s.blocks[i - 1]);
    }
    job.tokens.assign(prompt.begin() + i * bs, prompt.begin() + (i + 1) * bs);
    job.dst = pool_->Data(s.blocks[i]);
  }
  if (plan.disk_tail) {
    // Last: the partial block, read whole into the sequence's tail block
    // (positions past the matched tokens are overwritten by the prefill).
    const int64_t i = shared + static_cast<int64_t>(hashes.size());
    DiskReadJob job;
    job.hash = plan.disk_tail->key;
    job.parent_hash = hashes.empty() ? index_->hash(s.blocks[i - 1]) : hashes.back();
    job.tokens = plan.disk_tail->tokens;
    job.dst = pool_->Data(s.blocks[i]);
    job.partial = true;
    jobs.push_back(std::move(job));
  }
  return loader_->Start(std::move(jobs));
}

void PagedKvCache::ApplyLoad(Sequence* s) {
  const int64_t bs = pool_->layout().block_size;
  DiskLoad& load = *s->load;
  loader_->Forget(s->load);
  const int64_t n = static_cast<int64_t>(load.jobs.size());
  const int64_t n_full = n - (s->load_tail > 0 ? 1 : 0);
  const int64_t ok_all = static_cast<int64_t>(load.LeadingOk());
  const int64_t ok = std::min(ok_all, n_full);
  // The partial block counts only after every full block before it.
  const int64_t tail = ok_all == n ? s->load_tail : 0;
  // Chain order; a block another sequence registered meanwhile is shared
  // (same bits) and ours freed, as when a computed block fills.
  s->tokens.assign(s->load_tokens.begin(), s->load_tokens.begin() + (s->registered + ok) * bs);
  RegisterFilled(s);
  // The tail stays private (unregistered), as a tail copied from the pool.
  s->tokens.insert(s->tokens.end(), s->load_tokens.begin() + s->tokens.size(),
                   s->load_tokens.begin() + s->tokens.size() + tail);
  s->reused = static_cast<int64_t>(s->tokens.size());
  // A partial block read back and used is a block read back, as a full one.
  stats_.disk_hit_blocks += ok + (tail > 0 ? 1 : 0);
  stats_.hits_tokens += ok * bs + tail;
  stats_.tail_copied_tokens += tail;
  if (s->load_miss || ok_all < n) ++stats_.disk_miss_lookups;
  // The read side of the rule: a load's wall time per block, as the
  // request waits for it (reads in parallel, beside the engine's compute).
  const double per_block = static_cast<double>(load.end_ns - load.start_ns) / static_cast<double>(n);
  if (ok > 0) {
    constexpr double kAlpha = 0.35;  // as StepBudget: recent loads dominate
    disk_ns_per_block_ = disk_ns_per_block_ <= 0
                             ? per_block
                             : disk_ns_per_block_ + kAlpha * (per_block - disk_ns_per_block_);
  }
  char line[240];
  std::snprintf(line, sizeof(line),
                "KV disk: read %lld of %lld blocks%s in %.1f ms (%.3f ms a block, %d I/O threads)",
                static_cast<long long>(ok_all), static_cast<long long>(n),
                s->load_tail > 0 ? (tail > 0 ? " (the last a partial block, used)"
                                             : " (the last a partial block, not used)")
                                 : "",
                static_cast<double>(load.end_ns - load.start_ns) * 1e-6, per_block * 1e-6,
                loader_->threads());
  KVFORK_LOG(kInfo) << line;
  s->load.reset();
  s->load_tail = 0;
  std::vector<int32_t>().swap(s->load_tokens);
}

bool PagedKvCache::FinishLoad(SeqId seq, PrefixMatch* match) {
  Sequence& s = Get(seq);
  if (s.load == nullptr) return true;
  if (!loader_->Done(*s.load)) return false;
  ApplyLoad(&s);
  if (match != nullptr) {
    match->num_reused_tokens = s.reused;
    match->num_shared_blocks = s.registered;
    match->num_tail_tokens = s.reused - s.registered * pool_->layout().block_size;
    match->num_loading_tokens = 0;
  }
  UpdatePeaks();
  return true;
}

void PagedKvCache::WaitForLoads(int64_t timeout_ms) {
  if (loader_ != nullptr) loader_->WaitAnyDone(timeout_ms);
}

StatusOr<SeqId> PagedKvCache::Admit(std::span<const int32_t> prompt, std::string_view salt,
                                    int64_t reserve_tokens, PrefixMatch* match) {
  if (prompt.empty()) return InvalidArgumentError("KV admit: the prompt is empty");
  const int64_t bs = pool_->layout().block_size;
  const uint64_t salt_key = options_.prefix_cache ? PrefixIndex::SaltKeyOf(salt) : 0;
  Plan plan;
  if (options_.prefix_cache) {
    ApplyDiskChanges();
    plan = MakePlan(prompt, salt_key);
    // A run the rule computes is read now and then anyway (kProbeEvery).
    if (plan.disk_recomputed > 0 && ++runs_recomputed_ % kProbeEvery == 0)
      plan = MakePlan(prompt, salt_key, /*force_read=*/true);
  }
  const int64_t shared = static_cast<int64_t>(plan.shared.size());
  // Reserve as if every disk block reads back; a failed read only means
  // those positions get computed instead.
  const int64_t planned = (shared + static_cast<int64_t>(plan.disk.size())) * bs + plan.tail_tokens;
  const int64_t positions = std::max(reserve_tokens, planned);
  if (positions > max_sequence_tokens()) {
    return OutOfRangeError("KV admit: " + std::to_string(positions) +
                           " positions exceed the pool's " + std::to_string(max_sequence_tokens()) +
                           " tokens");
  }
  const int64_t new_blocks = CeilDiv(positions, bs) - shared;  // disk blocks land in new ones
  // Matched blocks that are cached now will be pinned, so they do not count
  // as evictable room.
  int64_t pinned = 0;
  for (BlockId b : plan.shared) pinned += pool_->refcount(b) == 0;
  if (plan.tail_src != kNoBlock) pinned += pool_->refcount(plan.tail_src) == 0;
  int64_t room = PrimaryAvailable() - pinned;
  // Each sliding group: the blocks of the first query's window (and the
  // tail source) get a reference, the ones before stay holes.
  const int64_t planned_tokens = shared * bs + plan.tail_tokens;
  for (const auto& g : sliding_) {
    int64_t held = 0;
    for (int64_t i = g->FirstVisibleBlock(planned_tokens); i < shared; ++i)
      held += g->pool().refcount(g->AttachedTo(plan.shared[i])) == 0;
    if (plan.tail_src != kNoBlock) held += g->pool().refcount(g->AttachedTo(plan.tail_src)) == 0;
    room = std::min(room, g->Available() - held);
  }
  if (new_blocks > room) {
    return ResourceExhaustedError(
        "KV cache out of blocks: admitting a " + std::to_string(prompt.size()) +
        "-token prompt needs " + std::to_string(new_blocks) + " new blocks, " +
        std::to_string(room) + " free or evictable of " + std::to_string(pool_->num_blocks()));
  }
  Sequence s;
  s.salt_key = salt_key;
  for (BlockId b : plan.shared) {
    Ref(b);
    s.blocks.push_back(b);
    s.table.push_back(pool_->Data(b));
  }
  // Pin the tail source so allocating its copy cannot evict it.
  if (plan.tail_src != kNoBlock) Ref(plan.tail_src);
  s.side.resize(sliding_.size());
  for (size_t g = 0; g < sliding_.size(); ++g) {
    SlidingKvGroup& group = *sliding_[g];
    SideTable& t = s.side[g];
    t.first = std::min(group.FirstVisibleBlock(planned_tokens), shared);
    for (int64_t i = 0; i < shared; ++i) {
      const BlockId b = i < t.first ? kNoBlock : group.AttachedTo(plan.shared[i]);
      if (b != kNoBlock) group.Ref(b);
      t.blocks.push_back(b);
      t.table.push_back(b == kNoBlock ? group.hole() : group.Data(b));
    }
    if (plan.tail_src != kNoBlock) group.Ref(group.AttachedTo(plan.tail_src));
  }
  TakeBlocks(new_blocks, &s);
  if (plan.tail_src != kNoBlock) {
    CopyBlockTokens(pool_->layout(), pool_->Data(plan.tail_src), s.table[shared], 0,
                    plan.tail_tokens);
    for (size_t g = 0; g < sliding_.size(); ++g) {
      SlidingKvGroup& group = *sliding_[g];
      const BlockId src = group.AttachedTo(plan.tail_src);
      CopyBlockTokens(group.layout(), group.Data(src), s.side[g].table[shared], 0,
                      plan.tail_tokens);
      group.Unref(src);
    }
    Unref(plan.tail_src);
  }
  // Disk blocks: read into the first new blocks by the I/O threads, then
  // registered in chain order (ApplyLoad); the first that fails its checks
  // ends the run (the rest is computed). A partial block on disk is read
  // last, into the tail block.
  std::shared_ptr<DiskLoad> load;
  if (!plan.disk.empty() || plan.disk_tail) load = StartLoad(plan, shared, prompt, s);
  const int64_t pool_tail = plan.tail_src != kNoBlock ? plan.tail_tokens : 0;
  const int64_t disk_tail = plan.disk_tail ? plan.tail_tokens : 0;
  const int64_t reused = shared * bs + pool_tail;
  s.tokens.assign(prompt.begin(), prompt.begin() + reused);
  s.reused = reused;
  s.registered = shared;
  stats_.queries_tokens += static_cast<int64_t>(prompt.size());
  stats_.hits_tokens += reused;
  stats_.tail_copied_tokens += pool_tail;
  stats_.disk_recomputed_blocks += plan.disk_recomputed;
  if (load == nullptr && plan.disk_miss) ++stats_.disk_miss_lookups;
  SeqId id = next_seq_++;
  Sequence& q = seqs_.emplace(id, std::move(s)).first->second;
  if (load != nullptr) {
    q.load = std::move(load);
    q.load_tokens.assign(
        prompt.begin(),
        prompt.begin() + (shared + static_cast<int64_t>(plan.disk.size())) * bs + disk_tail);
    q.load_miss = plan.disk_miss;
    q.load_tail = disk_tail;
    if (!options_.disk_async_reads) {
      loader_->Wait(*q.load);
      ApplyLoad(&q);
    }
  }
  if (match != nullptr) {
    match->num_reused_tokens = q.reused;
    match->num_shared_blocks = q.registered;
    match->num_tail_tokens = q.load != nullptr ? pool_tail : q.reused - q.registered * bs;
    match->num_loading_tokens =
        q.load != nullptr ? static_cast<int64_t>(plan.disk.size()) * bs + disk_tail : 0;
  }
  UpdatePeaks();
  return id;
}

int64_t PagedKvCache::BlocksNeeded(SeqId seq, int64_t num_positions) const {
  const Sequence& s = Get(seq);
  return std::max<int64_t>(0, CeilDiv(num_positions, pool_->layout().block_size) -
                                  static_cast<int64_t>(s.blocks.size()));
}

Status PagedKvCache::Reserve(SeqId seq, int64_t num_positions) {
  Sequence& s = Get(seq);
  if (num_positions > max_sequence_tokens()) {
    return OutOfRangeError("KV reserve: " + std::to_string(num_positions) +
                           " positions exceed the pool's " + std::to_string(max_sequence_tokens()) +
                           " tokens");
  }
  int64_t need = BlocksNeeded(seq, num_positions);
  if (need == 0) return OkStatus();
  // Every group's table grows alike: AvailableBlocks is the least room.
  if (need > AvailableBlocks()) {
    return ResourceExhaustedError("KV cache out of blocks: sequence " + std::to_string(seq) +
                                  " needs " + std::to_string(need) + " more blocks, " +
                                  std::to_string(AvailableBlocks()) + " free or evictable of " +
                                  std::to_string(pool_->num_blocks()));
  }
  TakeBlocks(need, &s);
  UpdatePeaks();
  return OkStatus();
}

void PagedKvCache::RegisterReplacingPartials(BlockId id, BlockId parent, uint64_t salt_key,
                                             std::span<const int32_t> tokens) {
  for (BlockId r : index_->RedundantPartials(parent, salt_key, tokens)) {
    index_->Evict(r);
    FreeNode(r);
    ++stats_.evictions;
  }
  index_->Register(id, parent, salt_key, tokens);
}

void PagedKvCache::RegisterFilled(Sequence* s) {
  if (!options_.prefix_cache) return;
  const int64_t bs = pool_->layout().block_size;
  const int64_t full = static_cast<int64_t>(s->tokens.size()) / bs;
  for (; s->registered < full; ++s->registered) {
    const int64_t i = s->registered;
    BlockId parent = i > 0 ? s->blocks[i - 1] : kNoBlock;
    std::span<const int32_t> tok(s->tokens.data() + i * bs, bs);
    BlockId existing = index_->FindFull(parent, s->salt_key, tok.data());
    if (existing == kNoBlock) {
      RegisterReplacingPartials(s->blocks[i], parent, s->salt_key, tok);
    } else if (existing != s->blocks[i]) {
      // Another sequence filled the same block first: share its copy (same
      // bits by invariant 1) and free ours, so the chain stays one path.
      Ref(existing);
      BlockId mine = s->blocks[i];
      s->blocks[i] = existing;
      s->table[i] = pool_->Data(existing);
      Unref(mine);
    }
    // The sliding groups' blocks of these positions join the node.
    for (size_t g = 0; g < sliding_.size(); ++g) ShareOrAttach(s, g, i, s->blocks[i]);
  }
}

Status PagedKvCache::Append(SeqId seq, std::span<const int32_t> tokens) {
  Sequence& s = Get(seq);
  if (s.load != nullptr)
    return FailedPreconditionError("KV append: sequence " + std::to_string(seq) +
                                   " is still reading its prefix from disk");
  const int64_t capacity = static_cast<int64_t>(s.blocks.size()) * pool_->layout().block_size;
  const int64_t after = static_cast<int64_t>(s.tokens.size() + tokens.size());
  if (after > capacity) {
    return FailedPreconditionError("KV append: sequence " + std::to_string(seq) + " would hold " +
                                   std::to_string(after) + " tokens but only " +
                                   std::to_string(capacity) + " positions are reserved");
  }
  s.tokens.insert(s.tokens.end(), tokens.begin(), tokens.end());
  RegisterFilled(&s);
  DropOutOfWindow(&s);
  UpdatePeaks();
  return OkStatus();
}

StatusOr<SeqId> PagedKvCache::Fork(SeqId seq) {
  const Sequence& src = Get(seq);
  if (src.load != nullptr)
    return FailedPreconditionError("KV fork: sequence " + std::to_string(seq) +
                                   " is still reading its prefix from disk");
  const int64_t bs = pool_->layout().block_size;
  const int64_t n = static_cast<int64_t>(src.tokens.size());
  const int64_t full = n / bs;
  const int rem = static_cast<int>(n % bs);
  if (rem > 0 && AvailableBlocks() < 1) {
    return ResourceExhaustedError("KV cache out of blocks: forking sequence " +
                                  std::to_string(seq) + " needs 1 block for its partial tail");
  }
  Sequence d;
  d.salt_key = src.salt_key;
  for (int64_t i = 0; i < full; ++i) {
    Ref(src.blocks[i]);
    d.blocks.push_back(src.blocks[i]);
    d.table.push_back(src.table[i]);
  }
  d.side.resize(sliding_.size());
  for (size_t g = 0; g < sliding_.size(); ++g) {
    const SideTable& st = src.side[g];
    SideTable& dt = d.side[g];
    dt.first = st.first;
    for (int64_t i = 0; i < full; ++i) {
      if (st.blocks[i] != kNoBlock) sliding_[g]->Ref(st.blocks[i]);
      dt.blocks.push_back(st.blocks[i]);
      dt.table.push_back(st.table[i]);
    }
  }
  if (rem > 0) {
    TakeBlocks(1, &d);
    CopyBlockTokens(pool_->layout(), src.table[full], d.table[full], 0, rem);
    for (size_t g = 0; g < sliding_.size(); ++g)
      CopyBlockTokens(sliding_[g]->layout(), src.side[g].table[full], d.side[g].table[full], 0,
                      rem);
  }
  d.tokens = src.tokens;
  d.reused = n;
  d.registered = std::min(src.registered, full);
  SeqId id = next_seq_++;
  seqs_.emplace(id, std::move(d));
  UpdatePeaks();
  return id;
}

void PagedKvCache::Release(SeqId seq) {
  index_->ExpirePins();  // keeps the pinned count current, step by step
  Sequence& s = Get(seq);
  if (s.load != nullptr) {
    // Cancelled or preempted while loading: what was read is dropped (its
    // blocks were never registered) once no reader writes into them.
    loader_->Cancel(s.load);
    s.load.reset();
  }
  const int64_t bs = pool_->layout().block_size;
  const int64_t n = static_cast<int64_t>(s.tokens.size());
  const int64_t full = n / bs;
  const int64_t rem = n % bs;
  // Register the partial tail so a follow-up turn reuses the whole
  // conversation (by copying it), unless a cached block already covers it.
  if (options_.prefix_cache && rem > 0 && s.registered == full) {
    BlockId parent = full > 0 ? s.blocks[full - 1] : kNoBlock;
    std::span<const int32_t> part(s.tokens.data() + full * bs, rem);
    if (!index_->Covered(parent, s.salt_key, part)) {
      RegisterReplacingPartials(s.blocks[full], parent, s.salt_key, part);
      for (size_t g = 0; g < sliding_.size(); ++g) ShareOrAttach(&s, g, full, s.blocks[full]);
    }
  }
  for (BlockId b : s.blocks) Unref(b);
  // Sliding blocks attached to a node stay cached (the last window before
  // this end, for the next turn), the others are freed.
  for (size_t g = 0; g < sliding_.size(); ++g)
    for (BlockId b : s.side[g].blocks)
      if (b != kNoBlock) sliding_[g]->Unref(b);
  seqs_.erase(seq);
  UpdatePeaks();
}

void PagedKvCache::UpdatePeaks() {
  int64_t cached = index_->num_cached();
  int64_t used = pool_->num_blocks() - pool_->num_free() - cached;
  stats_.peak_used_blocks = std::max(stats_.peak_used_blocks, used);
  stats_.peak_resident_blocks = std::max(stats_.peak_resident_blocks, used + cached);
  const int64_t bytes = static_cast<int64_t>(pool_->block_bytes());
  int64_t used_bytes = used * bytes;
  int64_t resident_bytes = (used + cached) * bytes;
  if (stats_.sliding.size() != sliding_.size()) stats_.sliding.resize(sliding_.size());
  for (size_t g = 0; g < sliding_.size(); ++g) {
    const SlidingKvGroup& group = *sliding_[g];
    const int64_t gb = static_cast<int64_t>(group.pool().block_bytes());
    used_bytes += group.num_used() * gb;
    resident_bytes += (group.num_used() + group.num_cached()) * gb;
    stats_.sliding[g].peak_used_blocks =
        std::max(stats_.sliding[g].peak_used_blocks, group.num_used());
  }
  stats_.peak_used_kv_bytes = std::max(stats_.peak_used_kv_bytes, used_bytes);
  stats_.peak_resident_kv_bytes = std::max(stats_.peak_resident_kv_bytes, resident_bytes);
}

KvCacheStats PagedKvCache::Stats() const {
  KvCacheStats st = stats_;
  st.blocks_free = pool_->num_free();
  st.blocks_cached = index_->num_cached();
  st.blocks_used = st.blocks_total - st.blocks_free - st.blocks_cached;
  st.num_sequences = static_cast<int64_t>(seqs_.size());
  st.pinned_blocks = index_->num_pinned();
  st.sliding.resize(sliding_.size());
  for (size_t g = 0; g < sliding_.size(); ++g) {
    const SlidingKvGroup& group = *sliding_[g];
    KvGroupStats& gs = st.sliding[g];
    gs.window = group.window();
    gs.block_bytes = static_cast<int64_t>(group.pool().block_bytes());
    gs.blocks_total = group.pool().num_blocks();
    gs.blocks_free = group.num_free();
    gs.blocks_cached = group.num_cached();
    gs.blocks_used = group.num_used();
    gs.evictions = group.evictions();
    gs.pinned_evictions = group.pinned_evictions();
  }
  if (disk_ != nullptr) {
    st.disk_enabled = true;
    st.disk = disk_->Stats();
    st.disk_read_ns_per_block = disk_ns_per_block_;
    st.prefill_ns_per_token = prefill_ns_per_token_;
    st.disk_preload_running = PreloadRunning();
  }
  return st;
}

PrefixTreeSnapshot PagedKvCache::SnapshotPrefixTree(int64_t max_nodes) const {
  PrefixTreeSnapshot t = KvCache::SnapshotPrefixTree(max_nodes);
  t.has_tree = true;
  t.clock = pool_->clock();
  index_->SnapshotTree(max_nodes, &t);
  return t;
}

int64_t PagedKvCache::Pin(std::span<const int32_t> tokens, std::string_view salt,
                          int64_t ttl_ms) {
  if (!options_.prefix_cache || ttl_ms <= 0) return 0;
  const uint64_t salt_key = PrefixIndex::SaltKeyOf(salt);
  const int64_t bs = pool_->layout().block_size;
  int64_t pinned = 0;
  BlockId parent = kNoBlock;
  for (int64_t k = 0; (k + 1) * bs <= static_cast<int64_t>(tokens.size()); ++k) {
    BlockId b = index_->FindFull(parent, salt_key, tokens.data() + k * bs);
    if (b == kNoBlock) break;
    index_->Pin(b, ttl_ms);
    ++pinned;
    parent = b;
  }
  return pinned;
}

void PagedKvCache::ResetPrefixCache() {
  // A reset drops the cache: the preload would only fill it again.
  if (PreloadRunning()) EndPreload("stopped by a cache reset");
  index_->UnpinAll();  // a reset drops every cached block, pinned or not
  // With a disk tier the replica keeps its DISK blocks, which
  // AllBlocksCleared (every medium) would wipe from a subscriber's view.
  if (sink_ != nullptr && disk_ == nullptr && index_->NoneReferenced()) {
    // Everything goes: one AllBlocksCleared instead of a BlockRemoved each.
    for (BlockId b : index_->ClearCachedSilently()) FreeNode(b);
    for (const auto& g : sliding_) g->DropCached();
    KvEvent e;
    e.kind = KvEvent::Kind::kAllBlocksCleared;
    sink_->Emit(std::move(e));
    return;
  }
  // A reset drops blocks; it does not move them to disk.
  resetting_ = true;
  for (BlockId b = index_->PopLru(); b != kNoBlock; b = index_->PopLru()) FreeNode(b);
  resetting_ = false;
  // Cached sliding blocks of nodes that running sequences still hold go too.
  for (const auto& g : sliding_) g->DropCached();
}

Status PagedKvCache::SetEventSink(KvEventSink* sink) {
  sink_ = sink;
  index_->set_event_sink(sink);
  // The tier logs what it gains and loses from now on, and announces the
  // blocks it already holds (files of an earlier process) in the background.
  if (disk_ != nullptr && sink != nullptr) disk_->EnableChangeLog();
  return OkStatus();
}

std::vector<uint64_t> PagedKvCache::DiskBlockHashes() const {
  return disk_ != nullptr ? disk_->Hashes() : std::vector<uint64_t>{};
}

void PagedKvCache::ApplyDiskChanges() const {
  if (disk_ == nullptr) return;
  for (DiskTierChange& c : disk_->TakeChanges()) {
    if (c.stored) {
      index_->OnDiskStored(c.hash, c.parent_hash, c.tokens);
    } else {
      index_->OnDiskRemoved(c.hash);
    }
    // Events go out when the engine asks (EmitDiskEvents), in log order.
    if (!c.announced || sink_ == nullptr) continue;
    KvEvent e;
    e.kind = c.stored ? KvEvent::Kind::kBlockStored : KvEvent::Kind::kBlockRemoved;
    e.medium = KvMedium::kDisk;
    e.block_hash = c.hash;
    e.parent_hash = c.parent_hash;
    e.token_ids = std::move(c.tokens);
    pending_disk_events_.push_back(std::move(e));
  }
}

void PagedKvCache::EmitDiskEvents() {
  if (disk_ == nullptr) return;
  ApplyDiskChanges();
  std::vector<KvEvent> events;
  events.swap(pending_disk_events_);
  if (sink_ == nullptr) return;
  for (KvEvent& e : events) sink_->Emit(std::move(e));
}

void PagedKvCache::SetDiskEventWake(std::function<void()> wake) {
  if (disk_ != nullptr) disk_->SetWake(std::move(wake));
}

Status PagedKvCache::Check() const {
  KVFORK_RETURN_IF_ERROR(pool_->CheckFreeList());
  KVFORK_RETURN_IF_ERROR(index_->Check());
  const int64_t bs = pool_->layout().block_size;
  std::vector<int32_t> holders(pool_->num_blocks(), 0);
  std::vector<std::vector<int32_t>> side_holders(sliding_.size());
  for (size_t g = 0; g < sliding_.size(); ++g)
    side_holders[g].assign(sliding_[g]->pool().num_blocks(), 0);
  for (const auto& [id, s] : seqs_) {
    auto name = [id = id] { return "sequence " + std::to_string(id); };
    if (s.table.size() != s.blocks.size()) return InternalError(name() + ": table size mismatch");
    if (s.side.size() != sliding_.size())
      return InternalError(name() + ": " + std::to_string(s.side.size()) + " sliding tables for " +
                           std::to_string(sliding_.size()) + " groups");
    for (size_t g = 0; g < sliding_.size(); ++g) {
      const SlidingKvGroup& group = *sliding_[g];
      const SideTable& t = s.side[g];
      const std::string where = name() + ", sliding group " + std::to_string(g);
      if (t.blocks.size() != s.blocks.size() || t.table.size() != s.blocks.size())
        return InternalError(where + ": table length differs from the primary one");
      // The memory bound: exactly the blocks a future query can see are held.
      if (t.first != group.FirstVisibleBlock(static_cast<int64_t>(s.tokens.size())))
        return InternalError(
            where + ": gives back up to block " + std::to_string(t.first) +
            ", its window starts at block " +
            std::to_string(group.FirstVisibleBlock(static_cast<int64_t>(s.tokens.size()))));
      for (size_t i = 0; i < t.blocks.size(); ++i) {
        const BlockId b = t.blocks[i];
        if ((b == kNoBlock) != (static_cast<int64_t>(i) < t.first))
          return InternalError(
              where + ": block " + std::to_string(i) +
              (b == kNoBlock ? " given back inside the window" : " held before the window"));
        if (b == kNoBlock) {
          if (t.table[i] != group.hole()) return InternalError(where + ": hole not the hole");
          continue;
        }
        if (b < 0 || b >= group.pool().num_blocks() || t.table[i] != group.Data(b))
          return InternalError(where + ": bad or stale table entry " + std::to_string(i));
        ++side_holders[g][b];
        // A registered position's block is the one its node has.
        if (static_cast<int64_t>(i) < s.registered && group.AttachedTo(s.blocks[i]) != b)
          return InternalError(where + ": block " + std::to_string(i) +
                               " is not the one attached to its node");
      }
    }
    if (static_cast<int64_t>(s.tokens.size()) > static_cast<int64_t>(s.blocks.size()) * bs)
      return InternalError(name() + ": more tokens than reserved positions");
    if (s.registered > static_cast<int64_t>(s.tokens.size()) / bs)
      return InternalError(name() + ": registered count beyond its full blocks");
    for (size_t i = 0; i < s.blocks.size(); ++i) {
      BlockId b = s.blocks[i];
      if (b < 0 || b >= pool_->num_blocks()) return InternalError(name() + ": bad block id");
      if (s.table[i] != pool_->Data(b)) return InternalError(name() + ": stale table entry");
      ++holders[b];
    }
    for (int64_t i = 0; i < s.registered; ++i) {
      BlockId b = s.blocks[i];
      BlockId parent = i > 0 ? s.blocks[i - 1] : kNoBlock;
      if (!index_->IsRegistered(b) || !index_->IsFull(b) || index_->parent(b) != parent ||
          index_->salt_key(b) != s.salt_key ||
          !std::equal(index_->tokens(b).begin(), index_->tokens(b).end(),
                      s.tokens.begin() + i * bs)) {
        return InternalError(name() + ": block " + std::to_string(i) +
                             " is not registered under its own tokens and parent");
      }
    }
  }
  // The preload's batch in flight: read into blocks it holds alone.
  if (preload_ != nullptr)
    for (const auto& batch : preload_->batches)
      for (BlockId b : batch.blocks) ++holders[b];
  for (BlockId b = 0; b < pool_->num_blocks(); ++b) {
    auto name = [b] { return "block " + std::to_string(b); };
    int32_t rc = pool_->refcount(b);
    if (rc != holders[b]) {
      return InternalError(name() + ": refcount " + std::to_string(rc) + " but " +
                           std::to_string(holders[b]) + " tables hold it");
    }
    bool free = pool_->IsFree(b);
    bool cached = rc == 0 && index_->IsRegistered(b);
    int states = (free ? 1 : 0) + (rc > 0 ? 1 : 0) + (cached ? 1 : 0);
    if (states != 1) {
      return InternalError(name() + " is in " + std::to_string(states) +
                           " states (free/referenced/cached), not exactly one");
    }
  }
  for (size_t g = 0; g < sliding_.size(); ++g)
    KVFORK_RETURN_IF_ERROR(sliding_[g]->Check(side_holders[g], *index_));
  return OkStatus();
}

}  // namespace kvfork
