#include "server/api_error.h"

#include <nlohmann/json.hpp>

namespace kvfork::server {

std::string ApiError::ToJson() const {
  nlohmann::json err = {
      {"message", message},
      {"type", type},
      {"param", param.empty() ? nlohmann::json(nullptr) : nlohmann::json(param)},
      {"code", code.empty() ? nlohmann::json(nullptr) : nlohmann::json(code)},
  };
  return nlohmann::json{{"error", err}}.dump(-1, ' ', false,
                                             nlohmann::json::error_handler_t::replace);
}

ApiError InvalidField(const std::string& param, const std::string& message) {
  return ApiError{400, message, "invalid_request_error", param, "invalid_value"};
}

ApiError BadRequest(const std::string& message, const std::string& code) {
  return ApiError{400, message, "invalid_request_error", "", code};
}

ApiError Unauthorized(const std::string& message) {
  return ApiError{401, message, "authentication_error", "", "invalid_api_key"};
}

ApiError NotFound(const std::string& message, const std::string& code) {
  return ApiError{404, message, "not_found_error", "", code};
}

ApiError PayloadTooLarge(const std::string& message) {
  return ApiError{413, message, "invalid_request_error", "", "request_too_large"};
}

ApiError QueueFull(const std::string& message) {
  return ApiError{429, message, "rate_limit_error", "", "queue_full"};
}

ApiError Unavailable(const std::string& message) {
  return ApiError{503, message, "service_unavailable", "", "unavailable"};
}

ApiError Internal(const std::string& message) {
  return ApiError{500, message, "server_error", "", "internal_error"};
}

ApiError FromStatus(const Status& status, const std::string& param) {
  switch (status.code()) {
    case StatusCode::kInvalidArgument:
      return ApiError{400, status.message(), "invalid_request_error", param, "invalid_value"};
    case StatusCode::kOutOfRange:
      return ApiError{400, status.message(), "invalid_request_error", param,
                      "context_length_exceeded"};
    case StatusCode::kResourceExhausted:
      return QueueFull(status.message());
    case StatusCode::kUnavailable:
      return Unavailable(status.message());
    default:
      return Internal(status.ToString());
  }
}

const char* HttpReason(int http_status) {
  switch (http_status) {
    case 200: return "OK";
    case 204: return "No Content";
    case 400: return "Bad Request";
    case 401: return "Unauthorized";
    case 403: return "Forbidden";
    case 404: return "Not Found";
    case 405: return "Method Not Allowed";
    case 413: return "Payload Too Large";
    case 414: return "URI Too Long";
    case 408: return "Request Timeout";
    case 429: return "Too Many Requests";
    case 431: return "Request Header Fields Too Large";
    case 500: return "Internal Server Error";
    case 501: return "Not Implemented";
    case 503: return "Service Unavailable";
    case 505: return "HTTP Version Not Supported";
    default: return "Error";
  }
}

}  // namespace kvfork::server
