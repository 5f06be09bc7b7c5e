// Route table of the server: (method, path) -> handler, exact paths or a
// prefix ("/v1/models/"). A path served under other methods only is a 405
// with an Allow header naming them; an unknown path is a 404. HEAD is
// served by a GET route (the transport drops the body).
//
// Built once before serving; Dispatch is then const and thread-safe.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "server/http_message.h"

namespace kvfork::server {

using RouteHandler = std::function<void(const HttpRequest& req, HttpResponse& res)>;

class Router {
 public:
  void Add(const std::string& method, const std::string& path, RouteHandler handler);
  // path_prefix must end in '/'; matches any longer path below it.
  void AddPrefix(const std::string& method, const std::string& path_prefix, RouteHandler handler);

  enum class Match { kFound, kWrongMethod, kNoRoute };
  // kFound: *handler is set. kWrongMethod: *allow lists the methods the path
  // takes ("GET, HEAD").
  Match Find(const std::string& method, const std::string& path, const RouteHandler** handler,
             std::string* allow) const;
  // The route's pattern for a path ("/v1/models/" for "/v1/models/x"), or ""
  // for no route: the bounded label set of metrics and logs.
  std::string Pattern(const std::string& path) const;

 private:
  struct Route {
    std::string method;
    std::string path;
    bool prefix = false;
    RouteHandler handler;
  };
  bool Matches(const Route& r, const std::string& path) const;
  std::vector<Route> routes_;
};

}  // namespace kvfork::server
