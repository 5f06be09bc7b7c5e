// A Jinja interpreter, as small as it can be, that renders Hugging Face chat
// templates byte-identically to Python's jinja2 with the settings transformers
// uses (trim_blocks, lstrip_blocks) and its globals (raise_exception,
// strftime_now, tojson). A construct it does not support is an error naming
// the construct and the template line.
#pragma once

#include <ctime>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

#include "core/status.h"

namespace kvfork {

class ChatTemplate {
 public:
  ~ChatTemplate();
  ChatTemplate(ChatTemplate&&) noexcept;
  ChatTemplate& operator=(ChatTemplate&&) noexcept;

  // Parses a template once; Render can then be called from any thread.
  static StatusOr<ChatTemplate> Parse(const std::string& source);

  // context holds the template's variables, as transformers passes them:
  // {"messages": [...], "add_generation_prompt": bool, "tools": [...] (optional),
  //  "bos_token": "...", "eos_token": "...", "enable_thinking": bool (Qwen3), ...}
  // nlohmann::json sorts object keys, so a tool schema printed with tojson
  // comes out in sorted order; use RenderOrdered to match Python, whose dicts
  // keep the request's order (the server does).
  StatusOr<std::string> Render(const nlohmann::json& context) const;
  // As Render, keeping the key order of the caller's objects (parse the
  // request with nlohmann::ordered_json).
  StatusOr<std::string> RenderOrdered(const nlohmann::ordered_json& context) const;
  // As RenderOrdered with strftime_now() formatting `now` instead of the
  // current time (reproducible prompts, tests).
  StatusOr<std::string> RenderAt(const nlohmann::ordered_json& context, std::time_t now) const;

 private:
  struct Impl;
  explicit ChatTemplate(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// transformers' continue_final_message: cuts a rendered chat right after the
// final message's content, so the model continues that message instead of
// seeing it closed (no end-of-turn). The content is found by its last
// occurrence, stripped of surrounding whitespace when the template trimmed
// it, exactly as apply_chat_template does; an error when the template did
// not print it.
StatusOr<std::string> CutAfterFinalMessage(std::string_view rendered,
                                           std::string_view final_content);

}  // namespace kvfork
