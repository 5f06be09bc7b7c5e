// The KV cache the engine talks to: one interface, two backends.
//
//   paged (PagedKvCache): a pool of fixed-size blocks shared between sequences
//     through a prefix index (trie of blocks keyed by parent, token ids, salt).
//   dense (DenseKvCache): each sequence owns one contiguous slot reserved for
//     its whole context; finished sequences stay as snapshots that a new
//     prompt copies its longest matching prefix from (llama.cpp-like).
//
// Both hand the model the same thing: a block table (base addresses of blocks
// in the kernels/kv_layout.h format), so Model::Forward reads either through
// the same code.
//
// Life of a sequence (the engine's calls, in order):
//   Match(prompt, salt)          optional, read-only: how much would be reused
//   Admit(prompt, salt, n)       new sequence; adopts the cached prefix (shared
//                                full blocks + copied tail), reserves room for
//                                n positions; all-or-nothing
//   Reserve(seq, n)              make the table cover positions [0, n)
//   ... Model::Forward writes K/V of positions [NumTokens, NumTokens + k) ...
//   Append(seq, tokens)          the k tokens whose K/V are now written; a
//                                block is registered in the index the moment
//                                it fills, so a concurrent request shares it
//   Fork(seq)                    n > 1 sampling: a new sequence sharing seq's
//                                full blocks
//   Release(seq)                 registers the partial tail, drops the refs;
//                                blocks stay cached until evicted
//
// Thread affinity: not thread-safe; one thread (the engine thread) calls
// every method. Cost: Match/Admit are O(matched blocks) plus one tail copy;
// Append is O(tokens); eviction is O(log n) per block.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"
#include "kernels/kv_group.h"
#include "kv/kv_group_stats.h"
#include "kernels/kv_layout.h"
#include "kv/disk_tier.h"
#include "kv/kv_events.h"
#include "kv/prefix_tree.h"

