// The engine's step: pick this step's work, run one Model::Forward over it,
// sample, stream, release.
//
// Each Step():
//   1. drop cancelled requests (their blocks go back to the cache); collect
//      prefixes read from disk (a request whose cached prefix continues on
//      disk waits in kLoading while the cache's I/O threads read it, and the
//      steps go on without it; docs/engine.md),
//   2. decode: one token for every running choice, oldest admitted first;
//      when the pool is short, preempt the most recently admitted sequence
//      (its full blocks stay cached, it requeues at the front),
//   3. prefill: continue admitted prompts in chunks, then admit waiting ones
//      (FCFS, or longest cached prefix first) under max_num_batched_tokens
//      and max_num_seqs; while sequences decode, the prefill tokens are
//      also held to what fits a target step time (StepBudget). A waiting prompt that shares a full block with one
//      prefilling right now waits for those blocks instead of computing them
//      twice.
//   4. one Forward; Append the new K/V; fork n > 1 after the prompt;
//   5. sample every choice that gets a token, on the compute pool (each
//      choice has its own Sampler and RNG, so the tokens are the same as
//      sampling one after another), then stream them in order.
//
// Thread affinity: engine thread only. Owns no model or cache: the Engine
// passes them and outlives the scheduler.
#pragma once

#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "core/status.h"
#include "core/thread_pool.h"
#include "engine/constraint_cache.h"
#include "engine/sequence.h"
#include "engine/step_budget.h"
#include "kv/kv_cache.h"
#include "model/model.h"
#include "tokenizer/tokenizer.h"

namespace kvfork {

struct SchedulerOptions {
  int64_t max_num_batched_tokens = 512;
  int64_t max_num_seqs = 8;
  bool longest_prefix = false;   // --schedule longest-prefix
  std::vector<int32_t> eos_ids;  // generation_config + config.json
  // How much prefill a step with decoding sequences may carry (--max-step-ms).
  StepBudgetOptions step_budget;
  // Test hook: every logits row a choice samples from, in order.
  std::function<void(const std::string& request_id, int64_t choice, std::span<const float> row)>
      on_logits;
};

// Where steps spend their time, cumulative wall-clock nanoseconds.
// other = step_ns - forward_ns - sample_ns: scheduling, KV bookkeeping,
// stop strings, detokenizing and streaming.
struct StepTimes {
  int64_t steps = 0;
  int64_t step_ns = 0;     // all of Step()
  int64_t forward_ns = 0;  // Model::Forward
  int64_t sample_ns = 0;   // the samplers (parallel over choices)
};

struct SchedulerCounters {
  int64_t preemptions = 0;
  int64_t prompt_tokens = 0;      // of finished requests
  int64_t generation_tokens = 0;  // of finished requests
  int64_t requests_finished = 0;
  int64_t steps = 0;
  StepTimes all_steps;     // every step that ran a forward
  StepTimes decode_steps;  // of those, steps with decode tokens only
};

class Scheduler {
 public:
  Scheduler(const SchedulerOptions& options, Model& model, KvCache& kv, ThreadPool& pool,
            const Tokenizer& tokenizer);

  // Takes a validated request; its stream gets every event from now on.
  void Add(Request request, std::shared_ptr<RequestStream> stream, uint64_t arrival);
  // Cancels at once (engine thread): frees its blocks, finishes its stream.
  void Cancel(const std::string& request_id);
  // Runs one step. Returns false when there was nothing to run.
  bool Step();
  // Ends every request (kCancelled) and releases every sequence.
  void AbortAll();

  bool HasWork() const { return !requests_.empty(); }
  int64_t num_running() const { return static_cast<int64_t>(active_.size()); }
  int64_t num_waiting() const;
  const SchedulerCounters& counters() const { return counters_; }
  // Ids of requests that ended since the last call (for the engine's id set).
  std::vector<std::string> TakeFinishedIds();
  // Pushes the kDone / kError events of requests that ended. The engine calls
  // it after publishing stats and forgetting the ids, so a caller that has
  // read kDone sees the blocks released and may reuse the id.
  void PushFinalEvents();

 private:
  struct Item {
    ChoiceState* choice;
    std::vector<int32_t> tokens;  // new tokens this step
    bool decode;
  };

  void Preempt(ChoiceState* c);
  // The most recently admitted active choice, optionally not of `except`.
  ChoiceState* NewestActive(const RequestState* except) const;
  bool WaitsForPrefilling(const ChoiceState& c, std::span<const int32_t> history,
                          int64_t reused) const;
  // Chooses the next waiting choice to admit (index into waiting_), -1 if none.
  int64_t PickWaiting(const std::vector<bool>& skipped) const;
  void RemoveActive(ChoiceState* c);
  // usage.cached_tokens: the first admission of a fresh prompt decides it.
  void SetCachedTokens(ChoiceState* c, int64_t reused);
  // A choice to sample this step and the logits row it samples from.
  struct SampleJob {
    ChoiceState* choice;
    std::span<const float> row;
    StatusOr<SampleResult> result = SampleResult{};
  };
  // Samples every queued job (in parallel), then emits them in queue order;
  // a job whose row cannot be sampled (non-finite logits) fails its request.
  void SampleAndEmitQueued();
  // prompt_logprobs: turns the logits rows [num_rows, vocab] of a prefill
  // chunk starting at start_pos into one kPromptLogprobs event.
  void EmitPromptLogprobs(ChoiceState* c, int64_t start_pos, int64_t num_rows, const float* rows);
  // Streams the token a choice sampled; may finish the choice.
  void Emit(ChoiceState* c, SampleResult s);
  void FinishChoice(ChoiceState* c, FinishReason reason);
  void FailRequest(RequestState* r, const Status& error);
  // Pushes kDone and forgets requests whose choices all ended.
  void ReapDone();
  bool Fork(ChoiceState* parent);

  SchedulerOptions options_;
  Model& model_;
  KvCache& kv_;
  ThreadPool& pool_;
  const Tokenizer& tokenizer_;
  int64_t vocab_ = 0;
  ConstraintCache constraints_;  // request grammars bound to the vocabulary
  std::vector<std::unique_ptr<RequestState>> requests_;  // arrival order
  std::deque<ChoiceState*> waiting_;                     // admission order
  std::vector<ChoiceState*> active_;  // admitted (prefill or decode), admit order
  int64_t admit_counter_ = 0;
  SchedulerCounters counters_;
  std::vector<std::string> finished_ids_;
  std::vector<std::pair<std::shared_ptr<RequestStream>, RequestEvent>> deferred_;
  ForwardBatch batch_;
  std::vector<float> logits_;
  std::vector<SampleJob> jobs_;  // this step's choices to sample, in emit order
  int64_t sample_ns_ = 0;        // this step's time in the samplers
  StepBudget step_budget_;
};

}  // namespace kvfork
