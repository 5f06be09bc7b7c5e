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
// Accepted and without effect: metadata, cache_control (the prefix cache is
// automatic), service_tier. Pure functions and a formatter; no I/O.
#pragma once

#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "server/api_error.h"
#include "server/chat_formatter.h"

namespace kvfork::server {

// body (an Anthropic request) -> *chat_body (an OpenAI chat request). For
// count_tokens, max_tokens is not required. Errors name Anthropic's fields
// ("messages[1].content[0].tool_use_id").
std::optional<ApiError> AnthropicToChatBody(const nlohmann::ordered_json& body, bool count_tokens,
                                            nlohmann::ordered_json* chat_body);

// The formatter of one /v1/messages run. input_tokens: the prompt's length
// (message_start's usage; the final usage comes in message_delta).
std::unique_ptr<ChatFormatter> MakeAnthropicFormatter(const ResponseMeta& meta,
                                                      int64_t input_tokens);

// {"type": "error", "error": {"type": "invalid_request_error", "message"}}.
std::string AnthropicErrorJson(const ApiError& error);

// "end_turn", "max_tokens", "tool_use" for the run's finish reasons.
const char* AnthropicStopReason(const std::string& finish_reason);

}  // namespace kvfork::server
