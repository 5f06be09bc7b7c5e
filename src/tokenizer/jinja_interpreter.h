// Renders a parsed Template against a context of variables. Each call owns
// its scopes and output; the Template is only read, so one Template can be
// rendered from many threads at once. Cost: one tree walk, O(output size +
// operations the template performs).
#pragma once

#include <ctime>
#include <string>

#include "core/status.h"
#include "tokenizer/jinja_ast.h"
#include "tokenizer/jinja_value.h"

namespace kvfork::jinja {

struct RenderOptions {
  // What strftime_now() formats (in local time, as datetime.now() does).
  std::time_t now = 0;
};

// context must be a dict: its keys are the template's variables.
StatusOr<std::string> Render(const Template& tmpl, const Value& context,
                             const RenderOptions& options);

// Checks at parse time that every filter and test the template names exists,
// as jinja2 does when it compiles ("No filter named 'x'").
Status CheckNames(const Template& tmpl);

}  // namespace kvfork::jinja
