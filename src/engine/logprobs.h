// Log-probabilities read off a raw logits row: vLLM's default "raw"
// logprobs, log_softmax of the model's row before any sampling parameter.
// Computed exactly as the Sampler reports a sampled token's (log-sum-exp in
// double, top-k by logit descending then token id ascending), so a prompt
// token's logprob and the same token's when generated have the same bits
// (tests/engine/generation_test.cc checks both against each other).
//
// Pure functions; cost O(vocab) per row (an exp per entry) plus a partial
// sort for top-k.
#pragma once

#include <cstdint>
#include <span>

#include "engine/request.h"

namespace kvfork {

// log(sum(exp(row))), computed around the row's maximum, in double.
double LogSumExp(std::span<const float> row);

// token's log-probability under row, and the k best tokens' (best first).
PromptTokenLogprob LogprobsAt(std::span<const float> row, int32_t token, int64_t k);

}  // namespace kvfork