namespace kvfork {

// Identifies a sequence inside one KvCache. Never reused within a cache.
using SeqId = int64_t;

enum class KvBackend { kPaged, kDense };

const char* KvBackendName(KvBackend backend);
// "paged" | "dense" | "auto". auto = paged whenever max_num_seqs > 1 (the
// dense backend is only a baseline: it cannot share a prefix in place).
StatusOr<KvBackend> ParseKvBackend(std::string_view name, int64_t max_num_seqs);
// "bf16" | "f32" | "int8"; the error names the flag --kv-dtype.
StatusOr<KvDType> ParseKvDType(std::string_view name);
// "on" | "off"; the error names the flag --prefix-tail-copy.
StatusOr<bool> ParseOnOff(std::string_view flag, std::string_view value);

struct KvCacheOptions {
  // Per-block layout (layers, kv heads, head dim, block size, dtype); from
  // Model::MakeKvLayout. Must be complete (all fields > 0).
  KvLayout layout;
  // Pool size in blocks; wins over cache_mib when > 0.
  int64_t num_blocks = 0;
  // Pool size in MiB when num_blocks == 0; 0 = DefaultKvCacheBytes() (logged).
  int64_t cache_mib = 0;
  // Off (--no-prefix-cache): nothing is registered, nothing is reused.
  bool prefix_cache = true;
  // Copy the matched tokens of a partially matching block into a private one
  // (--prefix-tail-copy on|off). Off: reuse floors to the block boundary.
  bool tail_copy = true;
  // Dense only: positions reserved per sequence slot (the context length).
  // Paged ignores it.
  int64_t max_context = 0;
  // The disk tier (paged only, disk_tier.h): "" = off (--kv-disk-dir).
  std::string disk_dir;
  int64_t disk_capacity_bytes = 0;  // --kv-disk-gib
  int64_t disk_queue_blocks = 64;   // evicted blocks waiting to be written
  // false: Admit reads the prompt's disk run before it returns. true: Admit
  // starts the reads on the cache's I/O threads (disk_loader.h) and returns
  // a loading sequence (Loading, FinishLoad) that the engine steps around,
  // so other sequences keep decoding while it loads.
  bool disk_async_reads = false;
  // The I/O threads that read disk runs (disk_loader.h): 0 = the cores,
  // clamped to [2, 4]; else 1-16. DiskTierOptions::prefault. Both are
  // there to measure the read path (bench/disk/disk_read_profile.cc).
  int disk_read_threads = 0;
  bool disk_prefault = true;
  // Tests: DiskTierOptions::read_hook (a slow disk, say).
  std::function<void(uint64_t hash)> disk_read_hook;
  // Preload at start (--kv-disk-preload-gib; docs/kv_cache.md): the most
  // pool bytes the disk blocks written last are read into, in the
  // background, before any request asks for them (StepBackground). 0 =
  // off; < 0 = half the pool. Never more than the pool's free blocks.
  int64_t disk_preload_bytes = 0;
  // The model weights' identity for the disk tier's fingerprint (the caller
  // computes it, e.g. ModelFilesFingerprint); the KV layout and the ISA level
  // are added by the cache. Required with disk_dir.
  uint64_t model_fingerprint = 0;
  // The clock pins' TTLs run on, in ms (paged only); empty = steady_clock.
  // Tests pass a fake one.
  std::function<int64_t()> clock_ms;
  // Paged only: the model's layer groups (Model::MakeKvGroups: the global
  // group first, then one per sliding window). With a sliding group, each
  // group gets its own pool of its layers (sizes: sliding_blocks) and each
  // sequence a table per group; a sliding group's blocks before the window
  // are given back. Empty, or the global group alone: one pool of `layout`
  // (every layer). Not with disk_dir yet (InvalidArgument). The dense
  // backend ignores it.
  std::vector<KvGroup> groups;
  // With sliding groups, the pool of num_blocks blocks of every layer is
  // split: each sliding group gets sliding_blocks blocks of its layers (0 =
  // auto: half of num_blocks, at least one window plus max_step_tokens and
  // two blocks, so a sequence alone always progresses), and the global group
  // the bytes left (at least num_blocks blocks). A model without global
  // layers gives its sliding group num_blocks blocks and the global group
  // 4 * num_blocks blocks of 0 bytes (prefix index nodes only).
  int64_t sliding_blocks = 0;
  // The most positions one Forward writes for a sequence (the engine's
  // --max-num-batched-tokens); sizes the sliding pools' floor. 0 = none.
  int64_t max_step_tokens = 0;
};

// What the index holds for a prompt. Tokens [0, num_reused_tokens) need no
// compute; num_reused_tokens <= prompt length - 1 so the last prompt token is
// always computed (logits exist).
struct PrefixMatch {
  int64_t num_reused_tokens = 0;  // = shared_blocks * block_size + tail_tokens
  int64_t num_shared_blocks = 0;  // full blocks shared in place (paged only)
  int64_t num_tail_tokens = 0;    // tokens copied into a fresh private block
  // Admit with async disk reads: tokens after num_reused_tokens whose blocks
  // are being read from disk; FinishLoad tells how many came back.
  int64_t num_loading_tokens = 0;
};

// Counters; "now" marks a gauge, the rest are cumulative since creation.
struct KvCacheStats {
  int64_t blocks_total = 0;
  int64_t blocks_free = 0;    // now: on the free list
  int64_t blocks_used = 0;    // now: in at least one running sequence's table
  int64_t blocks_cached = 0;  // now: refcount 0, kept for reuse (paged: in the
                              // index; dense: snapshot slots' blocks)
  int64_t block_bytes = 0;
  int64_t num_sequences = 0;         // now: admitted and not released
  int64_t queries_tokens = 0;        // sum of prompt lengths given to Admit
  int64_t hits_tokens = 0;           // sum of num_reused_tokens of those admits
  int64_t tail_copied_tokens = 0;    // of hits_tokens, tokens reused by copying
  int64_t evictions = 0;             // blocks (paged) or snapshots' blocks (dense) evicted
  int64_t peak_used_blocks = 0;      // max of blocks_used
  int64_t peak_resident_blocks = 0;  // max of blocks_used + blocks_cached
  int64_t pinned_blocks = 0;         // now: blocks pinned by cache control (Pin)
  int64_t pinned_evictions = 0;      // pinned blocks evicted before their TTL ran out
  // Disk tier (all zero when off): its own counters, and of admitted
  // prompts, the blocks read back from disk and used (full blocks and a
  // partial tail block alike) and the lookups whose next full block was
  // neither in the pool nor on disk.
  bool disk_enabled = false;
  DiskTierStats disk;
  int64_t disk_hit_blocks = 0;
  int64_t disk_miss_lookups = 0;
  // Read or recompute (docs/kv_cache.md): blocks of admitted prompts that were
  // on disk but computed, because reading them was estimated to take longer;
  // the estimates now, in ns (0 = not measured yet): a disk block's read (wall
  // time of the last loads per block) and a prefill token (the engine's).
  int64_t disk_recomputed_blocks = 0;
  double disk_read_ns_per_block = 0;
  double prefill_ns_per_token = 0;
  // Preload at start: blocks read into the pool and registered as cached,
  // their bytes (pool bytes), the blocks it planned, whether it still runs
  // (now) and how long it took from the cache's creation to its end (ms, 0
  // while it runs or when off). Blocks a request registered first are
  // neither read nor counted.
  int64_t disk_preloaded_blocks = 0;
  int64_t disk_preloaded_bytes = 0;
  int64_t disk_preload_planned_blocks = 0;
  bool disk_preload_running = false;
  double disk_preload_ms = 0;
  // Every layer group together (the blocks_* above and block_bytes are the
  // primary pool's: with sliding groups, the global layers' only): the most
  // bytes of KV blocks held by running sequences, and held or cached.
  int64_t peak_used_kv_bytes = 0;
  int64_t peak_resident_kv_bytes = 0;
  std::vector<KvGroupStats> sliding;  // paged with sliding groups: one per group
  int64_t peak_used_bytes() const { return peak_used_blocks * block_bytes; }
  // KV bytes at peak: blocks holding data for running or cached sequences.
  int64_t peak_resident_bytes() const { return peak_resident_blocks * block_bytes; }
};

class KvCache {
 public:
  virtual ~KvCache() = default;

