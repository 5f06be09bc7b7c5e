// Anthropic's Messages API (POST /v1/messages, /v1/messages/count_tokens) on
// top of the chat run: a request is translated into the equivalent OpenAI
// chat body (system -> a system message, tool_use -> tool_calls,
// tool_result -> tool messages, tools -> function tools in the client's
// order, stop_sequences -> stop, ...) and the run's output is written as
// Anthropic's message object or its SSE events (message_start,
// content_block_start/delta/stop for thinking, text and tool_use blocks,
// message_delta, message_stop). Errors have Anthropic's shape
// {"type": "error", "error": {"type", "message"}}.
//
// cache_control breakpoints ({"type": "ephemeral", "ttl": "5m" | "1h"} on
// tools, system blocks and content blocks) become a pin of the prompt's
// prefix through the last breakpoint (AnthropicCacheControl); usage reports
// cache_creation_input_tokens (that prefix's tokens computed by this
// request) and cache_read_input_tokens (prompt tokens read from the cache).
// Accepted and without effect: metadata, service_tier. Pure functions and a
// formatter; no I/O.
#pragma once

#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "server/api_error.h"
#include "server/chat_formatter.h"

namespace kvfork::server {

// The request's cache_control breakpoints, if any: the prefix to pin is the
// chat prompt rendered through the first chat_messages messages (the message
// holding the last breakpoint; at least 1), for the longest TTL given.
struct AnthropicCacheControl {
  bool present = false;
  size_t chat_messages = 0;  // of the converted chat body's messages
  int64_t ttl_ms = 0;        // 5 min ("5m", the default) or 1 h ("1h")
};

// body (an Anthropic request) -> *chat_body (an OpenAI chat request). For
// count_tokens, max_tokens is not required. Errors name Anthropic's fields
// ("messages[1].content[0].tool_use_id", "system[0].cache_control.ttl").
// cache (may be null) receives the breakpoints.
std::optional<ApiError> AnthropicToChatBody(const nlohmann::ordered_json& body, bool count_tokens,
                                            nlohmann::ordered_json* chat_body,
                                            AnthropicCacheControl* cache = nullptr);

// The formatter of one /v1/messages run. input_tokens: the prompt's length
// (message_start's usage; the final usage comes in message_delta);
// pin_tokens: the prefix the breakpoints pin (0: none).
std::unique_ptr<ChatFormatter> MakeAnthropicFormatter(const ResponseMeta& meta,
                                                      int64_t input_tokens,
                                                      int64_t pin_tokens = 0);

// {"type": "error", "error": {"type": "invalid_request_error", "message"}}.
std::string AnthropicErrorJson(const ApiError& error);

// "end_turn", "max_tokens", "tool_use" for the run's finish reasons.
const char* AnthropicStopReason(const std::string& finish_reason);

}  // namespace kvfork::server
