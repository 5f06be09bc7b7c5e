// Parsing a request body's JSON text. Two forms: nlohmann::json (objects
// sorted by key) for routes that only look fields up, and
// nlohmann::ordered_json (objects in the order the client wrote them) for
// what reaches a chat template, whose `tojson` must print a tool's schema
// in the request's order, as Python's dicts keep it.
#pragma once

#include <nlohmann/json.hpp>
#include <optional>
#include <string_view>

#include "server/api_error.h"

namespace kvfork::server {

// Deepest nesting of arrays and objects a request body may have (a tool's
// JSON schema is a few levels; the limit keeps recursion over the value,
// in copies and in the chat template, far from the stack's end).
inline constexpr int kMaxJsonDepth = 128;

// Parses JSON text; a syntax error (or invalid UTF-8) or nesting deeper than
// kMaxJsonDepth is a 400 saying what.
std::optional<ApiError> ParseJsonBody(std::string_view body, nlohmann::json* out);

// As ParseJsonBody, keeping each object's keys in the order of the text. A
// key given twice keeps its first place and its last value (Python's
// json.loads). Linear in the text: nlohmann's own ordered parse looks every
// key up by a scan of the object so far, quadratic in an object's size.
std::optional<ApiError> ParseJsonBody(std::string_view body, nlohmann::ordered_json* out);

}  // namespace kvfork::server