  // Reserves the whole pool up front (mmap, pages touched lazily).
  static StatusOr<std::unique_ptr<KvCache>> Create(KvBackend backend,
                                                   const KvCacheOptions& options);

  virtual KvBackend backend() const = 0;
  virtual const KvLayout& layout() const = 0;
  // Most positions one sequence can hold (dense: its slot; paged: the pool).
  virtual int64_t max_sequence_tokens() const = 0;

  // Read-only lookup: what Admit would reuse now. Does not touch LRU ticks or
  // stats.
  virtual PrefixMatch Match(std::span<const int32_t> prompt, std::string_view salt) const = 0;

  // Starts a sequence for prompt: adopts the cached prefix and reserves room
  // for reserve_tokens positions (>= the reused count; pass prompt.size() to
  // prefill in one go). On ResourceExhausted nothing changed. The reused
  // tokens count as appended: NumTokens(seq) == match->num_reused_tokens.
  virtual StatusOr<SeqId> Admit(std::span<const int32_t> prompt, std::string_view salt,
                                int64_t reserve_tokens, PrefixMatch* match) = 0;

  // Makes BlockTable(seq) cover positions [0, num_positions), evicting LRU
  // cached leaves if the free list runs short. All-or-nothing:
  // ResourceExhausted (nothing allocated) when free + evictable is too small,
  // OutOfRange past max_sequence_tokens().
  virtual Status Reserve(SeqId seq, int64_t num_positions) = 0;

  // Blocks a Reserve(seq, num_positions) would have to take from the pool
  // (0 if already covered); for scheduling decisions.
  virtual int64_t BlocksNeeded(SeqId seq, int64_t num_positions) const = 0;
  // Blocks a caller can still obtain: free + evictable cached.
  virtual int64_t AvailableBlocks() const = 0;

  // Records tokens whose K/V the model has just written at positions
  // [NumTokens(seq), NumTokens(seq) + tokens.size()); they must be reserved.
  // Registers each block that fills (paged). May replace a just-filled block
  // with an identical cached one (same bits by invariant 1), so re-read
  // BlockTable() before every Forward.
  virtual Status Append(SeqId seq, std::span<const int32_t> tokens) = 0;

  // A new sequence holding the same tokens (n > 1). Paged: full blocks are
  // shared, the partial last block is copied. ResourceExhausted if no room.
  virtual StatusOr<SeqId> Fork(SeqId seq) = 0;

  // Ends a sequence. Paged: registers its partial tail block, drops its
  // references; its blocks stay cached. Dense: its slot becomes a snapshot.
  virtual void Release(SeqId seq) = 0;

  // The sequence's block table: BlockTableSize(seq) base addresses, valid
  // until the next call that mutates this sequence.
  virtual uint8_t* const* BlockTable(SeqId seq) const = 0;
  // The layer groups the cache keeps a table for (Model::MakeKvGroups), or
  // empty when one table (BlockTable) holds every layer in layout(). Callers
  // then pass them as ForwardBatch::kv_groups with GroupBlockTable(seq, g).
  virtual std::span<const KvGroup> kv_groups() const { return {}; }
  // Group g's table (valid like BlockTable's); group 0 is BlockTable.
  virtual uint8_t* const* GroupBlockTable(SeqId seq, int group) const {
    (void)group;
    return BlockTable(seq);
  }
  virtual int64_t BlockTableSize(SeqId seq) const = 0;
  virtual int64_t NumTokens(SeqId seq) const = 0;        // positions with K/V written
  virtual int64_t NumReusedTokens(SeqId seq) const = 0;  // adopted at Admit
  virtual std::span<const int32_t> Tokens(SeqId seq) const = 0;

