#include "server/chat_formatter.h"

namespace kvfork::server {
namespace {

using nlohmann::json;

class OpenAiChatFormatter : public ChatFormatter {
 public:
  explicit OpenAiChatFormatter(const ResponseMeta& meta) : meta_(meta) {}

  void Begin(size_t num_choices, std::vector<std::string>* events) override {
    for (size_t i = 0; i < num_choices; ++i)
      events->push_back(SseData(ChatRoleChunk(meta_, static_cast<int64_t>(i))));
  }

  void Delta(int64_t index, const AssistantDelta& delta, size_t calls_before, const json& logprobs,
             std::vector<std::string>* events) override {
    // The logprobs ride on the first chunk of this token's output.
    json lp = logprobs;
    auto take_lp = [&lp] {
      json out = std::move(lp);
      lp = nullptr;
      return out;
    };
    if (!delta.reasoning.empty())
      events->push_back(SseData(
          ChatDeltaChunkWith(meta_, index, {{"reasoning_content", delta.reasoning}}, take_lp())));
    if (!delta.content.empty() || (!lp.is_null() && delta.calls.empty()))
      events->push_back(SseData(ChatDeltaChunk(meta_, index, delta.content, take_lp())));
    // OpenAI's shape: index, id, type and name first (empty arguments),
    // then the arguments.
    for (size_t i = 0; i < delta.calls.size(); ++i) {
      const ToolCall& call = delta.calls[i];
      const int64_t call_index = static_cast<int64_t>(calls_before + i);
      json head = {{"index", call_index},
                   {"id", call.id},
                   {"type", "function"},
                   {"function", {{"name", call.name}, {"arguments", ""}}}};
      events->push_back(SseData(
          ChatDeltaChunkWith(meta_, index, {{"tool_calls", json::array({head})}}, take_lp())));
      json args = {{"index", call_index}, {"function", {{"arguments", call.arguments}}}};
      events->push_back(SseData(
          ChatDeltaChunkWith(meta_, index, {{"tool_calls", json::array({args})}}, nullptr)));
    }
  }

  void Finish(int64_t index, const std::string& finish_reason,
              std::vector<std::string>* events) override {
    events->push_back(SseData(ChatFinishChunk(meta_, index, finish_reason)));
  }

  void End(const Usage& usage, bool failed, std::vector<std::string>* events) override {
    if (!failed && meta_.include_usage) events->push_back(SseData(UsageChunk(meta_, usage)));
    events->push_back(kSseDone);
  }

  std::string ErrorEvent(const ApiError& error) override {
    return "data: " + error.ToJson() + "\n\n";
  }

  json Body(const std::vector<ChoiceResult>& choices, const Usage& usage) override {
    return ChatResponseJson(meta_, choices, usage);
  }

 private:
  ResponseMeta meta_;
};

}  // namespace

std::unique_ptr<ChatFormatter> MakeOpenAiChatFormatter(const ResponseMeta& meta) {
  return std::make_unique<OpenAiChatFormatter>(meta);
}

}  // namespace kvfork::server
