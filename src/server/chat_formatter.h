// How a chat run's results are written for one API. GenerationRun drives
// the engine and the parsers; a ChatFormatter turns what they give into
// that API's body or stream events: OpenAI chat completions (here),
// Anthropic messages (anthropic_messages.h), OpenAI responses
// (responses_api.h). One per run, called from the run's thread only.
#pragma once

#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "engine/request.h"
#include "server/api_error.h"
#include "server/assistant_output.h"
#include "server/response_writer.h"

namespace kvfork::server {

class ChatFormatter {
 public:
  virtual ~ChatFormatter() = default;

  // Streams: the events before any token (role chunks, message_start).
  virtual void Begin(size_t num_choices, std::vector<std::string>* events) = 0;
  // Streams: new output of choice `index`; calls_before = calls it sent
  // before these (their index). logprobs: null unless asked.
  virtual void Delta(int64_t index, const AssistantDelta& delta, size_t calls_before,
                     const nlohmann::json& logprobs, std::vector<std::string>* events) = 0;
  // Streams: choice `index` ended (finish_reason as OpenAI names it).
  virtual void Finish(int64_t index, const std::string& finish_reason,
                      std::vector<std::string>* events) = 0;
  // Streams: every choice ended (failed: after ErrorEvent); the last events.
  virtual void End(const Usage& usage, bool failed, std::vector<std::string>* events) = 0;
  // Streams: the engine failed the run.
  virtual std::string ErrorEvent(const ApiError& error) = 0;
  // Non-streaming: the body.
  virtual nlohmann::json Body(const std::vector<ChoiceResult>& choices, const Usage& usage) = 0;
  // An error answer's body (OpenAI's shape unless the API has its own).
  virtual std::string ErrorBody(const ApiError& error) { return error.ToJson(); }
};

// OpenAI's chat.completion / chat.completion.chunk (response_writer.h), with
// reasoning_content and tool_calls.
std::unique_ptr<ChatFormatter> MakeOpenAiChatFormatter(const ResponseMeta& meta);

}  // namespace kvfork::server
