// Engine::Create and the engine thread: Submit/Cancel hand requests over
// under a mutex; the thread owns the scheduler, the KV cache and the model
// calls, and sleeps when there is nothing to do.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <functional>
#include <future>
#include <mutex>
#include <thread>
#include <unordered_set>
#include <vector>

#include "core/logging.h"
#include "engine/engine.h"
#include "engine/request_validation.h"
#include "engine/scheduler.h"
#include "engine/warmup.h"
#include "kernels/ops.h"
#include "kv/kv_cache.h"
#include "model/model.h"
#include "tokenizer/tokenizer.h"

namespace kvfork {
namespace {

// The context a request may use: the model's, or less with --max-model-len
// (vLLM's flag). The dense backend sizes its slots by it.
int64_t ModelContext(const EngineOptions& options, const Model& model) {
  const int64_t model_context = model.config().max_position_embeddings;
  return options.max_model_len > 0 ? std::min<int64_t>(model_context, options.max_model_len)
                                   : model_context;
}

class EngineImpl final : public Engine {
 public:
  EngineImpl(const EngineOptions& options, Model& model, const Tokenizer& tokenizer,
             std::unique_ptr<KvCache> kv, int64_t max_context)
      : options_(options),
        kv_(std::move(kv)),
        pool_(options.threads > 0 ? options.threads : ThreadPool::DefaultThreads()),
        max_context_(max_context) {
    SchedulerOptions so;
    so.max_num_batched_tokens = options.max_num_batched_tokens;
    so.max_num_seqs = options.max_num_seqs;
    so.longest_prefix = options.schedule == "longest-prefix";
    so.step_budget.max_step_ms = options.max_step_ms;
    so.step_budget.min_prefill_tokens =
        std::min<int64_t>(options.max_num_batched_tokens, so.step_budget.min_prefill_tokens);
    so.eos_ids = tokenizer.eos_token_ids();
    for (int32_t id : model.config().eos_token_ids)
      if (std::find(so.eos_ids.begin(), so.eos_ids.end(), id) == so.eos_ids.end())
        so.eos_ids.push_back(id);
    so.on_logits = options.on_logits_for_testing;
    scheduler_ = std::make_unique<Scheduler>(so, model, *kv_, pool_, tokenizer);
    limits_.vocab_size = model.config().vocab_size;
    limits_.max_context = ModelContext(options, model);
    limits_.max_pool_tokens = kv_->max_sequence_tokens();
    UpdateStats();
    if (options.kv_event_sink != nullptr) {
      // The disk tier's writer wakes an idle engine to announce its blocks.
      kv_->SetDiskEventWake([this] {
        {
          std::lock_guard<std::mutex> lock(mu_);
          disk_events_ = true;
        }
        cv_.notify_one();
      });
    }
    // The cache's background work (the preload at start) wakes an idle
    // engine to register what its reads brought back.
    kv_->SetBackgroundWake([this] {
      {
        std::lock_guard<std::mutex> lock(mu_);
        background_ = true;
      }
      cv_.notify_one();
    });
    thread_ = std::thread([this] { Loop(); });
  }

  ~EngineImpl() override {
    Shutdown();
    // Before mu_ and cv_ go: the tier (in kv_) outlives them.
    kv_->SetDiskEventWake(nullptr);
    kv_->SetBackgroundWake(nullptr);
  }

  StatusOr<std::shared_ptr<RequestStream>> Submit(Request request) override {
    KVFORK_RETURN_IF_ERROR(ValidateRequest(request, limits_));
    const SamplingParams& sp = request.sampling;
    const int64_t bs = kv_->layout().block_size;
    const int64_t prompt = static_cast<int64_t>(request.prompt_tokens.size());
    // n choices share the prompt but each needs its own generated tokens and
    // a copied partial block.
    if (sp.n > 1 && prompt + sp.n * (sp.max_tokens + bs) > limits_.max_pool_tokens)
      return OutOfRangeError("request " + request.id + ": n = " + std::to_string(sp.n) +
                             " choices of max_tokens " + std::to_string(sp.max_tokens) +
                             " can never fit the KV pool of " +
                             std::to_string(limits_.max_pool_tokens) + " tokens");
    auto stream = std::make_shared<RequestStream>();
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (stopping_) return UnavailableError("engine is shutting down");
      if (static_cast<int64_t>(submitted_.size()) + waiting_now_ >= options_.max_queue)
        return ResourceExhaustedError("request queue is full (" +
                                      std::to_string(options_.max_queue) + " waiting)");
      if (!ids_.insert(request.id).second)
        return InvalidArgumentError("request id " + request.id + " is already running");
      submitted_.push_back({std::move(request), stream, next_arrival_++});
    }
    cv_.notify_one();
    return stream;
  }

