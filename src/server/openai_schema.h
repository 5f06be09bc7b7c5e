// Parsing and validation of OpenAI request bodies (/v1/chat/completions,
// /v1/completions) into what the server submits to the engine. Unknown fields
// are ignored, as OpenAI's servers do; a field of the wrong type or out of
// range is an ApiError (400) that names it. Pure functions: no engine, no I/O.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "engine/request.h"
#include "server/api_error.h"

namespace kvfork::server {

enum class Endpoint { kChat, kCompletion };

struct SchemaLimits {
  int64_t vocab_size = 0;        // token ids in prompts and logit_bias must be below this
  int64_t max_n = 16;            // choices per request
  int64_t max_top_logprobs = 20; // chat top_logprobs; completions logprobs <= 5 (OpenAI)
  int64_t max_stop = 16;         // stop strings
  int64_t max_prompts = 32;      // prompts in one /v1/completions list
};

// One prompt of /v1/completions: text to tokenize or token ids as given.
struct PromptInput {
  std::string text;
  std::vector<int32_t> tokens;
  bool is_tokens = false;
};

struct ParsedRequest {
  Endpoint endpoint = Endpoint::kChat;
  std::string model;  // as sent; "" when absent
  // Chat: messages with string content (text parts joined), ready for the
  // template; tools (null if absent); chat_template_kwargs (object or null).
  nlohmann::json messages;
  nlohmann::json tools;
  nlohmann::json chat_template_kwargs;
  std::vector<PromptInput> prompts;  // completions: at least one
  SamplingParams sampling;
  bool max_tokens_given = false;  // else the server picks the default
  bool stream = false;
  bool include_usage = false;  // stream_options.include_usage
  bool echo = false;           // completions: prepend the prompt text
  std::string user;
  std::string cache_salt;  // "" = none given
};

// Parses a body; on error returns the ApiError (param = the field's path,
// "messages[2].role", "stop[1]").
std::optional<ApiError> ParseRequestBody(Endpoint endpoint, std::string_view body,
                                         const SchemaLimits& limits, ParsedRequest* out);

// Chat messages alone (also used by /apply-template): checks roles and content
// and writes the normalized array.
std::optional<ApiError> ParseMessages(const nlohmann::json& messages, nlohmann::json* out);

// Deepest nesting of arrays and objects a request body may have (a tool's
// JSON schema is a few levels; the limit keeps recursion over the value,
// in copies and in the chat template, far from the stack's end).
inline constexpr int kMaxJsonDepth = 128;

// Parses JSON text; a syntax error (or invalid UTF-8) or nesting deeper than
// kMaxJsonDepth is a 400 saying what.
std::optional<ApiError> ParseJsonBody(std::string_view body, nlohmann::json* out);

}  // namespace kvfork::server
