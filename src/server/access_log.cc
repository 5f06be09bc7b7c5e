#include "server/access_log.h"

#include <cstdio>
#include <ctime>
#include <random>

namespace kvfork::server {
namespace {

// Values are written unquoted: only printable non-space bytes stay, so a
// request id or method cannot forge a second line or field.
std::string Field(const std::string& s) {
  std::string out;
  for (char c : s) {
    const unsigned char u = static_cast<unsigned char>(c);
    out.push_back(u > 0x20 && u < 0x7f ? c : '_');
  }
  return out.empty() ? "-" : out;
}

}  // namespace

std::string AccessLogLine(const AccessRecord& r) {
  const time_t secs = static_cast<time_t>(r.unix_ms / 1000);
  tm utc{};
  gmtime_r(&secs, &utc);
  char when[96];
  std::snprintf(when, sizeof(when), "%04d-%02d-%02dT%02d:%02d:%02d.%03dZ", utc.tm_year + 1900,
                utc.tm_mon + 1, utc.tm_mday, utc.tm_hour, utc.tm_min, utc.tm_sec,
                static_cast<int>(r.unix_ms % 1000));
  char duration[32];
  std::snprintf(duration, sizeof(duration), "%.1f", r.seconds * 1e3);
  std::string line = std::string("access time=") + when + " id=" + Field(r.request_id) +
                     " remote=" + Field(r.remote) + " method=" + Field(r.method) +
                     " route=" + Field(r.route) + " status=" + std::to_string(r.status) +
                     " duration_ms=" + duration;
  return line + r.extra;
}

std::string TokenFields(int64_t prompt_tokens, int64_t cached_tokens, int64_t completion_tokens) {
  return " prompt_tokens=" + std::to_string(prompt_tokens) +
         " cached_tokens=" + std::to_string(cached_tokens) +
         " completion_tokens=" + std::to_string(completion_tokens);
}

std::string RequestIdFor(const std::string& client_value) {
  bool ok = !client_value.empty() && client_value.size() <= 128;
  for (char c : client_value) {
    const unsigned char u = static_cast<unsigned char>(c);
    if (u <= 0x20 || u >= 0x7f) ok = false;
  }
  if (ok) return client_value;
  thread_local std::mt19937_64 rng{std::random_device{}()};
  char hex[33];
  std::snprintf(hex, sizeof(hex), "%016llx%016llx", static_cast<unsigned long long>(rng()),
                static_cast<unsigned long long>(rng()));
  return hex;
}

}  // namespace kvfork::server
