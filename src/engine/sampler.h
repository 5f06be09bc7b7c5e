// Turns one row of logits into the next token of one choice, as SamplingParams
// says: logit bias, repetition / presence / frequency penalties, temperature,
// top-k, top-p, min-p, then a draw from a seeded per-choice RNG.
//
// Total: any params ValidateRequest accepts give a token for any row the model
// can produce; only a row that no sampling could use (a NaN or +Inf logit, or
// no finite logit at all: what weights holding NaN/Inf give) is an error,
// which fails that request and nothing else. So that scaling never makes a
// finite row non-finite: temperatures below kGreedyBelowTemperature are greedy
// (vLLM's rule), repetition_penalty is clamped to [kMinRepetitionPenalty,
// kMaxRepetitionPenalty], a logit the processors push past the float range
// saturates at +-FLT_MAX, and temperature divides the distance to the
// largest logit, so the largest always keeps probability 1 before the
// normalization (a -Inf logit stays impossible).
//
// Determinism: the result depends only on the logits row, the params, the
// tokens seen so far and the RNG state, never on what else is in the batch,
// so the same seed gives the same tokens alone or batched. Candidate order is
// fixed (probability descending, token id ascending on ties) and the draw uses
// a 53-bit uniform from std::mt19937_64, whose sequence the standard fixes.
//
// Thread affinity: one Sampler per choice, used by one thread at a time (the
// engine samples different choices on its compute pool at once; a Sampler
// shares nothing with another).
// Cost per token: greedy without penalties or bias is one vectorized argmax
// over the row, no copy; otherwise O(vocab) (a copy, and an exp per entry
// when sampling), plus a radix sort of every candidate when top-p or min-p
// needs them in order (top-k alone sorts only k), plus a double exp per
// entry when logprobs are asked.
#pragma once

#include <cstdint>
#include <memory>
#include <random>
#include <span>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "engine/request.h"
#include "grammar/token_mask.h"

namespace kvfork {

struct SampleResult {
  int32_t token = -1;
  float logprob = 0.0f;                    // of token, log_softmax of the raw logits (if asked),
                                           // at least kMinReportedLogprob
  std::vector<TokenLogprob> top_logprobs;  // top_logprobs best, if asked (k >= 0)
};

// Below this temperature sampling is greedy: 1 / T would push every logit but
// the largest out of the float range (vLLM: _SAMPLING_EPS = 1e-5).
inline constexpr double kGreedyBelowTemperature = 1e-5;
// repetition_penalty outside this range acts as the nearest bound. At 100 a
// positive logit is already divided to near 0 and a negative one multiplied
// far below every other (0.01: the reverse), so a stronger penalty changes no
// practical choice, while 1e-40 or 5e-324 (accepted: > 0) would overflow a
// float logit, and a double above FLT_MAX would become Inf, and 0 * Inf NaN.
inline constexpr double kMinRepetitionPenalty = 0.01;
inline constexpr double kMaxRepetitionPenalty = 100.0;

// Reported logprobs are floored here, as vLLM's API reports them: a token
// whose logit is -Inf, or whose log-probability is below the float range,
// would otherwise report -Inf, which JSON cannot hold.
inline constexpr double kMinReportedLogprob = -9999.0;

class Sampler {
 public:
  // prompt: the request's prompt tokens (repetition_penalty counts them, as
  // Hugging Face and vLLM do). seed: the choice's RNG seed.
  Sampler(const SamplingParams& params, std::span<const int32_t> prompt, uint64_t seed);

  // min_tokens (vLLM's MinTokensLogitsProcessor): until params.min_tokens
  // tokens were generated, these ids (EOS unless ignore_eos, and
  // stop_token_ids) get a -inf logit, so they cannot be picked.
  void SuppressUntilMinTokens(std::vector<int32_t> ids) { min_tokens_suppressed_ = std::move(ids); }

  // Constrained decoding: each Sample() draws only among the tokens the
  // constraint allows (the others' logits become -inf; the allowed keep
  // their bits, so a row still gives the same token alone or batched),
  // takes a token the grammar forces without a draw, and advances the
  // constraint by the token it returns. Survives preemption with the sampler.
  void Constrain(std::unique_ptr<grammar::TokenConstraint> constraint) {
    constraint_ = std::move(constraint);
  }

  // Picks the next token from logits [vocab] and records it as generated.
  // An InternalError naming the token when the row holds a NaN or +Inf, or no
  // finite logit (the model's weights are broken, not the request).
  StatusOr<SampleResult> Sample(std::span<const float> logits);

  // Seed of choice `choice` of a request: its seed, or a random one when unset,
  // mixed with the choice index so siblings of n > 1 differ.
  static uint64_t ChoiceSeed(const SamplingParams& params, uint64_t request_seed, int64_t choice);

  int64_t num_generated() const { return num_generated_; }

  // True when a Sample() is one pass over the row (greedy, no logprobs):
  // tens of microseconds on a 151,936-entry row, less than handing it to
  // another thread can cost on a loaded machine.
  // A constraint's mask can cost a trie walk: never cheap.
  bool Cheap() const { return Greedy() && params_.top_logprobs < 0 && constraint_ == nullptr; }

 private:
  bool SuppressingNow() const {
    return num_generated_ < params_.min_tokens && !min_tokens_suppressed_.empty();
  }
  bool Greedy() const {
    return params_.temperature < kGreedyBelowTemperature || params_.top_k == 1;
  }
  // Whether ProcessLogits could change a row now (bias, penalties, min_tokens).
  bool ChangesLogits() const;
  // Applies bias and penalties to a copy of the row; a finite logit stays
  // finite (saturated at +-FLT_MAX), -Inf stays -Inf.
  void ProcessLogits(std::vector<float>* logits) const;
  double Uniform();  // [0, 1) with 53 random bits

  SamplingParams params_;  // repetition_penalty clamped
  std::unordered_set<int32_t> prompt_tokens_;
  std::unordered_map<int32_t, int64_t> output_counts_;  // generated token -> times
  int64_t num_generated_ = 0;
  std::vector<int32_t> min_tokens_suppressed_;
  std::mt19937_64 rng_;
  std::unique_ptr<grammar::TokenConstraint> constraint_;  // null = unconstrained
  std::vector<float> masked_;                             // [vocab] logits under the constraint
  std::vector<float> scratch_;                            // [vocab] processed logits
  std::vector<std::pair<float, int32_t>> candidates_;     // (probability, token)
  std::vector<std::pair<float, int32_t>> sort_tmp_;       // radix sort buffer
};

}  // namespace kvfork
