// Parses jinja2 tokens into a Template, with jinja2's grammar and operator
// precedence. A tag or operator outside the supported subset is an error
// naming it and its line, never a template that renders differently.
// Pure function; thread-safe; O(tokens).
#pragma once

#include <string>

#include "core/status.h"
#include "tokenizer/jinja_ast.h"

namespace kvfork::jinja {

StatusOr<Template> ParseTemplate(const std::string& source);

}  // namespace kvfork::jinja
