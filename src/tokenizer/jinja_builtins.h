// jinja2's filters, tests and globals with the semantics of jinja2 3.1 as
// transformers configures it. tojson is transformers' override: json.dumps with
// ensure_ascii=False and its indent/separators/sort_keys arguments.
// Stateless; thread-safe.
#pragma once

#include <ctime>
#include <string>

#include "core/status.h"
#include "tokenizer/jinja_access.h"
#include "tokenizer/jinja_value.h"

namespace kvfork::jinja {

bool HasFilter(const std::string& name);
bool HasTest(const std::string& name);
StatusOr<Value> ApplyFilter(const std::string& name, const Value& input, const CallArgs& args);
StatusOr<bool> ApplyTest(const std::string& name, const Value& input, const CallArgs& args);

// The globals transformers' environment has: range, dict, namespace,
// raise_exception and strftime_now (formatting `now` in local time).
// Returns an undefined value for any other name.
Value Global(const std::string& name, std::time_t now);

}  // namespace kvfork::jinja
