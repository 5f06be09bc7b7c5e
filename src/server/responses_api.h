// OpenAI's Responses API (POST /v1/responses) on top of the chat run. A
// request becomes a chat body: instructions -> a system message, then the
// stored conversation of previous_response_id (response_store.h), then the
// input (a string, or items: messages with input_text/output_text parts,
// function_call, function_call_output; reasoning items are dropped), tools
// (function tools) -> chat tools, max_output_tokens -> max_tokens,
// reasoning.effort -> reasoning_effort. The run's output is written as a
// response object (output items: reasoning, message with output_text,
// function_call) or as the Responses stream events (response.created, ...,
// response.output_text.delta, response.function_call_arguments.delta, ...,
// response.completed / response.incomplete), and stored when store is true.
//
// vLLM's and kvfork's chat extensions pass through as on chat completions:
// top_k, min_p, seed, stop, logit_bias, repetition/presence/frequency
// penalties, chat_template_kwargs, continue_final_message, cache_salt, and
// OpenAI's prompt_cache_key (a salt-and-pin hint, generation.h).
//
// text.format json_schema / json_object become the chat's response_format
// (constrained decoding). Fields that would change the output and are not
// implemented are a 400 naming them: non-function tools, background, truncation "auto", include,
// top_logprobs, prompt, conversation, max_tool_calls.
#pragma once

#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "server/api_error.h"
#include "server/chat_formatter.h"
#include "server/response_store.h"

namespace kvfork::server {

struct ResponsesRequest {
  nlohmann::ordered_json chat_body;     // what the chat run takes
  nlohmann::ordered_json conversation;  // its messages without the instructions
  nlohmann::json echo;                  // request fields the response object repeats
  bool store = true;
  // continue_final_message: the last input message is a prefill the output
  // continues; the stored conversation keeps the output in its place.
  bool continues_final = false;
};

// previous: the stored messages of previous_response_id (null when the
// request names none; the caller looks it up and answers 404 when absent).
std::optional<ApiError> ResponsesToChatBody(const nlohmann::ordered_json& body,
                                            const nlohmann::ordered_json* previous,
                                            ResponsesRequest* out);

// The formatter of one run; on completion it stores the conversation and
// the response object under salt when request.store.
std::unique_ptr<ChatFormatter> MakeResponsesFormatter(const ResponseMeta& meta,
                                                      ResponsesRequest request,
                                                      ResponseStore* store, std::string salt);

}  // namespace kvfork::server
