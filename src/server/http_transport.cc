#include "server/http_transport.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstring>

#include "core/logging.h"

namespace kvfork::server {
namespace {

// Connections accepted while every worker is busy wait in a queue; past this
// many the newest are closed at once rather than holding descriptors.
constexpr size_t kMaxQueuedConnections = 4096;

std::string AddrText(const sockaddr_storage& ss, int* port) {
  char buf[INET6_ADDRSTRLEN] = {0};
  if (ss.ss_family == AF_INET) {
    const auto* a = reinterpret_cast<const sockaddr_in*>(&ss);
    inet_ntop(AF_INET, &a->sin_addr, buf, sizeof(buf));
    *port = ntohs(a->sin_port);
  } else if (ss.ss_family == AF_INET6) {
    const auto* a = reinterpret_cast<const sockaddr_in6*>(&ss);
    inet_ntop(AF_INET6, &a->sin6_addr, buf, sizeof(buf));
    *port = ntohs(a->sin6_port);
  }
  return buf;
}

StatusOr<int> Listen(const std::string& host, int port, int* bound_port) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
  addrinfo* res = nullptr;
  const std::string service = std::to_string(port);
  if (getaddrinfo(host.c_str(), service.c_str(), &hints, &res) != 0 || res == nullptr)
    return UnavailableError("cannot bind " + host + ":" + service +
                            " (not an address of this machine)");
  int fd = -1;
  for (addrinfo* ai = res; ai != nullptr; ai = ai->ai_next) {
    fd = socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC, ai->ai_protocol);
    if (fd < 0) continue;
    // SO_REUSEADDR alone (no SO_REUSEPORT): a restart may bind while old
    // connections sit in TIME_WAIT, but a port with a live listener is
    // refused rather than silently shared.
    int yes = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof(yes));
    if (bind(fd, ai->ai_addr, ai->ai_addrlen) == 0 && listen(fd, 1024) == 0) break;
    close(fd);
    fd = -1;
  }
  freeaddrinfo(res);
  if (fd < 0)
    return UnavailableError("cannot bind " + host + ":" + service +
                            " (in use, or not an address of this machine)");
  sockaddr_storage ss{};
  socklen_t len = sizeof(ss);
  getsockname(fd, reinterpret_cast<sockaddr*>(&ss), &len);
  AddrText(ss, bound_port);
  return fd;
}

}  // namespace

StatusOr<std::unique_ptr<HttpTransport>> HttpTransport::Start(const TransportOptions& options,
                                                              HttpHandler handler,
                                                              ResponseLog log) {
  if (options.threads < 1 || options.threads > kMaxHttpThreads)
    return InvalidArgumentError("--http-threads must be in [1, " + std::to_string(kMaxHttpThreads) +
                                "], got " + std::to_string(options.threads));
  std::unique_ptr<HttpTransport> t(new HttpTransport());
  t->options_ = options;
  t->handler_ = std::move(handler);
  t->log_ = std::move(log);
  KVFORK_ASSIGN_OR_RETURN(t->listen_fd_, Listen(options.host, options.port, &t->port_));
  t->wake_fd_ = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  if (t->wake_fd_ < 0) return InternalError("eventfd failed: " + std::string(strerror(errno)));
  t->workers_.reserve(static_cast<size_t>(options.threads));
  for (int i = 0; i < options.threads; ++i) {
    try {
      t->workers_.emplace_back([raw = t.get()] { raw->WorkerLoop(); });
    } catch (const std::system_error& e) {
      return ResourceExhaustedError("cannot start " + std::to_string(options.threads) +
                                    " HTTP threads (--http-threads): " + e.what());
    }
  }
  t->acceptor_ = std::thread([raw = t.get()] { raw->AcceptLoop(); });
  return t;
}

HttpTransport::~HttpTransport() { Stop(0.0); }

void HttpTransport::AcceptLoop() {
  for (;;) {
    pollfd p[2] = {{listen_fd_, POLLIN, 0}, {wake_fd_, POLLIN, 0}};
    if (poll(p, 2, -1) < 0) {
      if (errno == EINTR) continue;
      return;
    }
    if (p[1].revents) return;  // Stop
    sockaddr_storage ss{};
    socklen_t len = sizeof(ss);
    const int fd =
        accept4(listen_fd_, reinterpret_cast<sockaddr*>(&ss), &len, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0) {
      // Out of descriptors (EMFILE): back off instead of spinning.
      if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM)
        poll(nullptr, 0, 50);
      continue;
    }
    int yes = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &yes, sizeof(yes));
    int port = 0;
    std::string addr = AddrText(ss, &port);
    std::lock_guard<std::mutex> lock(mu_);
    if (stopping_ || queue_.size() >= kMaxQueuedConnections) {
      close(fd);
      continue;
    }
    queue_.push_back({fd, std::move(addr), port});
    cv_.notify_one();
  }
}

void HttpTransport::SetIdle(int fd, bool idle) {
  std::lock_guard<std::mutex> lock(mu_);
  open_[fd] = idle;
  // A connection going idle during a drain is closed at once.
  if (idle && closing_.load()) shutdown(fd, SHUT_RDWR);
  if (idle) idle_cv_.notify_all();
}

void HttpTransport::WorkerLoop() {
  ConnectionHooks hooks;
  hooks.handler = handler_;
  hooks.log = log_;
  hooks.closing = &closing_;
  for (;;) {
    Pending next;
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [this] { return stopping_ || !queue_.empty(); });
      if (stopping_) return;
      next = std::move(queue_.front());
      queue_.pop_front();
      open_[next.fd] = false;
    }
    hooks.set_idle = [this, fd = next.fd](bool idle) { SetIdle(fd, idle); };
    Connection(next.fd, next.addr, next.port, options_.connection, hooks).Serve();
    {
      // Unregistered before the close, under the lock Stop shuts sockets
      // down with: a descriptor number reused by the next accept is never
      // shut down by mistake.
      std::lock_guard<std::mutex> lock(mu_);
      open_.erase(next.fd);
      close(next.fd);
      idle_cv_.notify_all();
    }
  }
}

void HttpTransport::StopKeepAlive() {
  closing_.store(true);
  std::lock_guard<std::mutex> lock(mu_);
  for (const auto& [fd, idle] : open_)
    if (idle) shutdown(fd, SHUT_RDWR);
}

void HttpTransport::Stop(double grace_seconds) {
  std::call_once(stop_once_, [this, grace_seconds] {
    StopKeepAlive();
    if (wake_fd_ >= 0) {
      const uint64_t one = 1;
      (void)!write(wake_fd_, &one, sizeof(one));
    }
    if (acceptor_.joinable()) acceptor_.join();
    {
      std::unique_lock<std::mutex> lock(mu_);
      for (const Pending& p : queue_) close(p.fd);
      queue_.clear();
      idle_cv_.wait_for(lock, std::chrono::duration<double>(grace_seconds), [this] {
        for (const auto& [fd, idle] : open_)
          if (!idle) return false;
        return true;
      });
      stopping_ = true;
      for (const auto& [fd, idle] : open_) shutdown(fd, SHUT_RDWR);
    }
    cv_.notify_all();
    for (std::thread& w : workers_)
      if (w.joinable()) w.join();
    if (listen_fd_ >= 0) close(listen_fd_);
    if (wake_fd_ >= 0) close(wake_fd_);
    listen_fd_ = wake_fd_ = -1;
  });
}

}  // namespace kvfork::server
