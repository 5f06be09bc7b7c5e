// The server's HTTP/1.1 transport: a listening socket, an accept thread and a
// fixed pool of worker threads, each serving one connection at a time
// (http_connection.h). Replaces cpp-httplib, whose 0.11 parser has no limit on
// header count or bytes and reads chunked bodies past the body limit
// (docs/server.md, "Transport", has the measurements behind the choice).
//
// Every open connection is registered, so a drain can close the idle ones at
// once and Stop can shut down every socket: a client that trickles bytes or
// stopped reading cannot hold the process past its drain deadline.
//
// Thread safety: StopKeepAlive and Stop may be called from any thread.
#pragma once

#include <atomic>
#include <condition_variable>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "core/status.h"
#include "server/http_connection.h"

namespace kvfork::server {

// Worker threads are OS threads with their own stacks: more than this is a
// configuration error, not a request for more capacity.
inline constexpr int kMaxHttpThreads = 4096;

struct TransportOptions {
  std::string host = "127.0.0.1";
  int port = 0;  // 0 = any free port
  int threads = 64;
  ConnectionOptions connection;
};

class HttpTransport {
 public:
  // Binds host:port and starts accepting. The hooks' handler and log are
  // called on worker threads.
  static StatusOr<std::unique_ptr<HttpTransport>> Start(const TransportOptions& options,
                                                        HttpHandler handler, ResponseLog log);
  ~HttpTransport();  // Stop()
  HttpTransport(const HttpTransport&) = delete;
  HttpTransport& operator=(const HttpTransport&) = delete;

  int port() const { return port_; }
  // Draining: every response from now on closes its connection, and
  // connections waiting idle for their next request are closed now.
  void StopKeepAlive();
  // Stops accepting, waits up to grace_seconds for connections busy with a
  // request to finish it, then shuts down every open connection's socket
  // (blocked reads and writes fail at once) and joins every thread.
  // Idempotent.
  void Stop(double grace_seconds = 0.0);

 private:
  HttpTransport() = default;
  void AcceptLoop();
  void WorkerLoop();
  void SetIdle(int fd, bool idle);

  TransportOptions options_;
  HttpHandler handler_;
  ResponseLog log_;
  int listen_fd_ = -1;
  int wake_fd_ = -1;  // eventfd: wakes the accept loop on Stop
  int port_ = 0;
  std::atomic<bool> closing_{false};
  std::thread acceptor_;
  std::vector<std::thread> workers_;

  std::mutex mu_;
  std::condition_variable cv_;       // the queue has a connection, or stopping_
  std::condition_variable idle_cv_;  // a connection went idle or closed
  bool stopping_ = false;
  struct Pending {
    int fd;
    std::string addr;
    int port;
  };
  std::deque<Pending> queue_;  // accepted, waiting for a worker
  std::map<int, bool> open_;   // fd -> idle, for every connection a worker serves
  std::once_flag stop_once_;
};

}  // namespace kvfork::server
