// One client connection of the server's HTTP/1.1 transport: reads requests
// with the strict parser (http_parser.h), hands each to the handler, writes
// its response (a body, or a chunked stream), and loops while the connection
// is kept alive. Pipelined requests are answered one after another, in order.
//
// Timeouts: the head of a request must arrive within read_timeout of its first
// byte (a client sending a byte a second is cut, not served forever); each
// later read and every write wait at most read/write_timeout; an idle
// connection is closed after keep_alive_timeout.
//
// Thread affinity: Serve runs on one transport worker thread. The socket may
// be shut down from another thread (a drain); every wait then ends at once.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <string>

#include "server/http_message.h"
#include "server/http_parser.h"

namespace kvfork::server {

struct ConnectionOptions {
  HttpLimits limits;
  int read_timeout_ms = 30000;
  int write_timeout_ms = 30000;
  int keep_alive_timeout_ms = 5000;
};

using HttpHandler = std::function<void(HttpRequest& req, HttpResponse& res)>;
// Called once per response written (or failed): the request as far as it was
// parsed, the response, and the seconds from the request's first byte.
using ResponseLog =
    std::function<void(const HttpRequest& req, const HttpResponse& res, double seconds)>;

// What the transport lets a connection know and ask.
struct ConnectionHooks {
  HttpHandler handler;
  ResponseLog log;
  // True once the server is draining: every response then closes its
  // connection.
  const std::atomic<bool>* closing = nullptr;
  // Called with true when the connection starts waiting for its next request
  // (idle: a drain may shut it down) and false when it starts on one.
  std::function<void(bool idle)> set_idle;
};

class Connection {
 public:
  // fd: a connected, non-blocking socket the caller owns (and closes).
  Connection(int fd, std::string remote_addr, int remote_port, const ConnectionOptions& options,
             const ConnectionHooks& hooks);
  // Serves requests until the client closes, a timeout, an error, or a
  // response that closes the connection.
  void Serve();

 private:
  enum class Read { kData, kEof, kTimeout, kError };
  // Appends what the socket has to in_, waiting up to timeout_ms for it.
  Read ReadSome(int timeout_ms);
  // Writes all of data, waiting up to write_timeout for each part.
  bool WriteAll(const std::string& data);
  // Reads one request (head and body). False when the connection is to be
  // closed; *error is set when an error response is to be sent first.
  bool ReadRequest(HttpRequest* req, std::optional<ApiError>* error, int64_t* start_ns);
  bool ReadBody(const BodyFraming& framing, std::string* body, std::optional<ApiError>* error);
  // Writes the response; false if the connection must close after it.
  bool WriteResponse(const HttpRequest& req, HttpResponse& res, bool keep_alive);
  // Half-closes and drops what still arrives, briefly, before the close.
  void LingeringClose();
  // For long non-streaming handlers: whether the client has gone.
  bool ClientGone(const HttpRequest& req);

  int fd_;
  std::string remote_addr_;
  int remote_port_;
  ConnectionOptions options_;
  ConnectionHooks hooks_;
  std::string in_;  // received bytes not yet parsed (a pipelined next request)
  bool served_one_ = false;
  bool probe_sent_ = false;
};

}  // namespace kvfork::server
