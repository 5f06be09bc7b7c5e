// The paged backend: sequences hold block tables into one BlockPool; full
// blocks are registered in a PrefixIndex the moment they fill and are shared
// in place by every sequence whose prompt starts with them. See kv_cache.h
// for the call protocol and docs/kv_cache.md for the invariants.
//
// Refcount of a block == number of sequence tables holding it. Only
// registered (full, immutable) blocks are ever shared; a sequence's private
// blocks (the one being written, reserved ones) have refcount 1.
//
// With a disk tier (options.disk_dir): a full block PopLru evicts is copied
// to the tier's write queue; the index holds the tier's blocks as nodes
// (prefix_index.h: a node has a pool block, a disk location, or both; the
// tier's change log keeps the disk side current); a prefix match walks the
// index past the pool into nodes on disk only, which Admit has the I/O threads
// (disk_loader.h) read into the sequence's new blocks, where reading beats
// recomputing (docs/kv_cache.md, "Read or recompute"); they are registered
// when the load is collected (at once, or by FinishLoad with async reads);
// the destructor (a clean shutdown) writes every registered block not yet on
// disk, the partial tail blocks too (a partial block on disk is read into
// the sequence's tail block, like the pool's tail copy). At creation, the
// preload (options.disk_preload_bytes, paged_kv_cache_preload.cc) starts
// reading the blocks written last into free pool blocks in the background;
// StepBackground registers them as cached.
//
// With sliding-window layer groups (options.groups, issue 24): the primary
// pool holds the global group's layers and its blocks are the prefix index's
// nodes; each sliding group has its own pool (sliding_kv_group.h) and each
// sequence a table per group, in which the blocks before the window of its
// next query are given back (holes). docs/kv_cache.md, "Sliding windows".
#pragma once

#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <span>
#include <string_view>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "kv/block_pool.h"
#include "kv/disk_loader.h"
#include "kv/disk_preload.h"
#include "kv/kv_cache.h"
#include "kv/prefix_index.h"
#include "kv/sliding_kv_group.h"

namespace kvfork {

class PagedKvCache final : public KvCache {
 public:
  static StatusOr<std::unique_ptr<PagedKvCache>> Create(const KvCacheOptions& options);
  ~PagedKvCache() override;

  KvBackend backend() const override { return KvBackend::kPaged; }
  // Every layer's layout (with layer groups, the primary pool holds only
  // the global ones: primary_layout()).
  const KvLayout& layout() const override { return options_.layout; }
  const KvLayout& primary_layout() const { return pool_->layout(); }
  int64_t max_sequence_tokens() const override {
    return pool_->num_blocks() * pool_->layout().block_size;
  }

  PrefixMatch Match(std::span<const int32_t> prompt, std::string_view salt) const override;
  StatusOr<SeqId> Admit(std::span<const int32_t> prompt, std::string_view salt,
                        int64_t reserve_tokens, PrefixMatch* match) override;
  Status Reserve(SeqId seq, int64_t num_positions) override;
  int64_t BlocksNeeded(SeqId seq, int64_t num_positions) const override;
  int64_t AvailableBlocks() const override;
  Status Append(SeqId seq, std::span<const int32_t> tokens) override;
  StatusOr<SeqId> Fork(SeqId seq) override;
  void Release(SeqId seq) override;

  uint8_t* const* BlockTable(SeqId seq) const override { return Get(seq).table.data(); }
  int64_t BlockTableSize(SeqId seq) const override {
    return static_cast<int64_t>(Get(seq).blocks.size());
  }
  int64_t NumTokens(SeqId seq) const override {
    return static_cast<int64_t>(Get(seq).tokens.size());
  }
  int64_t NumReusedTokens(SeqId seq) const override { return Get(seq).reused; }
  std::span<const int32_t> Tokens(SeqId seq) const override { return Get(seq).tokens; }
  // Block ids of a sequence's table (tests and diagnostics).
  std::span<const BlockId> BlockIds(SeqId seq) const { return Get(seq).blocks; }
  std::span<const KvGroup> kv_groups() const override {
    return sliding_.empty() ? std::span<const KvGroup>()
                            : std::span<const KvGroup>(options_.groups);
  }
  uint8_t* const* GroupBlockTable(SeqId seq, int group) const override {
    return group == 0 ? Get(seq).table.data() : Get(seq).side[group - 1].table.data();
  }
  // Sliding group g's block ids of a sequence (kNoBlock: given back).
  std::span<const BlockId> SlidingBlockIds(SeqId seq, int g) const {
    return Get(seq).side[g].blocks;
  }