  void Cancel(const std::string& request_id) override {
    {
      std::lock_guard<std::mutex> lock(mu_);
      cancels_.push_back(request_id);
    }
    cv_.notify_one();
  }

  EngineStats Stats() const override {
    int64_t live;
    {
      std::lock_guard<std::mutex> lock(mu_);
      live = static_cast<int64_t>(ids_.size());
    }
    EngineStats s;
    {
      std::lock_guard<std::mutex> lock(stats_mu_);
      s = stats_;
    }
    // The snapshot is published after each step, so a request the engine
    // thread has not scheduled yet (in the inbox, or taken but not yet in a
    // snapshot) would be in neither count, and a caller polling for an idle
    // engine could see one while its own request is pending (a flaky server
    // test did). Count it as waiting. ids_ is read first: a request that ends
    // in between can only make this count one too many for a moment.
    s.requests_waiting = std::max(s.requests_waiting, live - s.requests_running);
    // The disk tier writes on its own thread: read its counters now, not as
    // of the last step (an idle engine publishes no more snapshots).
    if (DiskTier* d = kv_->disk_tier()) s.kv_disk = d->Stats();
    return s;
  }

  int64_t max_context() const override { return max_context_; }

  // EngineOptions::warmup, on the caller's thread before any request can be
  // submitted (the engine thread waits idle and never touches the model or
  // the pool before a request comes).
  Status WarmUp(Model& model, const Tokenizer& tokenizer) {
    const std::vector<int32_t> tokens = WarmUpTokens(tokenizer, model.config().vocab_size);
    KVFORK_ASSIGN_OR_RETURN(WarmUpResult r,
                            WarmUpModel(model, kv_->layout(), kv_->kv_groups(), tokens, pool_));
    KVFORK_LOG(kInfo) << "warm-up: " << r.tokens << " tokens through the model in "
                      << static_cast<double>(r.elapsed_ns) * 1e-6 << " ms";
    return OkStatus();
  }

  void ResetPrefixCache() override {
    {
      std::lock_guard<std::mutex> lock(mu_);
      reset_cache_ = true;
    }
    cv_.notify_one();
  }

  Status CheckKv() override {
    return OnEngineThread<Status>("KV check", [this] { return kv_->Check(); });
  }

  StatusOr<KvBlockHashSets> KvBlockHashes() override {
    return OnEngineThread<StatusOr<KvBlockHashSets>>("KV block hashes", [this] {
      // The disk tier's changes so far go out first, so a subscriber that
      // has read every batch holds these sets once the tier is idle.
      kv_->EmitDiskEvents();
      KvBlockHashSets sets;
      sets.cpu = kv_->BlockHashes();
      std::sort(sets.cpu.begin(), sets.cpu.end());
      sets.disk = kv_->DiskBlockHashes();
      return StatusOr<KvBlockHashSets>(std::move(sets));
    });
  }

  StatusOr<int64_t> PinPrefix(std::vector<int32_t> tokens, std::string salt,
                              int64_t ttl_ms) override {
    return OnEngineThread<StatusOr<int64_t>>(
        "pin", [&] { return kv_->Pin(tokens, salt, ttl_ms); });
  }

  StatusOr<PrefixTreeSnapshot> SnapshotPrefixTree(int64_t max_nodes) override {
    return OnEngineThread<StatusOr<PrefixTreeSnapshot>>(
        "cache snapshot", [&] { return kv_->SnapshotPrefixTree(max_nodes); });
  }

  // Safe from any number of threads at once (the signal path and a
  // destructor, say): one joins, the others wait in call_once until it has.
  void Shutdown() override {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stopping_ = true;
    }
    cv_.notify_one();
    std::call_once(join_once_, [this] { thread_.join(); });
  }

