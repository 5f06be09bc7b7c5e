// What a client submits to the engine and what it reads back. This is the
// whole contract between the engine and its callers (server, CLI): they never
// see KV blocks or the model.
//
// Thread affinity: a RequestStream is written by the engine thread and read
// by one other thread (an HTTP handler, the CLI); both sides are safe.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "core/status.h"
#include "grammar/grammar.h"

namespace kvfork {

struct SamplingParams {
  double temperature = 1.0;   // 0 = greedy
  double top_p = 1.0;         // in (0, 1]
  int64_t top_k = 0;          // 0 = off
  double min_p = 0.0;         // in [0, 1]
  double repetition_penalty = 1.0;  // > 0; 1 = off (HF / vLLM semantics)
  double presence_penalty = 0.0;    // in [-2, 2] (OpenAI)
  double frequency_penalty = 0.0;   // in [-2, 2] (OpenAI)
  std::map<int32_t, float> logit_bias;  // token id -> added to its logit
  std::optional<uint64_t> seed;     // same seed -> same tokens, batched or not
  int64_t max_tokens = 16;          // tokens to generate per choice; 0 is allowed
  // vLLM: EOS and stop_token_ids cannot be sampled, and no stop string ends
  // the output, until this many tokens were generated (the next token is the
  // first that may stop). In [0, max_tokens].
  int64_t min_tokens = 0;
  std::vector<std::string> stop;    // stop strings, matched across tokens, not emitted
  std::vector<int32_t> stop_token_ids;
  // vLLM: the matched stop string (and a stop token's text) stays in the output.
  bool include_stop_str_in_output = false;
  bool ignore_eos = false;          // keep generating past EOS (benchmarks)
  int64_t n = 1;                    // choices; n > 1 forks after prefill
  int64_t top_logprobs = -1;        // -1 = no logprobs; k >= 0 = chosen + top-k
  // -1 = none; k >= 0: the log-probability of every prompt token but the
  // first (log_softmax of the logits at the position before it) and the top k
  // alternatives, streamed as kPromptLogprobs events before any token. The
  // request then recomputes its prompt instead of adopting a cached prefix
  // (docs/engine.md, "Prompt logprobs"). With max_tokens 0 only these come.
  int64_t prompt_logprobs = -1;
  // Constrained decoding (docs/structured_output.md): when set, every
  // generated token keeps the output a prefix of a sentence of this grammar,
  // and EOS (or a stop_token_id) comes only where the grammar may end.
  // Tokens it masks get a -inf logit; the others keep their bits.
  std::shared_ptr<const grammar::Grammar> grammar;
};

struct Request {
  std::string id;                   // set by the caller, unique while it runs
  std::vector<int32_t> prompt_tokens;
  SamplingParams sampling;
  std::string cache_salt;           // prefixes under different salts never match
  // Cache control (docs/kv_cache.md, "Pins"): when the request ends, the
  // cached full blocks of its first pin_tokens prompt tokens are pinned for
  // pin_ttl_ms. 0 = no pin.
  int64_t pin_tokens = 0;
  int64_t pin_ttl_ms = 0;
};

enum class FinishReason { kStop, kLength, kCancelled, kError };
const char* FinishReasonName(FinishReason reason);  // "stop", "length", ...

struct TokenLogprob {
  int32_t token = 0;
  float logprob = 0.0f;
};

// One prompt token's log-probability (under the tokens before it) and the
// top alternatives at that position, best first.
struct PromptTokenLogprob {
  TokenLogprob chosen;
  std::vector<TokenLogprob> top;
};

struct Usage {
  int64_t prompt_tokens = 0;
  int64_t completion_tokens = 0;  // summed over choices
  int64_t cached_tokens = 0;      // prompt tokens served from the prefix cache
};

struct RequestEvent {
  enum class Kind {
    kToken,   // one generated token of a choice (text_delta may be empty)
    kFinish,  // a choice ended (finish_reason set)
    kDone,    // the request ended: usage set, no event follows
    kError,   // the request failed: error set, no event follows
    // Logprobs of the next prompt tokens (prompt_logprobs), in prompt order,
    // starting with the prompt's second token; all come before any kToken.
    kPromptLogprobs,
  };
  Kind kind = Kind::kToken;
  int64_t choice = 0;
  int32_t token = -1;
  std::string text_delta;             // never a partial UTF-8 sequence
  std::optional<TokenLogprob> logprob;  // of the chosen token, if asked
  std::vector<TokenLogprob> top_logprobs;
  std::vector<PromptTokenLogprob> prompt_logprobs;  // kPromptLogprobs
  FinishReason finish_reason = FinishReason::kStop;
  Usage usage;
  Status error;
};

// A one-writer one-reader queue of events for one request.
class RequestStream {
 public:
  void Push(RequestEvent event);
  // Blocks until an event is there or timeout_ms passes (nullopt then).
  std::optional<RequestEvent> Pop(int64_t timeout_ms);
  // True once kDone or kError has been pushed.
  bool Closed() const;

 private:
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<RequestEvent> events_;
  bool closed_ = false;
};

}  // namespace kvfork