  KvCacheStats Stats() const override;
  PrefixTreeSnapshot SnapshotPrefixTree(int64_t max_nodes) const override;
  void ResetPrefixCache() override;
  int64_t Pin(std::span<const int32_t> tokens, std::string_view salt, int64_t ttl_ms) override;
  Status SetEventSink(KvEventSink* sink) override;
  std::vector<uint64_t> BlockHashes() const override { return index_->FullBlockHashes(); }
  std::vector<uint64_t> DiskBlockHashes() const override;
  void EmitDiskEvents() override;
  void SetDiskEventWake(std::function<void()> wake) override;
  bool Loading(SeqId seq) const override { return Get(seq).load != nullptr; }
  bool FinishLoad(SeqId seq, PrefixMatch* match) override;
  void WaitForLoads(int64_t timeout_ms) override;
  void SetPrefillCost(double ns_per_token) override { prefill_ns_per_token_ = ns_per_token; }
  void StepBackground() override;
  void SetBackgroundWake(std::function<void()> wake) override;
  // Blocks read per batch, and batches in flight (two, so the I/O threads
  // read the next while the engine thread registers one, or runs a step): a
  // request arriving mid-preload reads the blocks it needs itself, so at
  // most the batches in flight are read twice (the second copy is freed:
  // same bits); its reads go before the batches' (DiskLoader).
  static constexpr size_t kPreloadBatch = 32;
  static constexpr size_t kPreloadBatchesInFlight = 2;
  // Whether the preload at start still plans or reads (tests wait on it).
  bool PreloadRunning() const { return preload_ != nullptr && !preload_->done; }
  Status Check() const override;

  const BlockPool& pool() const { return *pool_; }
  const PrefixIndex& index() const { return *index_; }
  // nullptr when the disk tier is off.
  DiskTier* disk() const { return disk_.get(); }
  DiskTier* disk_tier() const override { return disk_.get(); }
  // Writes every registered block not yet on disk (full ones, and partial
  // ones that have a parent), on this thread (the destructor calls it);
  // returns how many were written.
  int64_t WriteAllToDisk();

 private:
  // A sequence's table in one sliding group: as long as the primary one.
  struct SideTable {
    std::vector<BlockId> blocks;  // kNoBlock for [0, first): given back
    std::vector<uint8_t*> table;  // the group's Data(blocks[i]), or its hole
    int64_t first = 0;            // == the group's FirstVisibleBlock(tokens.size())
  };
  struct Sequence {
    std::vector<BlockId> blocks;  // [ceil(reserved / block_size)]
    std::vector<uint8_t*> table;  // pool_->Data(blocks[i])
    std::vector<int32_t> tokens;  // tokens with K/V written, position order
    int64_t reused = 0;           // tokens adopted at Admit (or taken at Fork)
    int64_t registered = 0;       // blocks[0, registered) are in the index
    uint64_t salt_key = 0;  // PrefixIndex::SaltKeyOf
    std::vector<SideTable> side;  // [sliding groups]
    // While its disk run is read: the load, the prompt up to the run's end,
    // and whether the chain went on past the run on neither tier.
    std::shared_ptr<DiskLoad> load;
    std::vector<int32_t> load_tokens;
    bool load_miss = false;
    // Tokens reused from a partial block on disk (the load's last job), 0: none.
    int64_t load_tail = 0;
  };
  // What Match found: the shared chain and the tail source.
  struct Plan {
    std::vector<BlockId> shared;
    // The tail: tail_tokens copied from the pool's tail_src, or read from
    // disk_tail (a partial block on disk, after `shared` and `disk`).
    BlockId tail_src = kNoBlock;
    int tail_tokens = 0;
    std::optional<DiskPartialMatch> disk_tail;
    // Full blocks after `shared` found on disk, by hash.
    std::vector<uint64_t> disk;
    bool disk_miss = false;  // the next full block was on neither tier
    // Blocks on disk that will be computed: reading was judged slower.
    int64_t disk_recomputed = 0;
  };

