#include "server/assistant_output.h"

#include <utility>

namespace kvfork::server {

void AssistantDelta::Append(AssistantDelta other) {
  reasoning += other.reasoning;
  content += other.content;
  for (ToolCall& c : other.calls) calls.push_back(std::move(c));
}

AssistantOutputParser::AssistantOutputParser(const AssistantParsing& parsing) {
  if (parsing.reasoning) reasoning_.emplace(parsing.reasoning_starts_inside);
  if (parsing.tool_format != ToolCallFormat::kNone)
    tools_.emplace(parsing.tool_format, parsing.max_tool_calls);
}

AssistantDelta AssistantOutputParser::Route(ReasoningOutput r) {
  AssistantDelta d;
  d.reasoning = std::move(r.reasoning);
  if (!tools_) {
    d.content = std::move(r.content);
    return d;
  }
  ToolCallOutput t = tools_->Feed(r.content);
  d.content = std::move(t.content);
  d.calls = std::move(t.calls);
  return d;
}

AssistantDelta AssistantOutputParser::Feed(std::string_view text) {
  if (reasoning_) return Route(reasoning_->Feed(text));
  return Route(ReasoningOutput{"", std::string(text)});
}

AssistantDelta AssistantOutputParser::Finish() {
  AssistantDelta d = reasoning_ ? Route(reasoning_->Finish()) : AssistantDelta{};
  if (tools_) {
    ToolCallOutput t = tools_->Finish();
    d.content += t.content;
    for (ToolCall& c : t.calls) d.calls.push_back(std::move(c));
  }
  return d;
}

}  // namespace kvfork::server
