#include "server/cors.h"

#include "server/api_error.h"

namespace kvfork::server {

bool CorsPolicy::Allowed(const std::string& origin) const {
  if (origin.empty()) return false;
  for (const std::string& o : origins_)
    if (o == "*" || o == origin) return true;
  return false;
}

bool CorsPolicy::IsPreflight(const HttpRequest& req) const {
  return enabled() && req.method == "OPTIONS" && req.HasHeader("origin") &&
         req.HasHeader("access-control-request-method");
}

void CorsPolicy::AnswerPreflight(const HttpRequest& req, HttpResponse& res) const {
  const std::string& origin = req.Header("origin");
  if (!Allowed(origin)) {
    ApiError err{403, "origin '" + origin.substr(0, 200) + "' is not in --cors-origins",
                 "invalid_request_error", "", "cors_origin_not_allowed"};
    res.status = 403;
    res.body = err.ToJson();
    return;
  }
  res.status = 204;
  res.content_type.clear();
  res.SetHeader("Access-Control-Allow-Origin", origin);
  res.SetHeader("Vary", "Origin");
  res.SetHeader("Access-Control-Allow-Methods", "GET, POST, OPTIONS");
  // The headers the OpenAI clients send; echoing the request's own list
  // would allow anything.
  res.SetHeader("Access-Control-Allow-Headers",
                "Authorization, Content-Type, X-Request-Id, OpenAI-Organization, "
                "OpenAI-Project, X-Stainless-Lang, X-Stainless-Package-Version, X-Stainless-OS, "
                "X-Stainless-Arch, X-Stainless-Runtime, X-Stainless-Runtime-Version, "
                "X-Stainless-Retry-Count, X-Stainless-Timeout");
  res.SetHeader("Access-Control-Max-Age", "600");
}

void CorsPolicy::Apply(const HttpRequest& req, HttpResponse& res) const {
  if (!enabled()) return;
  const std::string& origin = req.Header("origin");
  if (!Allowed(origin)) return;
  res.SetHeader("Access-Control-Allow-Origin", origin);
  res.SetHeader("Vary", "Origin");
  res.SetHeader("Access-Control-Expose-Headers", "X-Request-Id");
}

}  // namespace kvfork::server
