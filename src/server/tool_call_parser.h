// Tool calls in a model's output text, in the format its chat template taught
// it, turned into OpenAI's tool_calls (name + arguments as a JSON string):
//   hermes       Qwen3 / Qwen2.5 / Hermes: <tool_call>{"name", "arguments"}</tool_call>
//   llama3_json  Llama 3.1 / 3.2: the whole reply is {"name", "parameters"}
//                (several joined by ';'), optionally after <|python_tag|>
//   mistral      [TOOL_CALLS][{"name", "arguments"}, ...] (the marker may be
//                left out of the text when it is a special token)
// A call whose JSON does not parse stays in the content as text: the client
// sees what the model wrote rather than losing it.
//
// ToolCallStreamParser is incremental (one per choice, one thread): it
// releases content as soon as it cannot be the start of a call and a call
// once its text is complete. Parsing a whole text is Feed + Finish.
// (DESIGN.md places parsers in grammar/; they live here until that module
// exists outside the constrained-decoding work.)
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace kvfork::server {

enum class ToolCallFormat { kNone, kHermes, kLlama3Json, kMistral };

// "hermes", "llama3_json", "mistral", "none"; nullopt otherwise ("auto" is
// the caller's: DetectToolCallFormat).
std::optional<ToolCallFormat> ParseToolCallFormat(std::string_view name);
const char* ToolCallFormatName(ToolCallFormat format);
// The format a chat template's source teaches (kNone when it shows none).
ToolCallFormat DetectToolCallFormat(std::string_view chat_template_source);

struct ToolCall {
  std::string id;  // "call_" + 24 hex digits
  std::string name;
  std::string arguments;  // a JSON object's text, keys in the model's order
};

struct ToolCallOutput {
  std::string content;          // text outside calls, released so far
  std::vector<ToolCall> calls;  // calls completed so far
};

class ToolCallStreamParser {
 public:
  // max_calls: calls past this many are dropped (parallel_tool_calls false: 1).
  ToolCallStreamParser(ToolCallFormat format, size_t max_calls);

  // New text of the reply; returns what it releases.
  ToolCallOutput Feed(std::string_view text);
  // The reply ended: everything held back is released (an unfinished or
  // unparseable call as content).
  ToolCallOutput Finish();

  size_t calls_emitted() const { return calls_emitted_; }

 private:
  enum class State { kUndecided, kContent, kInCall, kWholeReplyCall };
  void Step(ToolCallOutput* out);
  void EmitCalls(std::vector<ToolCall> calls, ToolCallOutput* out);

  ToolCallFormat format_;
  size_t max_calls_;
  size_t calls_emitted_ = 0;
  State state_;
  std::string pending_;         // text not yet released
  size_t in_call_scanned_ = 0;  // kInCall: bytes of pending_ searched for the closing tag
};

// The whole reply at once.
ToolCallOutput ParseToolCalls(ToolCallFormat format, std::string_view text, size_t max_calls);

}  // namespace kvfork::server
