// tokenizer.json "added_tokens": tokens matched in the text before
// pre-tokenization, leftmost-longest (Hugging Face's AddedVocabulary), with
// its lstrip / rstrip / single_word rules. Tokens with normalized=false are
// found in the raw text, those with normalized=true in the normalized text.
//
// Thread safety: immutable after construction. Cost: one byte-trie walk per
// text position whose byte can start a token (a 256-entry filter skips the
// rest), so O(n) for ordinary text.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "tokenizer/text_range.h"

namespace kvfork {

struct AddedToken {
  std::string content;
  int32_t id = -1;
  bool special = false;
  bool lstrip = false;       // swallow whitespace on the left
  bool rstrip = false;       // swallow whitespace on the right
  bool normalized = false;   // matched after normalization
  bool single_word = false;  // only when not inside a word
  // lstrip/rstrip take ASCII whitespace only (C's isspace), as llama.cpp's
  // special-token partition does, not Unicode White_Space.
  bool strip_ascii_only = false;
};

// A span of the text: either an added token (id >= 0) or text to tokenize.
struct TextSpan {
  size_t begin = 0;
  size_t end = 0;
  int32_t id = -1;
};

class AddedTokenMatcher {
 public:
  // patterns[i] is what to look for (the content, normalized if needed).
  AddedTokenMatcher() = default;
  void Add(std::string pattern, const AddedToken& token);

  // Splits text into spans covering it completely, in order. Empty when text is.
  // A special token whose match touches a byte of `plain` (sorted, disjoint)
  // is not taken, and the scan goes on after it, as Hugging Face's
  // AddedVocabulary does with encode_special_tokens: its bytes stay text.
  void Split(std::string_view text, std::vector<TextSpan>* spans,
             std::span<const TextRange> plain = {}) const;
  bool has_special() const { return has_special_; }
  bool empty() const { return tokens_.empty(); }

 private:
  struct Node {
    std::vector<std::pair<uint8_t, int32_t>> children;  // sorted by byte
    int32_t token = -1;                                  // index into tokens_
  };
  int32_t Child(int32_t node, uint8_t byte) const;

  std::vector<Node> nodes_{Node{}};
  std::vector<AddedToken> tokens_;
  bool first_byte_[256] = {};
  bool has_special_ = false;
};

}  // namespace kvfork
