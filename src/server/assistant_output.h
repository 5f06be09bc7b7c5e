// One chat choice's reply read by the parsers its request turned on:
// reasoning (<think>) first, then tool calls in what remains. What the
// reply becomes is the same whatever API formats it (OpenAI chat,
// Anthropic messages, OpenAI responses). One per choice, one thread.
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "server/reasoning_parser.h"
#include "server/tool_call_parser.h"

namespace kvfork::server {

// Which parsers a request runs.
struct AssistantParsing {
  bool reasoning = false;                              // split <think>...</think>
  bool reasoning_starts_inside = false;                // the prompt opened <think>
  ToolCallFormat tool_format = ToolCallFormat::kNone;  // kNone: no tool parsing
  size_t max_tool_calls = 0;                           // parallel_tool_calls false: 1
  bool enabled() const { return reasoning || tool_format != ToolCallFormat::kNone; }
};

struct AssistantDelta {
  std::string reasoning;
  std::string content;
  std::vector<ToolCall> calls;
  bool empty() const { return reasoning.empty() && content.empty() && calls.empty(); }
  void Append(AssistantDelta other);
};

class AssistantOutputParser {
 public:
  explicit AssistantOutputParser(const AssistantParsing& parsing);

  AssistantDelta Feed(std::string_view text);
  AssistantDelta Finish();

 private:
  AssistantDelta Route(ReasoningOutput r);

  std::optional<ReasoningStreamParser> reasoning_;
  std::optional<ToolCallStreamParser> tools_;
};

}  // namespace kvfork::server
