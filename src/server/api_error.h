// An error answered to an HTTP client, in OpenAI's shape:
//   {"error": {"message": "...", "type": "...", "param": "..." | null, "code": "..." | null}}
// with the HTTP status that goes with it. Values only; no I/O.
#pragma once

#include <string>

#include "core/status.h"

namespace kvfork::server {

struct ApiError {
  int http_status = 400;
  std::string message;
  std::string type = "invalid_request_error";
  std::string param;  // the request field at fault; "" = null
  std::string code;   // machine-readable reason; "" = null

  // The JSON body, serialized (invalid UTF-8 in the message is replaced).
  std::string ToJson() const;
};

// 400 naming the field: "'temperature' must be a number, got string".
ApiError InvalidField(const std::string& param, const std::string& message);
ApiError BadRequest(const std::string& message, const std::string& code = "");
ApiError Unauthorized(const std::string& message);
ApiError NotFound(const std::string& message, const std::string& code);
ApiError PayloadTooLarge(const std::string& message);
ApiError QueueFull(const std::string& message);
ApiError Unavailable(const std::string& message);
ApiError Internal(const std::string& message);

// Maps an engine or tokenizer Status: InvalidArgument/OutOfRange -> 400,
// ResourceExhausted -> 429, Unavailable -> 503, anything else -> 500. param
// names the request field when the caller knows it.
ApiError FromStatus(const Status& status, const std::string& param = "");

// The status line's reason for a code ("Bad Request"), for the default error.
const char* HttpReason(int http_status);

}  // namespace kvfork::server
