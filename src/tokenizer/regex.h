// A compiled PCRE2 pattern (UTF + UCP, JIT) for the pre-tokenizer's Split
// rules. Hugging Face compiles these with Oniguruma; the patterns tokenizer.json
// files use (\p{L}, \p{N}, (?i:...), (?!\S)) mean the same in PCRE2.
// Invalid UTF-8 in the subject never matches (PCRE2_MATCH_INVALID_UTF), so such
// bytes fall into the gaps between matches.
//
// Thread safety: immutable after Compile; FindAll may run on many threads at
// once (match data and JIT stack are per thread).
#pragma once

#include <cstddef>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "core/status.h"

namespace kvfork {

class Regex {
 public:
  ~Regex();
  Regex(Regex&&) noexcept;
  Regex& operator=(Regex&&) noexcept;

  // Error names the pattern and PCRE2's message and offset.
  static StatusOr<Regex> Compile(std::string_view pattern);
  // Literal text (Split's {"String": ...} form).
  static StatusOr<Regex> CompileLiteral(std::string_view literal);

  // Appends [begin, end) of every non-empty match, left to right. O(n).
  void FindAll(std::string_view text, std::vector<std::pair<size_t, size_t>>* matches) const;

 private:
  struct Impl;
  explicit Regex(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace kvfork