  virtual KvCacheStats Stats() const = 0;
  // The block counts and at most max_nodes blocks of the prefix tree
  // (prefix_tree.h). The dense backend has no tree: has_tree false, no nodes.
  virtual PrefixTreeSnapshot SnapshotPrefixTree(int64_t max_nodes) const;
  // Cache control (issue 25): pins the full blocks of tokens that are in the
  // prefix index under salt (the chain from the first block, as far as it
  // is cached) for ttl_ms: they are evicted only after it, or when nothing
  // else can be. Returns the blocks pinned. The dense backend pins nothing
  // (0).
  virtual int64_t Pin(std::span<const int32_t> tokens, std::string_view salt, int64_t ttl_ms) {
    (void)tokens, (void)salt, (void)ttl_ms;
    return 0;
  }
  // Drops every cached (unreferenced) block / snapshot; running sequences
  // are untouched; pins go too. With an event sink: AllBlocksCleared when the index is
  // empty afterwards, else one BlockRemoved per dropped full block.
  virtual void ResetPrefixCache() = 0;

  // Announces the prefix index's full blocks to sink (kv_events.h) from now
  // on; nullptr stops. The sink must outlive the cache. FailedPrecondition on
  // the dense backend, which has no block index to announce. With a disk
  // tier, its blocks are announced too (medium DISK, EmitDiskEvents).
  virtual Status SetEventSink(KvEventSink* sink) = 0;
  // The stable hashes (block_hash.h) of every full block in the prefix index
  // now, referenced or cached: the set a KV-event subscriber rebuilds. Empty
  // for the dense backend. Cost O(blocks).
  virtual std::vector<uint64_t> BlockHashes() const = 0;
  // The hashes of every full block on the disk tier, sorted (empty when
  // off): the DISK set a subscriber rebuilds once EmitDiskEvents has run and
  // no write is pending. Cost O(disk blocks).
  virtual std::vector<uint64_t> DiskBlockHashes() const { return {}; }
  // Emits, to the event sink, the disk tier's changes since the last call
  // (BlockStored / BlockRemoved with medium DISK; disk_tier.h's change log).
  // The engine calls it every step and when woken by the tier.
  virtual void EmitDiskEvents() {}
  // Called (from the tier's writer thread or any other) when disk changes
  // wait for EmitDiskEvents; nullptr stops it and waits for a running call.
  virtual void SetDiskEventWake(std::function<void()> wake) { (void)wake; }
  // Async disk reads (KvCacheOptions::disk_async_reads): whether seq's disk
  // run is still being read. A loading sequence holds its reserved blocks,
  // NumTokens() counts only the pool part of its match, and it may be
  // released (the reads are cancelled) but not appended to or forked.
  virtual bool Loading(SeqId seq) const {
    (void)seq;
    return false;
  }
  // Once seq's reads have all finished: registers the blocks that came back
  // (chain order, up to the first that failed; the rest is computed), counts
  // them as reused (NumTokens grows), fills match and returns true. False
  // while reads run. True, match untouched, for a sequence not loading.
  virtual bool FinishLoad(SeqId seq, PrefixMatch* match) {
    (void)seq, (void)match;
    return true;
  }
  // Waits at most timeout_ms until some loading sequence's reads finish.
  virtual void WaitForLoads(int64_t timeout_ms) { (void)timeout_ms; }
  // Work the cache does between steps on the engine thread: the preload at
  // start (KvCacheOptions::disk_preload_bytes) registers the blocks its
  // reads brought back and starts the next reads. Cheap when idle; call
  // it when wake (SetBackgroundWake) was called and once at start.
  virtual void StepBackground() {}
  // Called from the cache's threads when StepBackground has work; nullptr
  // stops it and waits for a running call.
  virtual void SetBackgroundWake(std::function<void()> wake) { (void)wake; }
  // The engine's measured cost of prefilling a token, ns (0 = unknown): the
  // read-or-recompute rule compares a block's read with block_size of them.
  virtual void SetPrefillCost(double ns_per_token) { (void)ns_per_token; }
  // The disk tier (nullptr when off or dense). Unlike the cache, it is
  // thread-safe: its Stats() may be read from any thread.
  virtual DiskTier* disk_tier() const { return nullptr; }
  // Verifies invariant 2 (DESIGN.md): every block is exactly one of free,
  // referenced (refcount == number of tables holding it) or cached; the index
  // and the LRU agree with the blocks. Cost O(blocks + table entries).
  virtual Status Check() const = 0;
};

// A sensible pool size when neither --kv-blocks nor --kv-cache-mib is given:
// a quarter of MemAvailable, at least 64 MiB, at most 16 GiB.
int64_t DefaultKvCacheBytes();

// Pool size in blocks for options (num_blocks, else cache_mib, else default);
// InvalidArgument naming the flag when it is not positive or too small.
StatusOr<int64_t> ResolveNumBlocks(const KvCacheOptions& options);

// Validates a layout (every dimension positive); the error names the field.
Status ValidateKvLayout(const KvLayout& layout);

}  // namespace kvfork
