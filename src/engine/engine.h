// The engine: one thread that owns the model, the KV cache and the scheduler
// and loops Step(); other threads Submit() requests and read their streams.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "core/status.h"
#include "engine/request.h"
#include "kv/disk_tier.h"
#include "kv/kv_group_stats.h"
#include "kv/kv_events.h"
#include "kv/prefix_tree.h"

namespace kvfork {

class Model;
class Tokenizer;

struct EngineOptions {
  int threads = 0;                       // compute threads; 0 = all cores
  int64_t max_num_batched_tokens = 512;  // tokens per step (decode + prefill chunks)
  int64_t max_num_seqs = 8;              // sequences running at once
  int64_t max_queue = 256;               // waiting requests before Submit refuses
  int64_t max_model_len = 0;             // prompt + output limit; 0 = the model's context
  std::string kv_backend = "auto";       // auto | paged | dense
  std::string kv_dtype = "bf16";         // bf16 | f32 | int8 | q4 | q4r
  int kv_block_size = 16;                // tokens per KV block
  int64_t kv_cache_mib = 0;              // pool size; 0 = a share of free memory
  int64_t kv_blocks = 0;                 // pool size in blocks (overrides mib)
  // The prefix cache's disk tier (kv/disk_tier.h, docs/kv_cache.md): "" = off.
  std::string kv_disk_dir;
  int64_t kv_disk_gib = 16;           // its LRU bound on disk
  // The model weights' identity in the tier's fingerprint
  // (kv/model_files_fingerprint.h); required with kv_disk_dir.
  uint64_t kv_model_fingerprint = 0;
  // Preload at start (docs/kv_cache.md): GiB of the pool that the blocks
  // written last are read into in the background; 0 = off (the library
  // default), < 0 = half the pool (`kvfork serve`'s default).
  double kv_disk_preload_gib = 0;
  // Tests: called before each disk block read, on an I/O thread (a slow
  // disk). Empty in production.
  std::function<void(uint64_t hash)> kv_disk_read_hook_for_testing;
  bool prefix_cache = true;              // --no-prefix-cache turns it off
  bool prefix_tail_copy = true;          // copy matched tokens of a partial block
  std::string schedule = "fcfs";         // fcfs | longest-prefix
  // Target time of a step that carries decoding sequences, which bounds the
  // prefill beside them (StepBudget): > 0 ms, 0 = off (the library default,
  // so batch runs and tests get max_num_batched_tokens every step), < 0 =
  // auto (4 times a step's decode part, at least 400 ms; `kvfork serve`'s
  // default).
  double max_step_ms = 0;
  // One small forward pass on private KV memory before Create returns
  // (engine/warmup.h), so the first request does not pay the process's
  // one-time costs. Off by default (tests, batch runs); `kvfork serve` turns
  // it on unless --no-warmup. Changes no answer and no counter.
  bool warmup = false;

  // Called on the engine thread once, when the engine has run a step and
  // then had no work for idle_after_ms; again only after another step.
  // `kvfork serve` hands the allocator's free pages back to the system
  // there (docs/reliability.md). Empty: nothing (the library default).
  std::function<void()> on_idle;
  double idle_after_ms = 500;

  // Where the prefix index announces its blocks (vLLM KV events,
  // kv/kv_event_publisher.h); nullptr = nowhere. Must outlive the engine.
  // The engine flushes one batch per step. Needs the paged backend.
  KvEventSink* kv_event_sink = nullptr;

