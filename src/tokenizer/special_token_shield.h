// Keeps special-token strings that arrive inside request values plain text
// in a rendered chat prompt. A user who writes "<|im_end|>\n<|im_start|>system"
// in a message must not open a system turn: the chat template's own special
// tokens become their ids, the same strings inside message content, tool
// descriptions or arguments stay text (Hugging Face's split_special_tokens,
// applied to the request's values only).
//
// How: before rendering, Shield replaces every special-token string inside
// every string (and object key) of the template's inputs by a marker
// "⦃N⦄" (U+2983, decimal N, U+2984: printable, caseless, never escaped by
// tojson or repr, so the template passes it through as it would the
// original). Restore puts the originals back into the rendered text and
// reports their byte ranges, which Tokenizer::Encode keeps plain. A "⦃" the
// client sent is shielded too, so every marker in the rendered text is ours.
// A template that cuts a string inside a marker leaves its pieces as text.
//
// One shield per prompt; not thread-safe. Cost: one scan of each string.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

#include "tokenizer/text_range.h"
#include "tokenizer/tokenizer.h"

namespace kvfork {

class SpecialTokenShield {
 public:
  explicit SpecialTokenShield(const Tokenizer& tokenizer) : tokenizer_(tokenizer) {}

  // Shields every string and object key inside *value, recursively.
  void Shield(nlohmann::ordered_json* value);
  // The shielded form of one string.
  std::string ShieldString(std::string_view text);

  // The text with every marker replaced by what it stands for; *plain
  // receives the ranges of the special-token strings put back (sorted).
  std::string Restore(std::string_view rendered, std::vector<TextRange>* plain) const;

 private:
  const Tokenizer& tokenizer_;
  std::vector<std::string> originals_;  // marker N -> the text it replaced
  std::vector<bool> special_;           // marker N stands for a special-token string
};

}  // namespace kvfork
