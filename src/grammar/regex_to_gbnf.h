// Regular expressions (the ECMAScript / Python subset that is regular:
// literals, escapes, classes, ., groups, |, * + ? {m} {m,} {m,n}; ^ and $
// only at the ends) to a GBNF expression. Backreferences, lookaround and
// anchors elsewhere are not regular: an error naming them.
#pragma once

#include <string>
#include <string_view>

#include "core/status.h"

namespace kvfork::grammar {

enum class RegexTarget {
  kRaw,         // the output text itself matches
  kJsonString,  // the inside of a JSON string: the decoded value matches, so
                // '"' and '\' are written escaped, and control characters
                // (which JSON must escape) are left out of classes and '.'
};

// A GBNF expression (no rule name) matching the whole of what the regex
// matches. `field` names the request field in errors.
StatusOr<std::string> RegexToGbnf(std::string_view regex, RegexTarget target,
                                  std::string_view field);

// A complete grammar (root rule) for a regex constraint.
StatusOr<std::string> RegexGrammar(std::string_view regex, std::string_view field);

}  // namespace kvfork::grammar
