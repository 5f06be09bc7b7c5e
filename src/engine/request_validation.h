// Checks a Request before it is queued, so a bad one fails at Submit with an
// error naming the parameter ("top_p must be in (0, 1], got 1.5"), never
// minutes later inside the engine loop.
#pragma once

#include <cstdint>

#include "core/status.h"
#include "engine/request.h"

namespace kvfork {

struct RequestLimits {
  int64_t vocab_size = 0;    // valid token ids are [0, vocab_size)
  int64_t max_context = 0;   // prompt + max_tokens must fit
  int64_t max_pool_tokens = 0;  // tokens the whole KV pool holds (block_size * blocks)
  int64_t max_n = 16;        // choices per request
  int64_t max_top_logprobs = 20;
  int64_t max_stop = 16;     // stop strings per request
  // The stop matcher compares the held-back text with every stop string on
  // each token (O(stops * bytes^2) at worst, engine thread): 16 strings of
  // 256 bytes cost well under a millisecond per token; 100 kB would cost
  // seconds. No model's stop marker is near 256 bytes.
  int64_t max_stop_bytes = 256;
  // vLLM's limits (MAX_NUM_LOGIT_BIAS_TOKENS, MAX_NUM_STOP_TOKEN_IDS in its
  // v1 GPU sampler): each entry costs work on every sampled token.
  int64_t max_logit_bias = 1024;
  int64_t max_stop_token_ids = 128;
};

// kInvalidArgument naming the parameter, or kOutOfRange for a request that
// cannot fit the context or the pool.
Status ValidateRequest(const Request& request, const RequestLimits& limits);

}  // namespace kvfork
