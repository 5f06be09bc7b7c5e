// Reasoning split out of a reply: the text between <think> and </think>
// (Qwen3, DeepSeek-R1, QwQ) becomes reasoning_content, the rest content,
// as vLLM's reasoning parsers and llama.cpp's --reasoning-format deepseek
// give it. Templates that open <think> in the prompt itself start the reply
// inside the reasoning (starts_inside). A reply without <think> is all
// content; one whose </think> never comes is all reasoning.
//
// Incremental, one per choice, one thread. Text that may be the start of a
// tag is held back until the next text decides.
#pragma once

#include <string>
#include <string_view>

namespace kvfork::server {

struct ReasoningOutput {
  std::string reasoning;
  std::string content;
};

class ReasoningStreamParser {
 public:
  explicit ReasoningStreamParser(bool starts_inside);

  ReasoningOutput Feed(std::string_view text);
  ReasoningOutput Finish();

 private:
  enum class State { kStart, kInside, kAfter };
  void Step(ReasoningOutput* out);

  State state_;
  bool strip_content_start_ = false;  // the blank lines after </think>
  std::string pending_;
};

// Whether a rendered prompt leaves the reply inside <think> (it ends with
// an open <think>, maybe followed by a newline).
bool PromptOpensReasoning(std::string_view prompt);

// Whether a chat template uses <think> tags at all (the parser is on).
bool TemplateUsesReasoning(std::string_view chat_template_source);

// The whole reply at once.
ReasoningOutput SplitReasoning(std::string_view text, bool starts_inside);

}  // namespace kvfork::server
