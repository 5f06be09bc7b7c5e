// OpenAI response bodies and server-sent events, built exactly as OpenAI
// sends them: chat.completion / text_completion objects, and for streams
// "data: {chunk}\n\n" lines (chat: role delta first; then content deltas; a
// finish chunk with an empty delta and finish_reason; with include_usage
// every chunk carries "usage": null and a last chunk with "choices": [] holds
// the usage) and "data: [DONE]\n\n". Pure functions: no I/O.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "engine/request.h"
#include "server/openai_schema.h"
#include "server/tool_call_parser.h"

namespace kvfork::server {

// What every object of one response shares.
struct ResponseMeta {
  Endpoint endpoint = Endpoint::kChat;
  std::string id;        // "chatcmpl-..." / "cmpl-..."
  int64_t created = 0;   // unix seconds
  std::string model;
  bool include_usage = false;  // streams: "usage": null on every chunk
};

// One token's log-probability, with the token spelled out.
struct TokenLogprobText {
  std::string token;  // the token's bytes (may be a partial UTF-8 sequence)
  float logprob = 0.0f;
};
struct LogprobEntry {
  TokenLogprobText chosen;
  std::vector<TokenLogprobText> top;
  // The prompt's first token (echo with logprobs): nothing precedes it, so
  // its logprob and top_logprobs are null, as OpenAI and vLLM send them.
  bool no_logprob = false;
};

// One finished choice of a non-streaming response.
struct ChoiceResult {
  std::string text;           // chat: the content, without reasoning and tool calls
  std::string finish_reason;  // "stop" | "length" | "tool_calls"
  std::string reasoning;      // chat: reasoning_content ("" = none)
  std::vector<ToolCall> tool_calls;  // chat
  bool has_logprobs = false;
  std::vector<LogprobEntry> logprobs;
};

// JSON serialization that never throws: invalid UTF-8 becomes U+FFFD.
std::string DumpJson(const nlohmann::json& j);
// "data: <json>\n\n"
std::string SseData(const nlohmann::json& chunk);
inline constexpr const char kSseDone[] = "data: [DONE]\n\n";

// {"prompt_tokens", "completion_tokens", "total_tokens",
//  "prompt_tokens_details": {"cached_tokens"}} (cached_tokens always there).
nlohmann::json UsageJson(const Usage& usage);

// Chat: {"content": [{"token", "logprob", "bytes", "top_logprobs": [...]}]}.
nlohmann::json ChatLogprobsJson(const std::vector<LogprobEntry>& entries);
// Completions: {"tokens", "token_logprobs", "top_logprobs": [{tok: lp}], "text_offset"};
// text_offset counts from first_offset (the length of the echoed prompt, or 0).
// A no_logprob entry has null in token_logprobs and top_logprobs.
nlohmann::json CompletionLogprobsJson(const std::vector<LogprobEntry>& entries,
                                      int64_t first_offset);

// A message's "tool_calls": [{"id", "type": "function", "function": {"name", "arguments"}}].
nlohmann::json ToolCallsJson(const std::vector<ToolCall>& calls);

// Non-streaming bodies; choices in index order.
nlohmann::json ChatResponseJson(const ResponseMeta& meta, const std::vector<ChoiceResult>& choices,
                                const Usage& usage);
nlohmann::json CompletionResponseJson(const ResponseMeta& meta,
                                      const std::vector<ChoiceResult>& choices,
                                      const Usage& usage, int64_t first_offset);

// Stream chunks. delta_text is appended content; finish_reason "" = null;
// logprobs null when not asked.
nlohmann::json ChatRoleChunk(const ResponseMeta& meta, int64_t index);
nlohmann::json ChatDeltaChunk(const ResponseMeta& meta, int64_t index, const std::string& delta_text,
                              const nlohmann::json& logprobs);
// A delta with another member than content: {"reasoning_content": "..."} or
// {"tool_calls": [...]}.
nlohmann::json ChatDeltaChunkWith(const ResponseMeta& meta, int64_t index, nlohmann::json delta,
                                  const nlohmann::json& logprobs);
nlohmann::json ChatFinishChunk(const ResponseMeta& meta, int64_t index,
                               const std::string& finish_reason);
nlohmann::json CompletionChunk(const ResponseMeta& meta, int64_t index, const std::string& text,
                               const nlohmann::json& logprobs, const std::string& finish_reason);
// The include_usage chunk: "choices": [] and the usage.
nlohmann::json UsageChunk(const ResponseMeta& meta, const Usage& usage);

}  // namespace kvfork::server
