// Cache control for clients (issue 25): what turns a request into a pin of
// its prompt's prefix (KvCache::Pin), and the admin route that pins one.
//
//   Anthropic cache_control breakpoints: the prefix through the message of
//     the last breakpoint (AnthropicPinTokens), for the longest TTL given;
//   OpenAI prompt_cache_key: a salt-and-pin hint (generation.cc);
//   POST /v1/cache/pin {"prompt": text | [token ids], "ttl": "5m" | "1h" |
//     "ttl_seconds": N, "cache_salt"?, "api_key"?}: prefills the prompt (one
//     generated token, thrown away) under the salt of api_key's tenant (the
//     caller's by default), then pins its blocks.
//
// Runs on the HTTP thread that handles the request; RunCachePin blocks until
// the engine has prefilled and pinned.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "server/anthropic_messages.h"
#include "server/api_error.h"
#include "server/generation.h"

namespace kvfork::server {

// The number of leading tokens of prompt (the whole chat request's tokens)
// that the breakpoints cover: the longest common prefix of prompt and the
// chat prompt rendered through cache.chat_messages messages without a
// generation prompt. The whole prompt when the breakpoint is in the last
// message, or when that shorter conversation cannot be rendered.
int64_t AnthropicPinTokens(const GenerationEnv& env, const nlohmann::ordered_json& chat_body,
                           const AnthropicCacheControl& cache,
                           const std::vector<int32_t>& prompt);

// Longest TTL /v1/cache/pin accepts (a day), in seconds.
inline constexpr int64_t kMaxPinTtlSeconds = 24 * 3600;

// POST /v1/cache/pin: checks the body, prefills and pins. *reply gets
// {"prompt_tokens", "pinned_blocks", "pinned_tokens", "ttl_seconds"}.
// key_salt: the API key's salt; request_id: unique among running requests.
std::optional<ApiError> RunCachePin(const GenerationEnv& env, const nlohmann::ordered_json& body,
                                    const std::string& key_salt, const std::string& request_id,
                                    nlohmann::json* reply);

}  // namespace kvfork::server
