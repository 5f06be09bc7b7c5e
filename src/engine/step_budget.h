// Sizes each step's prefill so that sequences that are decoding keep a steady
// pace while new prompts prefill beside them (--max-step-ms).
//
// A step carries one token of every decoding sequence plus prefill chunks, and
// every decoding sequence waits for the whole step: a 512-token chunk at a
// long context can make a step, and so each decoding token, take seconds.
// StepBudget learns the model's own costs from the steps it watches, the time
// of a decode-only step and the time of one prefill token beside it, and gives
// prefill what fits in the target step time. With nothing decoding, prefill
// gets the whole token budget (time to first token is all that matters then).
//
// Chunk sizes never change bits (invariant 1): this only decides how many
// prompt tokens run in which step.
//
// Thread affinity: the engine thread (the scheduler owns one).
#pragma once

#include <cstdint>

namespace kvfork {

struct StepBudgetOptions {
  // Target wall time of a step that has decoding sequences, in ms.
  //   > 0: that target;  0: off (prefill always gets the full token budget);
  //   < 0: auto: kAutoDecodeSteps times the decode part of a step, and at
  //        least kAutoMinStepMs.
  double max_step_ms = 0;
  // Prefill tokens a step always gets when a prompt waits, so prompts make
  // progress whatever the estimate says (and each step's weight reads are
  // shared by a useful number of tokens).
  int64_t min_prefill_tokens = 32;
};

class StepBudget {
 public:
  static constexpr double kAutoDecodeSteps = 4.0;
  // The floor of the auto target: a pace of 2.5 tokens/s for decoding
  // sequences while prompts prefill. Below it the per-step costs (weights read
  // again, the step's bookkeeping) take a growing share of the prefill's time;
  // small models, whose whole 512-token chunk takes less, are never held back.
  static constexpr double kAutoMinStepMs = 400.0;

  explicit StepBudget(const StepBudgetOptions& options) : options_(options) {}

  // Prefill tokens this step may add beside `decode_tokens` decode tokens,
  // at most `token_budget` (what max_num_batched_tokens leaves).
  int64_t PrefillTokens(int64_t decode_tokens, int64_t token_budget) const;

  // After each step that ran a forward: its decode and prefill token counts
  // and its wall time.
  void Observe(int64_t decode_tokens, int64_t prefill_tokens, int64_t step_ns);

  // The step time aimed at with `decode_tokens` decoding, in ns (0 when off
  // or not yet known).
  double TargetNs(int64_t decode_tokens) const;
  // What the decode part of such a step costs, in ns: the measured
  // decode-only step, or before one was seen (every sequence may still be
  // prefilling beside the first decodes, as in a burst of new prompts) one
  // prefill token's share per decode token.
  double DecodePartNs(int64_t decode_tokens) const;
  // The estimates, in ns (0 = not measured yet).
  double decode_step_ns() const { return decode_step_ns_; }
  double prefill_token_ns() const { return prefill_token_ns_; }

 private:
  StepBudgetOptions options_;
  double decode_step_ns_ = 0;    // moving average of decode-only steps
  double prefill_token_ns_ = 0;  // moving average of a prefill token's share of a step
};

}  // namespace kvfork
