// Splits a Jinja template into tokens exactly as jinja2's lexer does with
// transformers' settings (trim_blocks, lstrip_blocks, keep_trailing_newline
// off): whitespace control ({%- -%} {{- -}} {#- -#}, '+' to keep), comments
// dropped, newlines normalised to \n, one trailing newline removed.
// Pure function; thread-safe; O(template length).
#pragma once

#include <string>
#include <vector>

#include "core/status.h"

namespace kvfork::jinja {

enum class TokenType {
  kData,        // literal text to output
  kVarBegin,    // {{
  kVarEnd,      // }}
  kBlockBegin,  // {%
  kBlockEnd,    // %}
  kName,
  kString,  // value is the decoded string
  kInteger,
  kFloat,
  kOperator,  // value is the operator text: "+", "//", "==", "(", ...
  kEof,
};

struct Token {
  TokenType type;
  std::string value;
  int line;  // 1-based line in the template
};

StatusOr<std::vector<Token>> Tokenize(const std::string& source);

}  // namespace kvfork::jinja
