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
};

// kInvalidArgument naming the parameter, or kOutOfRange for a request that
// cannot fit the context or the pool.
Status ValidateRequest(const Request& request, const RequestLimits& limits);

}  // namespace kvfork
