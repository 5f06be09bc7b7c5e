// Member, item and slice access, iteration and `in` with the semantics of
// jinja2 3.1 in transformers' ImmutableSandboxedEnvironment, including the
// methods of str, dict and list that templates call (methods that would
// mutate a list or dict are refused, as the sandbox does). Stateless;
// thread-safe.
#pragma once

#include <string>

#include "core/status.h"
#include "tokenizer/jinja_value.h"

namespace kvfork::jinja {

// obj.name: a bound method, a dict key or namespace attribute, else an
// undefined value saying what was missing. Errors only for an undefined obj.
StatusOr<Value> GetAttr(const Value& obj, const std::string& name);
// obj[key]: Python indexing (negative indices), then attribute lookup, as
// jinja2's Environment.getitem does.
StatusOr<Value> GetItem(const Value& obj, const Value& key);
// obj[start:stop:step] on a str or list; missing parts are undefined values.
StatusOr<Value> GetSlice(const Value& obj, const Value& start, const Value& stop,
                         const Value& step);
// Python's iter(v) as a list: list items, dict keys, str code points; an
// undefined value iterates as empty.
StatusOr<ValueList> Iterate(const Value& v);
// Python's `item in container`.
StatusOr<bool> Contains(const Value& container, const Value& item);
// Python's len(); an undefined value has length 0.
StatusOr<int64_t> Length(const Value& v);
// The error jinja2 raises when an undefined value is used.
Status UndefinedError(const Value& undefined);
// str.splitlines() (used by the indent filter too).
std::vector<std::string> PySplitLines(const std::string& s);

}  // namespace kvfork::jinja
