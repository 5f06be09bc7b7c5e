#include "server/http_router.h"

namespace kvfork::server {

void Router::Add(const std::string& method, const std::string& path, RouteHandler handler) {
  routes_.push_back({method, path, false, std::move(handler)});
}

void Router::AddPrefix(const std::string& method, const std::string& path_prefix,
                       RouteHandler handler) {
  routes_.push_back({method, path_prefix, true, std::move(handler)});
}

bool Router::Matches(const Route& r, const std::string& path) const {
  if (!r.prefix) return r.path == path;
  return path.size() > r.path.size() && path.compare(0, r.path.size(), r.path) == 0;
}

Router::Match Router::Find(const std::string& method, const std::string& path,
                           const RouteHandler** handler, std::string* allow) const {
  const std::string& as = method == "HEAD" ? std::string("GET") : method;
  std::vector<std::string> methods;
  for (const Route& r : routes_) {
    if (!Matches(r, path)) continue;
    if (r.method == as) {
      *handler = &r.handler;
      return Match::kFound;
    }
    methods.push_back(r.method);
    if (r.method == "GET") methods.push_back("HEAD");
  }
  if (methods.empty()) return Match::kNoRoute;
  allow->clear();
  for (const std::string& m : methods) {
    if (!allow->empty()) *allow += ", ";
    *allow += m;
  }
  return Match::kWrongMethod;
}

std::string Router::Pattern(const std::string& path) const {
  for (const Route& r : routes_)
    if (Matches(r, path)) return r.path;
  return "";
}

}  // namespace kvfork::server
