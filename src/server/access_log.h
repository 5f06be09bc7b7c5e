// One access-log line per HTTP request (docs/server.md, "Access log"):
//   access time=2026-12-05T01:02:03.456Z id=REQID remote=127.0.0.1:5555
//     method=POST route=/v1/completions status=200 duration_ms=12.3
//     prompt_tokens=5 cached_tokens=0 completion_tokens=16
// Token counts appear on generation routes only. No prompt or message text
// is ever part of it (--log-prompts logs prompts on lines of their own).
// Pure formatting; no I/O.
#pragma once

#include <cstdint>
#include <string>

namespace kvfork::server {

struct AccessRecord {
  int64_t unix_ms = 0;  // when the response was done
  std::string request_id;
  std::string remote;  // "addr:port"
  std::string method;
  std::string route;  // the route pattern, or "other" for no route
  int status = 0;
  double seconds = 0.0;
  std::string extra;  // appended as is: TokenFields() on generation routes
};

std::string AccessLogLine(const AccessRecord& r);
// " prompt_tokens=P cached_tokens=C completion_tokens=N"
std::string TokenFields(int64_t prompt_tokens, int64_t cached_tokens, int64_t completion_tokens);

// A request id for X-Request-Id: the client's own when it is 1..128 visible
// ASCII bytes, else 32 random hex digits.
std::string RequestIdFor(const std::string& client_value);

}  // namespace kvfork::server
