#include "engine/step_budget.h"

#include <algorithm>

namespace kvfork {
namespace {

// Weight of the newest observation in the moving averages: recent steps
// dominate (a prompt's later chunks attend over more keys and cost more per
// token), while one noisy step (these VMs stall for 100-200 ms at times)
// moves the estimate by only a third of its error.
constexpr double kAlpha = 0.35;

double Blend(double old_value, double sample) {
  return old_value <= 0 ? sample : old_value + kAlpha * (sample - old_value);
}

}  // namespace

double StepBudget::DecodePartNs(int64_t decode_tokens) const {
  if (decode_step_ns_ > 0) return decode_step_ns_;
  return static_cast<double>(decode_tokens) * prefill_token_ns_;
}

double StepBudget::TargetNs(int64_t decode_tokens) const {
  if (options_.max_step_ms > 0) return options_.max_step_ms * 1e6;
  if (options_.max_step_ms == 0) return 0;
  const double decode_ns = DecodePartNs(decode_tokens);
  if (decode_ns <= 0) return 0;
  return std::max(kAutoDecodeSteps * decode_ns, kAutoMinStepMs * 1e6);
}

int64_t StepBudget::PrefillTokens(int64_t decode_tokens, int64_t token_budget) const {
  if (token_budget <= 0) return 0;
  if (decode_tokens == 0 || prefill_token_ns_ <= 0) return token_budget;
  const double target = TargetNs(decode_tokens);
  if (target <= 0) return token_budget;
  const double room = target - DecodePartNs(decode_tokens);
  const double fits = room > 0 ? room / prefill_token_ns_ : 0;
  const int64_t tokens = std::max<int64_t>(options_.min_prefill_tokens, static_cast<int64_t>(fits));
  return std::min(tokens, token_budget);
}

void StepBudget::Observe(int64_t decode_tokens, int64_t prefill_tokens, int64_t step_ns) {
  if (step_ns <= 0) return;
  const double ns = static_cast<double>(step_ns);
  if (prefill_tokens == 0) {
    if (decode_tokens > 0) decode_step_ns_ = Blend(decode_step_ns_, ns);
    return;
  }
  // A prefill token's share: what the step took beyond its decode part.
  const double decode_part = decode_tokens > 0 ? DecodePartNs(decode_tokens) : 0;
  const double per_token =
      std::max(ns - decode_part, ns * 0.1) / static_cast<double>(prefill_tokens);
  prefill_token_ns_ = Blend(prefill_token_ns_, per_token);
}

}  // namespace kvfork