 private:
  // A call that runs on the engine thread between steps, where no sequence
  // is half-updated, so it sees the state a caller would after the last
  // step. run(false) runs it; run(true) answers that the engine shut down.
  using EngineCall = std::function<void(bool shut_down)>;

  // Queues fn for the engine thread and waits for its result (an
  // Unavailable error naming `what` once the engine is shut down). fn may
  // use the caller's locals: the caller waits until it has run.
  template <typename R, typename Fn>
  R OnEngineThread(const char* what, Fn fn) {
    const std::string gone = std::string("engine is shut down: no ") + what;
    std::promise<R> promise;
    std::future<R> result = promise.get_future();
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (stopped_) return UnavailableError(gone);
      calls_.push_back([&promise, &fn, &gone](bool shut_down) {
        if (shut_down) {
          promise.set_value(UnavailableError(gone));
        } else {
          promise.set_value(fn());
        }
      });
    }
    cv_.notify_one();
    return result.get();
  }

  struct Pending {
    Request request;
    std::shared_ptr<RequestStream> stream;
    uint64_t arrival;
  };

  void Loop() {
    for (;;) {
      std::vector<Pending> submitted;
      std::vector<std::string> cancels;
      std::vector<EngineCall> calls;
      bool stop = false;
      bool reset = false;
      {
        std::unique_lock<std::mutex> lock(mu_);
        const auto ready = [&] {
          return stopping_ || !submitted_.empty() || !cancels_.empty() || reset_cache_ ||
                 !calls_.empty() || disk_events_ || background_ || scheduler_->HasWork();
        };
        if (idle_pending_ && options_.on_idle) {
          const std::chrono::duration<double, std::milli> idle_after(options_.idle_after_ms);
          if (!cv_.wait_for(lock, idle_after, ready)) {
            idle_pending_ = false;
            lock.unlock();
            options_.on_idle();
            continue;
          }
        } else {
          cv_.wait(lock, ready);
        }
        disk_events_ = false;
        background_ = false;
        submitted.swap(submitted_);
        cancels.swap(cancels_);
        calls.swap(calls_);
        stop = stopping_;
        reset = reset_cache_;
        reset_cache_ = false;
      }
      for (auto& p : submitted)
        scheduler_->Add(std::move(p.request), std::move(p.stream), p.arrival);
      for (const auto& id : cancels) scheduler_->Cancel(id);
      if (reset) kv_->ResetPrefixCache();
      for (auto& call : calls) call(/*shut_down=*/false);
      if (!stop) kv_->StepBackground();
      if (stop) {
        scheduler_->AbortAll();
        ForgetFinished();
        UpdateStats();
        scheduler_->PushFinalEvents();
        std::lock_guard<std::mutex> lock(mu_);
        stopped_ = true;
        for (auto& call : calls_) call(/*shut_down=*/true);
        calls_.clear();
        FlushKvEvents();
        return;
      }
      if (scheduler_->HasWork()) {
        scheduler_->Step();
        idle_pending_ = true;
        if (options_.on_step_for_testing) options_.on_step_for_testing(kv_->Check());
      }
      ForgetFinished();
      UpdateStats();
      FlushKvEvents();
      scheduler_->PushFinalEvents();
    }
  }

  // The events of this step (or reset), and the disk tier's since the last
  // step, become one batch.
  void FlushKvEvents() {
    if (options_.kv_event_sink == nullptr) return;
    kv_->EmitDiskEvents();
    options_.kv_event_sink->Flush();
  }

  void ForgetFinished() {
    std::vector<std::string> done = scheduler_->TakeFinishedIds();
    std::lock_guard<std::mutex> lock(mu_);
    for (const auto& id : done) ids_.erase(id);
    waiting_now_ = scheduler_->num_waiting();
  }

  void UpdateStats() {
    const KvCacheStats k = kv_->Stats();
    const SchedulerCounters& c = scheduler_->counters();
    EngineStats s;
    s.requests_running = scheduler_->num_running();
    s.requests_waiting = scheduler_->num_waiting();
    s.blocks_total = k.blocks_total;
    s.blocks_free = k.blocks_free;
    s.blocks_used = k.blocks_used;
    s.blocks_cached = k.blocks_cached;
    s.block_bytes = k.block_bytes;
    s.block_size = kv_->layout().block_size;
    s.prefix_queries_tokens = k.queries_tokens;
    s.prefix_hits_tokens = k.hits_tokens;
    s.tail_copied_tokens = k.tail_copied_tokens;
    s.evictions = k.evictions;
    s.preemptions = c.preemptions;
    s.prompt_tokens = c.prompt_tokens;
    s.generation_tokens = c.generation_tokens;
    s.requests_finished = c.requests_finished;
    s.kv_bytes_peak = std::max(k.peak_resident_bytes(), k.peak_resident_kv_bytes);
    s.kv_disk_enabled = k.disk_enabled;
    s.kv_disk = k.disk;
    s.kv_disk_hit_blocks = k.disk_hit_blocks;
    s.kv_disk_miss_lookups = k.disk_miss_lookups;
    s.kv_disk_recomputed_blocks = k.disk_recomputed_blocks;
    s.kv_disk_read_ns_per_block = k.disk_read_ns_per_block;
    s.kv_disk_preloaded_blocks = k.disk_preloaded_blocks;
    s.kv_disk_preloaded_bytes = k.disk_preloaded_bytes;
    s.kv_disk_preload_planned_blocks = k.disk_preload_planned_blocks;
    s.kv_disk_preload_running = k.disk_preload_running;
    s.kv_disk_preload_ms = k.disk_preload_ms;
    s.kv_prefill_ns_per_token = k.prefill_ns_per_token;
    s.kv_pinned_blocks = k.pinned_blocks;
    s.kv_pinned_evictions = k.pinned_evictions;
    s.kv_sliding = k.sliding;
    s.steps = c.all_steps.steps;
    s.step_ns = c.all_steps.step_ns;
    s.forward_ns = c.all_steps.forward_ns;
    s.sample_ns = c.all_steps.sample_ns;
    s.decode_steps = c.decode_steps.steps;
    s.decode_step_ns = c.decode_steps.step_ns;
    s.decode_forward_ns = c.decode_steps.forward_ns;
    s.decode_sample_ns = c.decode_steps.sample_ns;
    std::lock_guard<std::mutex> lock(stats_mu_);
    stats_ = s;
  }

  EngineOptions options_;
  std::unique_ptr<KvCache> kv_;
  ThreadPool pool_;
  int64_t max_context_;
  RequestLimits limits_;
  std::unique_ptr<Scheduler> scheduler_;

  mutable std::mutex mu_;  // guards the hand-over fields below
  std::condition_variable cv_;
  std::vector<Pending> submitted_;
  std::vector<std::string> cancels_;
  std::vector<EngineCall> calls_;             // OnEngineThread callers waiting for the thread
  std::unordered_set<std::string> ids_;       // requests submitted and not yet ended
  int64_t waiting_now_ = 0;
  uint64_t next_arrival_ = 0;
  bool stopping_ = false;
  bool stopped_ = false;  // the thread has returned: nobody runs calls_
  bool reset_cache_ = false;
  bool disk_events_ = false;  // the disk tier logged changes to emit
  // The cache has background work (StepBackground); true at first, so the
  // loop looks once whatever was ready before the wake was set.
  bool background_ = true;
  // Engine thread only: a step ran since on_idle was last called.
  bool idle_pending_ = false;

  mutable std::mutex stats_mu_;
  EngineStats stats_;
  std::once_flag join_once_;
  std::thread thread_;  // last: starts after every member above exists
};

}  // namespace

