// Parsing and validation of OpenAI request bodies (/v1/chat/completions,
// /v1/completions) into what the server submits to the engine. A field of the
// wrong type or out of range is an ApiError (400) that names it; so is a known
// field this server does not implement (unsupported_fields.h). Fields nobody
// defines are ignored, as vLLM does. The body is parsed with its objects in
// the client's order (what reaches the chat template keeps that order).
// Pure functions: no engine, no I/O.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "engine/request.h"
#include "server/api_error.h"
#include "server/json_body.h"

namespace kvfork::server {

enum class Endpoint { kChat, kCompletion };

struct SchemaLimits {
  int64_t vocab_size = 0;        // token ids in prompts and logit_bias must be below this
  int64_t max_n = 16;            // choices per request
  int64_t max_top_logprobs = 20; // chat top_logprobs; completions logprobs <= 5 (OpenAI)
  int64_t max_stop = 16;         // stop strings
  int64_t max_stop_bytes = 256;  // bytes of one stop string (RequestLimits says why)
  int64_t max_logit_bias = 1024; // logit_bias entries (vLLM's limit)
  int64_t max_stop_token_ids = 128;  // stop_token_ids (vLLM's limit)
  int64_t max_prompts = 32;      // prompts in one /v1/completions list
};

// What a chat template renders: the request's messages (normalized by
// ParseMessages), its tools and chat_template_kwargs, in the client's key order.
struct ChatInput {
  nlohmann::ordered_json messages;
  nlohmann::ordered_json tools;                 // null if absent
  nlohmann::ordered_json chat_template_kwargs;  // object or null
  // vLLM's fields. add_generation_prompt opens the assistant's turn;
  // continue_final_message leaves the last message open (no end-of-turn) so
  // the model continues it. Both true is a 400; with continue_final_message
  // and add_generation_prompt absent, the latter defaults to false.
  bool add_generation_prompt = true;
  bool continue_final_message = false;
  // tool_choice: "auto" (the default), "none" (tools stay in the prompt,
  // the reply is not parsed for calls), "required" or "function" (a named
  // one: forced_tool); the last two are enforced with a grammar
  // (tool_choice_grammar.h).
  std::string tool_choice = "auto";
  std::string forced_tool;
  bool parallel_tool_calls = true;  // false: at most one call is returned
  // OpenAI's reasoning_effort ("" = absent): passed to the template as
  // reasoning_effort (gpt-oss-style templates read it).
  std::string reasoning_effort;
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
  ChatInput chat;     // chat only
  std::vector<PromptInput> prompts;  // completions: at least one
  SamplingParams sampling;
  bool max_tokens_given = false;  // else the server picks the default
  bool stream = false;
  bool include_usage = false;  // stream_options.include_usage
  bool echo = false;           // completions: prepend the prompt text
  // vLLM's return_tokens_as_token_ids: logprob tokens as "token_id:N", so a
  // client can match them by id (byte pieces of a split character do not).
  bool tokens_as_ids = false;
  // Let the tokenizer's post-processor add BOS/EOS to the prompt text (vLLM's
  // add_special_tokens: chat false, since the template writes BOS itself;
  // completions true).
  bool add_special_tokens = true;
  std::string user;
  std::string cache_salt;  // "" = none given
  // OpenAI's prompt_cache_key: a salt-and-pin hint (generation.cc); "" = none.
  std::string prompt_cache_key;
};

// Parses a body; on error returns the ApiError (param = the field's path,
// "messages[2].role", "stop[1]").
std::optional<ApiError> ParseRequestBody(Endpoint endpoint, std::string_view body,
                                         const SchemaLimits& limits, ParsedRequest* out);

// Chat messages alone: checks roles and content and writes the normalized
// array (developer -> system, text parts joined, absent content -> "").
std::optional<ApiError> ParseMessages(const nlohmann::ordered_json& messages,
                                      nlohmann::ordered_json* out);

// The chat fields of a body (also /apply-template's): messages, tools,
// chat_template_kwargs, add_generation_prompt, continue_final_message.
std::optional<ApiError> ParseChatInput(const nlohmann::ordered_json& body, ChatInput* out);

// Whether max_tokens may be 0: only for /v1/completions with echo and
// logprobs, which scores the prompt (the lm-evaluation-harness loglikelihood
// path) and generates nothing. Everywhere else 0 is a 400.
bool AllowsZeroMaxTokens(const ParsedRequest& request);

}  // namespace kvfork::server
