// Per-request and per-choice state the scheduler keeps on the engine thread.
//
// A request starts as one sequence (choice 0, the parent) that prefills the
// prompt; when the prompt is done it forks into n choices sharing the prompt
// blocks. A choice that is preempted becomes waiting again and, on
// re-admission, prefills its history (prompt + generated tokens but the last)
// again, of which the prefix cache usually still holds everything but what
// was evicted; its sampler, stop matcher and decoder survive, so its output
// is the same as if it had never been preempted.
//
// Thread affinity: engine thread only, except `stream` (RequestStream is
// safe for its one reader).
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

#include "engine/request.h"
#include "engine/sampler.h"
#include "engine/stop_matcher.h"
#include "kv/kv_cache.h"
#include "tokenizer/tokenizer.h"

namespace kvfork {

enum class SeqPhase {
  kUnforked,  // a choice > 0 before its parent's prompt is done
  kWaiting,   // needs Admit (new, or preempted)
  kLoading,   // admitted; its cached prefix is being read from disk (I/O
              // threads), then it prefills; others keep stepping meanwhile
  kPrefill,   // admitted; computing its history in chunks
  kDecode,    // feeds its last generated token each step
  kDone,
};

struct RequestState;

struct ChoiceState {
  RequestState* request = nullptr;
  int64_t index = 0;
  SeqPhase phase = SeqPhase::kUnforked;
  std::optional<SeqId> seq;     // in the KV cache while admitted
  int64_t admit_order = 0;      // larger = admitted more recently (preemption victim)
  // True until the prompt's last logits are sampled: then choices fork.
  bool fresh = false;
  // prompt_logprobs: prompt positions [0, prompt_logits_done) have had their
  // logits turned into kPromptLogprobs events (a preempted choice keeps it).
  int64_t prompt_logits_done = 0;
  std::vector<int32_t> generated;
  std::unique_ptr<Sampler> sampler;
  std::unique_ptr<StopMatcher> stop;
  std::unique_ptr<StreamDecoder> decoder;
  // A prompt whose prefix is read from disk: when the engine took it, when
  // its load started and ended (NowNanos; 0 = not loaded). Its first token
  // logs where the time went (docs/kv_cache.md, "Restart").
  int64_t taken_ns = 0;
  int64_t load_start_ns = 0;
  int64_t load_end_ns = 0;

  // Tokens whose K/V the sequence needs before its next decode step:
  // the prompt plus every generated token except the last (pending) one.
  std::vector<int32_t> History() const;
  int64_t HistorySize() const;
  // Whether this choice's prefill chunks need a logits row per token
  // (prompt_logprobs, until the prompt is done).
  bool WantsPromptLogits() const;
  // How many leading History() tokens admission may look up in the prefix
  // cache: all, or for WantsPromptLogits() only those whose logits it has
  // (a cached position has no logits, so the rest is recomputed).
  int64_t ReusableHistorySize() const;
};

struct RequestState {
  Request request;
  std::shared_ptr<RequestStream> stream;
  uint64_t arrival = 0;  // Submit order
  std::vector<std::unique_ptr<ChoiceState>> choices;  // [n]
  Usage usage;
  bool cached_tokens_set = false;
  bool done = false;

  bool AllChoicesDone() const;
};

}  // namespace kvfork