  PagedKvCache(const KvCacheOptions& options, std::unique_ptr<BlockPool> pool,
               std::unique_ptr<DiskTier> disk,
               std::vector<std::unique_ptr<SlidingKvGroup>> sliding);
  // Applies the disk tier's change log to the index (and queues the
  // announced changes as DISK events for EmitDiskEvents). Engine thread; a
  // query (Match, Admit) and every step (StepBackground) call it first, so
  // the planner sees what the tier holds. Const for Match: the log is the
  // index's input, not the cache's state.
  void ApplyDiskChanges() const;
  // The eviction hook: queues a full victim's copy for the disk tier.
  void SpillToDisk(BlockId id);
  DiskBlockWrite DiskCopyOf(BlockId id) const;
  // Starts reading the plan's disk run (the chain after s's first `shared`
  // blocks), then its disk tail, into s's next blocks on the I/O threads.
  std::shared_ptr<DiskLoad> StartLoad(const Plan& plan, int64_t shared,
                                      std::span<const int32_t> prompt, const Sequence& s);
  // Registers what a finished load read back and counts it (FinishLoad).
  void ApplyLoad(Sequence* s);
  // The read-or-recompute rule: whether reading a disk block is estimated
  // to take less time than computing `tokens` of it (true while either is
  // unmeasured).
  bool ReadBeatsCompute(int64_t tokens) const;
  // Sets plan->disk_tail (and tail_tokens) to the partial block on disk
  // under parent_hash matching most of rest[0, max_tail) when it matches
  // more than min_tokens and reading it beats computing them.
  void PlanDiskTail(uint64_t parent_hash, const int32_t* rest, int64_t max_tail,
                    int min_tokens, Plan* plan) const;
  // Readers of a disk run: page-cache copies are CPU-bound, so about the
  // cores, and at least 2 so a cold-cache read waits beside another.
  static constexpr int64_t kMaxDiskReadThreads = 4;
  // Every kProbeEvery-th run judged slower to read is read anyway, so the
  // estimate follows a disk that got faster (or a page cache that warmed).
  static constexpr int64_t kProbeEvery = 16;
  // force_read: skip the read-or-recompute rule (a probe).
  Plan MakePlan(std::span<const int32_t> prompt, uint64_t salt_key,
                bool force_read = false) const;
  const Sequence& Get(SeqId seq) const;
  Sequence& Get(SeqId seq);
  // Takes n blocks off the free list, evicting LRU cached leaves as needed;
  // the caller has checked n <= AvailableBlocks().
  void TakeBlocks(int64_t n, Sequence* s);
  // A reference from a table; a cached block leaves the LRU.
  void Ref(BlockId id);
  // Drops a table's reference; the block becomes cached or free.
  void Unref(BlockId id);
  void RegisterFilled(Sequence* s);
  void UpdatePeaks();
  // Frees a primary block just unregistered, and what its node had attached.
  void FreeNode(BlockId id);
  // Registers id under (parent, salt_key) for tokens, first evicting the
  // cached partial blocks there that tokens make redundant (their tokens a
  // prefix of these): a finished turn's tail, a filled block, a preloaded one.
  void RegisterReplacingPartials(BlockId id, BlockId parent, uint64_t salt_key,
                                 std::span<const int32_t> tokens);
  // Sliding groups: shortens the plan until every group holds the window
  // before its reuse point (kv_cache.md's reuse rule).
  void FitWindows(Plan* plan) const;
  // The highest block index < num_shared some sliding group lacks in the
  // window of the first query after the plan's reuse, num_shared when only
  // the tail source's block is missing, -1 when every group has its window.
  int64_t MissingInWindows(const Plan& plan, int64_t num_shared, bool with_tail) const;
  // Group g's block i of s: share the block attached to node, or attach ours.
  void ShareOrAttach(Sequence* s, size_t g, int64_t i, BlockId node);
  // Gives back each group's blocks before the window of the next query.
  void DropOutOfWindow(Sequence* s);
  // Preload at start (paged_kv_cache_preload.cc): starts the planner.
  void StartPreload();
  // Reads the plan's next blocks not in the pool yet into free blocks, as
  // one batch; false when it started none (none left, or no block free).
  bool StartPreloadBatch();
  // Registers what the front batch read, in chain order, as cached.
  void ApplyPreloadBatch();
  // Ends the preload (cancels the batches in flight, frees their blocks).
  void EndPreload(const char* why);
  // The pool block a plan's block was registered as (by the preload, or by
  // a request first), if it still is; kNoBlock otherwise.
  BlockId PreloadResolved(uint64_t hash) const;
  // Calls the engine's wake (SetBackgroundWake), from the planner's or an
  // I/O thread, when StepBackground has work.
  void WakeBackground();
  // Free + cached blocks of the primary pool alone.
  int64_t PrimaryAvailable() const { return pool_->num_free() + index_->num_cached(); }

  KvCacheOptions options_;
  std::unique_ptr<BlockPool> pool_;
  std::unique_ptr<PrefixIndex> index_;
  std::unordered_map<SeqId, Sequence> seqs_;
  SeqId next_seq_ = 1;
  KvCacheStats stats_;
  KvEventSink* sink_ = nullptr;
  mutable std::vector<KvEvent> pending_disk_events_;  // ApplyDiskChanges -> EmitDiskEvents
  std::unique_ptr<DiskTier> disk_;
  bool resetting_ = false;  // ResetPrefixCache: evictions are not spilled
  std::vector<std::unique_ptr<SlidingKvGroup>> sliding_;  // options.groups[1..]
  double prefill_ns_per_token_ = 0;  // SetPrefillCost
  double disk_ns_per_block_ = 0;     // moving average of loads' wall time per block
  int64_t runs_recomputed_ = 0;      // disk runs the rule chose to compute
  struct Preload {
    std::unique_ptr<DiskPreloadPlanner> planner;  // until its plan is taken
    std::vector<PreloadBlock> plan;  // whole chains in chain order
    size_t next = 0;                 // the next plan entry to consider
    bool done = false;
    int64_t start_ns = 0;
    // A batch being read: its load, each job's pool block and plan entry.
    struct Batch {
      std::shared_ptr<DiskLoad> load;
      std::vector<BlockId> blocks;
      std::vector<size_t> entries;
    };
    std::deque<Batch> batches;  // plan order; applied from the front
    std::unordered_set<uint64_t> in_flight;  // full blocks the batches read
    std::unordered_map<uint64_t, BlockId> resolved;  // plan hash -> pool block
  };
  std::unique_ptr<Preload> preload_;
  std::mutex wake_mu_;  // held while background_wake_ runs, and to replace it
  std::function<void()> background_wake_;
  // Last: its threads write into pool_'s blocks and read disk_, so it stops first.
  std::unique_ptr<DiskLoader> loader_;
};

}  // namespace kvfork
