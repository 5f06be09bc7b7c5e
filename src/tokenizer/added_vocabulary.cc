#include "tokenizer/added_vocabulary.h"

#include <algorithm>
#include <optional>

#include <utf8proc.h>

#include "tokenizer/utf8.h"

namespace kvfork {
namespace {

// Rust's char::is_whitespace (Unicode White_Space), which Hugging Face's
// lstrip/rstrip use.
bool IsWhitespace(uint32_t cp) {
  return (cp >= 0x09 && cp <= 0x0D) || cp == 0x20 || cp == 0x85 || cp == 0xA0 || cp == 0x1680 ||
         (cp >= 0x2000 && cp <= 0x200A) || cp == 0x2028 || cp == 0x2029 || cp == 0x202F ||
         cp == 0x205F || cp == 0x3000;
}

// What a token's lstrip/rstrip may swallow.
bool Strippable(const AddedToken& tok, uint32_t cp) {
  return tok.strip_ascii_only ? (cp >= 0x09 && cp <= 0x0D) || cp == 0x20 : IsWhitespace(cp);
}

// The regex crate's \w, which single_word uses: letters, marks, decimal
// digits, connector punctuation.
bool IsWordChar(uint32_t cp) {
  switch (utf8proc_category(static_cast<utf8proc_int32_t>(cp))) {
    case UTF8PROC_CATEGORY_LU: case UTF8PROC_CATEGORY_LL: case UTF8PROC_CATEGORY_LT:
    case UTF8PROC_CATEGORY_LM: case UTF8PROC_CATEGORY_LO: case UTF8PROC_CATEGORY_MN:
    case UTF8PROC_CATEGORY_MC: case UTF8PROC_CATEGORY_ME: case UTF8PROC_CATEGORY_ND:
    case UTF8PROC_CATEGORY_PC:
      return true;
    default:
      return false;
  }
}

// Code point of the last character of text (invalid bytes: none).
std::optional<uint32_t> LastChar(std::string_view text) {
  if (text.empty()) return std::nullopt;
  size_t i = text.size() - 1;
  while (i > 0 && text.size() - i < 4 && (static_cast<uint8_t>(text[i]) & 0xC0) == 0x80) --i;
  utf8::Step st = utf8::DecodeAt(text, i);
  if (!st.valid || i + st.length != text.size()) return std::nullopt;
  return st.codepoint;
}

std::optional<uint32_t> FirstChar(std::string_view text) {
  if (text.empty()) return std::nullopt;
  utf8::Step st = utf8::DecodeAt(text, 0);
  if (!st.valid) return std::nullopt;
  return st.codepoint;
}

}  // namespace

int32_t AddedTokenMatcher::Child(int32_t node, uint8_t byte) const {
  const auto& ch = nodes_[node].children;
  auto it = std::lower_bound(ch.begin(), ch.end(), std::make_pair(byte, int32_t{-1}));
  return it != ch.end() && it->first == byte ? it->second : -1;
}

void AddedTokenMatcher::Add(std::string pattern, const AddedToken& token) {
  if (pattern.empty()) return;
  int32_t node = 0;
  for (char c : pattern) {
    const auto b = static_cast<uint8_t>(c);
    int32_t next = Child(node, b);
    if (next < 0) {
      next = static_cast<int32_t>(nodes_.size());
      nodes_.emplace_back();
      auto& ch = nodes_[node].children;
      ch.insert(std::lower_bound(ch.begin(), ch.end(), std::make_pair(b, int32_t{-1})),
                {b, next});
    }
    node = next;
  }
  if (nodes_[node].token >= 0) return;  // the first token with this content wins
  nodes_[node].token = static_cast<int32_t>(tokens_.size());
  tokens_.push_back(token);
  has_special_ = has_special_ || token.special;
  first_byte_[static_cast<uint8_t>(pattern[0])] = true;
}

void AddedTokenMatcher::Split(std::string_view text, std::vector<TextSpan>* spans,
                              std::span<const TextRange> plain) const {
  // Whether [begin, end) touches a plain range (the first one ending after begin).
  auto touches_plain = [plain](size_t begin, size_t end) {
    auto it = std::upper_bound(plain.begin(), plain.end(), begin,
                               [](size_t b, const TextRange& r) { return b < r.end; });
    return it != plain.end() && it->begin < end;
  };
  const size_t n = text.size();
  size_t start_offset = 0;  // end of the last emitted span
  size_t i = 0;
  while (i < n) {
    if (!first_byte_[static_cast<uint8_t>(text[i])]) {
      ++i;
      continue;
    }
    // Longest token starting at i.
    int32_t node = 0, best = -1;
    size_t best_end = 0;
    for (size_t j = i; j < n; ++j) {
      node = Child(node, static_cast<uint8_t>(text[j]));
      if (node < 0) break;
      if (nodes_[node].token >= 0) best = nodes_[node].token, best_end = j + 1;
    }
    if (best < 0) {
      ++i;
      continue;
    }
    const AddedToken& tok = tokens_[best];
    if (tok.special && !plain.empty() && touches_plain(i, best_end)) {
      i = best_end;
      continue;
    }
    size_t start = i, stop = best_end;
    if (tok.single_word) {
      std::optional<uint32_t> before = LastChar(text.substr(0, start));
      std::optional<uint32_t> after = FirstChar(text.substr(stop));
      if ((before && IsWordChar(*before)) || (after && IsWordChar(*after))) {
        i = best_end;  // as the matcher's iterator, resume after the discarded match
        continue;
      }
    }
    if (tok.lstrip) {
      size_t s = start;
      while (s > start_offset) {
        size_t k = s - 1;
        while (k > start_offset && (static_cast<uint8_t>(text[k]) & 0xC0) == 0x80) --k;
        utf8::Step st = utf8::DecodeAt(text, k);
        if (!st.valid || k + st.length != s || !Strippable(tok, st.codepoint)) break;
        s = k;
      }
      start = s;
    }
    if (tok.rstrip) {
      while (stop < n) {
        utf8::Step st = utf8::DecodeAt(text, stop);
        if (!st.valid || !Strippable(tok, st.codepoint)) break;
        stop += st.length;
      }
    }
    if (start > start_offset) spans->push_back({start_offset, start, -1});
    spans->push_back({start, stop, tok.id});
    start_offset = stop;
    i = stop;
  }
  if (start_offset < n) spans->push_back({start_offset, n, -1});
}

}  // namespace kvfork