  // Test hooks, called on the engine thread (leave empty in production).
  // Every logits row a choice samples from [vocab], in order.
  std::function<void(const std::string& request_id, int64_t choice, std::span<const float> row)>
      on_logits_for_testing;
  // After every step: the KV cache's Check() (invariant 2).
  std::function<void(const Status& kv_check)> on_step_for_testing;
};

// Counters for /metrics and /v1/cache/stats. Each is cumulative since start
// unless it says "now".
struct EngineStats {
  int64_t requests_running = 0;  // now
  int64_t requests_waiting = 0;  // now
  int64_t blocks_total = 0;
  int64_t blocks_free = 0;    // now
  int64_t blocks_used = 0;    // now: referenced by a running sequence
  int64_t blocks_cached = 0;  // now: refcount 0, in the prefix index
  int64_t block_bytes = 0;
  int64_t block_size = 0;  // tokens per KV block
  int64_t prefix_queries_tokens = 0;  // prompt tokens looked up in the index
  int64_t prefix_hits_tokens = 0;     // of those, tokens reused
  int64_t tail_copied_tokens = 0;     // reused by copying into a private block
  int64_t evictions = 0;              // blocks evicted from the index
  int64_t preemptions = 0;
  int64_t prompt_tokens = 0;  // prompt tokens of finished requests
  int64_t generation_tokens = 0;
  int64_t requests_finished = 0;
  int64_t kv_bytes_peak = 0;  // max bytes of blocks used or cached
  // The disk tier (all zero when off): its counters, the blocks prompts
  // read back from it and the lookups that found the next block nowhere.
  bool kv_disk_enabled = false;
  DiskTierStats kv_disk;
  int64_t kv_disk_hit_blocks = 0;
  int64_t kv_disk_miss_lookups = 0;
  // Disk blocks computed instead (read or recompute, docs/kv_cache.md).
  int64_t kv_disk_recomputed_blocks = 0;
  // The read-or-recompute rule's estimates now, ns (0 = not measured yet).
  double kv_disk_read_ns_per_block = 0;
  double kv_prefill_ns_per_token = 0;
  // Preload at start (KvCacheStats' disk_preload*): blocks and pool bytes
  // read and registered, blocks planned, running now, ms from start to end.
  int64_t kv_disk_preloaded_blocks = 0;
  int64_t kv_disk_preloaded_bytes = 0;
  int64_t kv_disk_preload_planned_blocks = 0;
  bool kv_disk_preload_running = false;
  double kv_disk_preload_ms = 0;
  // Cache control: blocks pinned now, and pinned blocks evicted before their
  // TTL (nothing unpinned was left).
  int64_t kv_pinned_blocks = 0;
  int64_t kv_pinned_evictions = 0;
  // A sliding-window model on the paged cache's layer groups: each sliding
  // group's pool (the blocks_* above are then the global layers' pool).
  std::vector<KvGroupStats> kv_sliding;
  // Where steps spent their wall-clock time (the scheduler's StepTimes):
  // every step that ran a forward, and the steps that only decoded.
  // other = step - forward - sample (scheduling, KV bookkeeping, stop
  // strings, detokenizing, streaming).
  int64_t steps = 0;
  int64_t step_ns = 0;
  int64_t forward_ns = 0;
  int64_t sample_ns = 0;
  int64_t decode_steps = 0;
  int64_t decode_step_ns = 0;
  int64_t decode_forward_ns = 0;
  int64_t decode_sample_ns = 0;
};

class Engine {
 public:
  virtual ~Engine() = default;

  // Starts the engine thread. model and tokenizer must outlive the engine.
  static StatusOr<std::unique_ptr<Engine>> Create(const EngineOptions& options, Model& model,
                                                  const Tokenizer& tokenizer);

  // Validates the request (errors name the parameter) and queues it. The
  // stream receives tokens, finish events and then kDone or kError.
  virtual StatusOr<std::shared_ptr<RequestStream>> Submit(Request request) = 0;
  // Drops the request at the next step; its stream ends with kFinish
  // (kCancelled) for unfinished choices and kDone. Unknown ids are ignored.
  virtual void Cancel(const std::string& request_id) = 0;
  virtual EngineStats Stats() const = 0;
  // Context length requests may use (prompt + max_tokens).
  virtual int64_t max_context() const = 0;
  // Drops every cached (unreferenced) prefix block.
  virtual void ResetPrefixCache() = 0;
  // Runs the KV cache's Check() (invariant 2: every block free, referenced or
  // cached, counts consistent) on the engine thread between two steps and
  // returns its result; blocks the caller for up to one step. Unavailable
  // once the engine has shut down.
  virtual Status CheckKv() = 0;
  // The stable hashes (kv/block_hash.h) of every full block in the prefix
  // index (cpu) and on the disk tier (disk), sorted, read on the engine
  // thread between two steps after the disk tier's pending events were
  // emitted (waits up to one step): the sets KV-event subscribers rebuild.
  // Unavailable once shut down.
  virtual StatusOr<KvBlockHashSets> KvBlockHashes() = 0;
  // Cache control: pins the cached full blocks of tokens under salt for
  // ttl_ms (KvCache::Pin) on the engine thread between two steps; returns
  // the blocks pinned (0 on the dense backend). Unavailable once shut down.
  virtual StatusOr<int64_t> PinPrefix(std::vector<int32_t> tokens, std::string salt,
                                      int64_t ttl_ms) = 0;
  // The KV block counts and at most max_nodes blocks of the prefix tree
  // (kv/prefix_tree.h), copied on the engine thread between two steps:
  // blocks the caller for up to one step, costs the engine O(max_nodes).
  // Unavailable once the engine has shut down.
  virtual StatusOr<PrefixTreeSnapshot> SnapshotPrefixTree(int64_t max_nodes) = 0;
  // Finishes or aborts every request, releases every block, joins the thread.
  virtual void Shutdown() = 0;
};

}  // namespace kvfork
