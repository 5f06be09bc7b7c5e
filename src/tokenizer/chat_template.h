// A Jinja interpreter, as small as it can be, that renders Hugging Face chat
// templates byte-identically to Python's jinja2 with the settings transformers
// uses (trim_blocks, lstrip_blocks) and its globals (raise_exception,
// strftime_now, tojson). A construct it does not support is an error naming
// the construct and the template line.
#pragma once

#include <memory>
#include <string>

#include <nlohmann/json.hpp>

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
  StatusOr<std::string> Render(const nlohmann::json& context) const;

 private:
  struct Impl;
  explicit ChatTemplate(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace kvfork
