// One HTTP/1.1 request and its response as the transport (http_transport.h)
// hands them to the routes: the parsed head and the whole body in, a status,
// headers and either a body or a stream provider out. Values only; the
// transport owns the socket.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <utility>
#include <vector>

namespace kvfork::server {

struct HttpRequest {
  std::string method;  // "GET", "POST", ... as sent (methods are case-sensitive)
  std::string target;  // the request target as sent: "/v1/models?x=1"
  std::string path;    // the target's path, percent-decoded: "/v1/models"
  std::map<std::string, std::string> params;  // query parameters, decoded (last one wins)
  int version_minor = 1;                      // HTTP/1.0 or HTTP/1.1
  // Header fields in order, names lower-cased, values without surrounding
  // whitespace. Repeated names stay separate entries.
  std::vector<std::pair<std::string, std::string>> headers;
  std::string body;  // de-chunked
  std::string remote_addr;
  int remote_port = 0;
  // Asked by long handlers (a non-streaming generation) to learn that the
  // client has gone; always false when the transport cannot tell.
  std::function<bool()> client_gone;

  // The first value of a header (name in any case), or "".
  const std::string& Header(const std::string& name) const;
  bool HasHeader(const std::string& name) const;
  // A query parameter, or "".
  std::string Param(const std::string& name) const;
};

// Writes one piece of a streamed body; false once the client is gone (the
// provider should then stop).
using StreamWrite = std::function<bool(const std::string& data)>;

struct HttpResponse {
  int status = 200;
  std::string content_type = "application/json";
  std::vector<std::pair<std::string, std::string>> headers;  // extra fields, as given
  std::string body;
  // When set, the body is streamed (chunked on HTTP/1.1): the transport sends
  // the head, then calls stream once with a writer and sends the end of the
  // body when it returns true. false: the stream was cut, the connection is
  // closed without a proper end.
  std::function<bool(const StreamWrite& write)> stream;
  // Extra " key=value" fields for the access log, asked once the response
  // has been written (a stream's token counts are known only then).
  std::function<std::string()> log_fields;

  void SetHeader(const std::string& name, const std::string& value);
  const std::string* FindHeader(const std::string& name) const;  // any case
};

}  // namespace kvfork::server
