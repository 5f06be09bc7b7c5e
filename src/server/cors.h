// CORS for `--cors-origins LIST`: off by default, since a server on loopback
// should not answer every web page a browser on the same machine opens. With
// a list ("https://a.example,http://localhost:3000", or "*"), a request whose
// Origin is listed gets Access-Control-Allow-Origin, and a preflight OPTIONS
// is answered 204 with the allowed methods and headers. Unlisted origins get
// no CORS headers (the browser then blocks the response).
//
// Immutable after construction; thread-safe.
#pragma once

#include <string>
#include <vector>

#include "server/http_message.h"

namespace kvfork::server {

class CorsPolicy {
 public:
  explicit CorsPolicy(std::vector<std::string> origins) : origins_(std::move(origins)) {}
  bool enabled() const { return !origins_.empty(); }
  // Whether req is a CORS preflight (OPTIONS with Origin and
  // Access-Control-Request-Method) that this policy answers.
  bool IsPreflight(const HttpRequest& req) const;
  // Answers a preflight: 204 with the allow headers (listed origin) or 403.
  void AnswerPreflight(const HttpRequest& req, HttpResponse& res) const;
  // Adds Access-Control-Allow-Origin (and Vary, Expose-Headers) for a listed
  // Origin of an ordinary request.
  void Apply(const HttpRequest& req, HttpResponse& res) const;

 private:
  bool Allowed(const std::string& origin) const;
  std::vector<std::string> origins_;
};

}  // namespace kvfork::server