StatusOr<std::unique_ptr<Engine>> Engine::Create(const EngineOptions& options, Model& model,
                                                 const Tokenizer& tokenizer) {
  if (options.max_num_batched_tokens < 1)
    return InvalidArgumentError("--max-num-batched-tokens must be >= 1, got " +
                                std::to_string(options.max_num_batched_tokens));
  if (options.max_num_seqs < 1)
    return InvalidArgumentError("--max-num-seqs must be >= 1, got " +
                                std::to_string(options.max_num_seqs));
  if (options.max_queue < 1)
    return InvalidArgumentError("--max-queue must be >= 1, got " +
                                std::to_string(options.max_queue));
  if (options.schedule != "fcfs" && options.schedule != "longest-prefix")
    return InvalidArgumentError("--schedule must be fcfs or longest-prefix, got '" +
                                options.schedule + "'");
  if (!(options.max_step_ms < 1e7))  // also refuses NaN
    return InvalidArgumentError("--max-step-ms must be a number of ms below 1e7, 0 (off) or auto");
  if (options.threads < 0)
    return InvalidArgumentError("--threads must be >= 0, got " + std::to_string(options.threads));
  KVFORK_ASSIGN_OR_RETURN(KvBackend backend,
                          ParseKvBackend(options.kv_backend, options.max_num_seqs));
  KVFORK_ASSIGN_OR_RETURN(KvDType dtype, ParseKvDType(options.kv_dtype));
  if (options.kv_block_size < 1 || options.kv_block_size > kMaxAttentionBlockSize)
    return InvalidArgumentError("--kv-block-size must be in [1, " +
                                std::to_string(kMaxAttentionBlockSize) +
                                "] (the attention kernels' limit), got " +
                                std::to_string(options.kv_block_size));
  if (options.max_model_len < 0)
    return InvalidArgumentError("--max-model-len must be >= 0 (0 = the model's context), got " +
                                std::to_string(options.max_model_len));
  const int64_t model_context = ModelContext(options, model);
  KvCacheOptions ko;
  ko.layout = model.MakeKvLayout(dtype, options.kv_block_size);
  ko.num_blocks = options.kv_blocks;
  ko.cache_mib = options.kv_cache_mib;
  ko.prefix_cache = options.prefix_cache;
  ko.tail_copy = options.prefix_tail_copy;
  ko.max_context = model_context;
  // Sliding-window models keep a block table per layer group, so a long
  // sequence holds only its window's blocks in the sliding layers. The disk
  // tier stores blocks of every layer, so with it they run in one table
  // (every block kept, as before layer groups).
  if (backend == KvBackend::kPaged && options.kv_disk_dir.empty()) {
    std::vector<KvGroup> groups = model.MakeKvGroups(dtype, options.kv_block_size);
    if (groups.size() > 1) ko.groups = std::move(groups);
    ko.max_step_tokens = options.max_num_batched_tokens;
  }
  if (!options.kv_disk_dir.empty()) {
    if (options.kv_disk_gib < 1 || options.kv_disk_gib > (int64_t{1} << 24))
      return InvalidArgumentError("--kv-disk-gib must be in [1, 16777216], got " +
                                  std::to_string(options.kv_disk_gib));
    ko.disk_dir = options.kv_disk_dir;
    ko.disk_capacity_bytes = options.kv_disk_gib << 30;
    ko.model_fingerprint = options.kv_model_fingerprint;
    // Prefixes read back on the cache's I/O threads while others decode.
    ko.disk_async_reads = true;
    ko.disk_read_hook = options.kv_disk_read_hook_for_testing;
    const double preload = options.kv_disk_preload_gib;
    if (!std::isfinite(preload) || preload > double{1 << 24})
      return InvalidArgumentError("--kv-disk-preload-gib must be at most 16777216 (negative: "
                                  "half the pool), got " + std::to_string(preload));
    ko.disk_preload_bytes = preload < 0 ? -1 : static_cast<int64_t>(preload * double{1 << 30});
  }
  KVFORK_ASSIGN_OR_RETURN(std::unique_ptr<KvCache> kv, KvCache::Create(backend, ko));
  if (options.kv_event_sink != nullptr)
    KVFORK_RETURN_IF_ERROR(kv->SetEventSink(options.kv_event_sink));
  const int64_t max_context = std::min<int64_t>(model_context, kv->max_sequence_tokens());
  auto engine = std::unique_ptr<EngineImpl>(
      new EngineImpl(options, model, tokenizer, std::move(kv), max_context));
  if (options.warmup) KVFORK_RETURN_IF_ERROR(engine->WarmUp(model, tokenizer));
  return std::unique_ptr<Engine>(std::move(engine));
}

}  // namespace kvfork
