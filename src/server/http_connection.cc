#include "server/http_connection.h"

#include <errno.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>

#include "core/timer.h"

namespace kvfork::server {
namespace {

constexpr size_t kReadBytes = 64 << 10;  // one recv; bounds what is read past a limit
// How long a closing connection keeps reading (and dropping) what the client
// still sends, so that its reset does not destroy the last response: at most
// kLingerMs in all, and it stops after kLingerIdleMs without a byte (nginx's
// lingering_time and lingering_timeout, shorter).
constexpr int kLingerMs = 5000;
constexpr int kLingerIdleMs = 1000;
// Input buffer capacity a kept-alive connection may keep between requests.
constexpr size_t kKeepBufferBytes = 256 << 10;

int RemainingMs(int64_t deadline_ns) {
  const int64_t left = (deadline_ns - NowNanos()) / 1000000;
  return static_cast<int>(std::max<int64_t>(0, left));
}

std::string StatusLine(int status) {
  return "HTTP/1.1 " + std::to_string(status) + " " + HttpReason(status) + "\r\n";
}

void FillError(const ApiError& err, HttpResponse* res) {
  res->status = err.http_status;
  res->content_type = "application/json";
  res->body = err.ToJson();
  res->stream = nullptr;
}

}  // namespace

Connection::Connection(int fd, std::string remote_addr, int remote_port,
                       const ConnectionOptions& options, const ConnectionHooks& hooks)
    : fd_(fd),
      remote_addr_(std::move(remote_addr)),
      remote_port_(remote_port),
      options_(options),
      hooks_(hooks) {}

Connection::Read Connection::ReadSome(int timeout_ms) {
  for (;;) {
    pollfd p{fd_, POLLIN, 0};
    const int n = poll(&p, 1, timeout_ms);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return Read::kError;
    if (n == 0) return Read::kTimeout;
    const size_t old = in_.size();
    in_.resize(old + kReadBytes);
    const ssize_t got = recv(fd_, in_.data() + old, kReadBytes, 0);
    in_.resize(old + static_cast<size_t>(std::max<ssize_t>(0, got)));
    if (got > 0) return Read::kData;
    if (got == 0) return Read::kEof;
    if (errno == EINTR || errno == EAGAIN || errno == EWOULDBLOCK) continue;
    return Read::kError;
  }
}

bool Connection::WriteAll(const std::string& data) {
  size_t sent = 0;
  while (sent < data.size()) {
    const ssize_t n = send(fd_, data.data() + sent, data.size() - sent, MSG_NOSIGNAL);
    if (n > 0) {
      sent += static_cast<size_t>(n);
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      // The client is not reading: wait for room, at most the write timeout.
      pollfd p{fd_, POLLOUT, 0};
      const int r = poll(&p, 1, options_.write_timeout_ms);
      if (r < 0 && errno == EINTR) continue;
      if (r <= 0 || (p.revents & (POLLERR | POLLHUP | POLLNVAL))) return false;
      continue;
    }
    return false;
  }
  return true;
}

bool Connection::ReadRequest(HttpRequest* req, std::optional<ApiError>* error, int64_t* start_ns) {
  const HttpLimits& limits = options_.limits;
  // Idle until the first byte of the next request (unless it is already here).
  if (in_.empty()) {
    if (hooks_.set_idle) hooks_.set_idle(true);
    const Read r =
        ReadSome(served_one_ ? options_.keep_alive_timeout_ms : options_.read_timeout_ms);
    if (hooks_.set_idle) hooks_.set_idle(false);
    if (r != Read::kData) return false;  // closed, idle too long, or shut down
  }
  *start_ns = NowNanos();
  const int64_t head_deadline = *start_ns + int64_t{options_.read_timeout_ms} * 1000000;
  size_t head_end = 0;
  for (;;) {
    // Empty lines before a request line are skipped (RFC 9112 2.2): some
    // clients send a CRLF after a body.
    while (in_.compare(0, 2, "\r\n") == 0) in_.erase(0, 2);
    if ((head_end = FindHeadEnd(in_, limits)) != 0) break;
    if (static_cast<int64_t>(in_.size()) > limits.max_head_bytes + 4) {
      *error = ApiError{431,
                        "request header fields are larger than the server's limit (" +
                            std::to_string(limits.max_head_bytes) + " bytes)",
                        "invalid_request_error", "", "header_fields_too_large"};
      return false;
    }
    const Read r = ReadSome(RemainingMs(head_deadline));
    if (r == Read::kTimeout)
      *error = BadRequest(
          "the request head did not arrive within the read timeout "
          "(--http-read-timeout)");
    if (r != Read::kData) return false;
  }
  if (auto err = ParseRequestHead(std::string_view(in_).substr(0, head_end), limits, req)) {
    *error = std::move(err);
    return false;
  }
  in_.erase(0, head_end);
  BodyFraming framing;
  if (auto err = ParseBodyFraming(*req, limits, &framing)) {
    *error = std::move(err);
    return false;
  }
  if (framing.kind != BodyFraming::Kind::kNone && req->version_minor == 1) {
    const std::string& expect = req->Header("expect");
    if (!expect.empty() && !WriteAll("HTTP/1.1 100 Continue\r\n\r\n")) return false;
  }
  return ReadBody(framing, &req->body, error);
}

bool Connection::ReadBody(const BodyFraming& framing, std::string* body,
                          std::optional<ApiError>* error) {
  body->clear();
  const auto timed_out = [error](Read r) {
    if (r == Read::kTimeout)
      *error = BadRequest(
          "the request body did not arrive within the read timeout "
          "(--http-read-timeout)");
  };
  if (framing.kind == BodyFraming::Kind::kLength) {
    const size_t length = static_cast<size_t>(framing.length);
    while (in_.size() < length) {
      const Read r = ReadSome(options_.read_timeout_ms);
      timed_out(r);
      if (r != Read::kData) return false;
    }
    if (in_.size() == length) {
      body->swap(in_);  // the usual case: no pipelined bytes behind it, no copy
      in_.clear();
    } else {
      body->assign(in_, 0, length);
      in_.erase(0, length);
    }
    return true;
  }
  if (framing.kind == BodyFraming::Kind::kChunked) {
    ChunkedDecoder decoder(options_.limits);
    for (;;) {
      size_t used = 0;
      const ChunkedDecoder::State s = decoder.Feed(in_, body, &used);
      // What was decoded is dropped from the input at once: at most the body
      // limit plus one read is ever held.
      in_.erase(0, used);
      if (s == ChunkedDecoder::State::kDone) return true;
      if (s == ChunkedDecoder::State::kError) {
        *error = decoder.error();
        body->clear();
        body->shrink_to_fit();
        return false;
      }
      const Read r = ReadSome(options_.read_timeout_ms);
      timed_out(r);
      if (r != Read::kData) return false;
    }
  }
  return true;
}

bool Connection::ClientGone(const HttpRequest& req) {
  pollfd p{fd_, POLLRDHUP, 0};
  if (poll(&p, 1, 0) <= 0) return false;
  if (p.revents & (POLLERR | POLLHUP | POLLNVAL)) return true;  // reset, or shut both ways
  if ((p.revents & POLLRDHUP) && !probe_sent_ && req.version_minor == 1) {
    // The client sent FIN: it either closed the socket or only shut down its
    // sending side (a half-close) and still waits for the answer. TCP cannot
    // tell the two apart until something is sent: an interim 100 response
    // (which every HTTP/1.1 client must accept and skip, RFC 9110 15.2) makes
    // a closed client's kernel answer with a reset, seen by the next call.
    probe_sent_ = true;
    if (!WriteAll("HTTP/1.1 100 Continue\r\n\r\n")) return true;
  }
  return false;
}

bool Connection::WriteResponse(const HttpRequest& req, HttpResponse& res, bool keep_alive) {
  const bool head_only = req.method == "HEAD";
  const bool chunked = res.stream != nullptr && req.version_minor == 1;
  if (res.stream != nullptr && !chunked) keep_alive = false;  // HTTP/1.0: the close ends it
  std::string head = StatusLine(res.status);
  if (!res.content_type.empty()) head += "Content-Type: " + res.content_type + "\r\n";
  for (const auto& [name, value] : res.headers) head += name + ": " + value + "\r\n";
  if (chunked) {
    head += "Transfer-Encoding: chunked\r\n";
  } else if (res.stream == nullptr) {
    head += "Content-Length: " + std::to_string(res.body.size()) + "\r\n";
  }
  if (!keep_alive) {
    head += "Connection: close\r\n";
  } else {
    if (req.version_minor == 0) head += "Connection: keep-alive\r\n";
    head += "Keep-Alive: timeout=" + std::to_string(options_.keep_alive_timeout_ms / 1000) + "\r\n";
  }
  head += "\r\n";
  if (res.stream == nullptr || head_only) {
    if (!head_only) head += res.body;
    return WriteAll(head) && keep_alive;
  }
  if (!WriteAll(head)) return false;
  const bool ended = res.stream([this, chunked](const std::string& data) {
    if (data.empty()) return true;  // an empty chunk would end the body
    if (!chunked) return WriteAll(data);
    char size[32];
    std::snprintf(size, sizeof(size), "%zx\r\n", data.size());
    return WriteAll(size + data + "\r\n");
  });
  if (!ended) return false;
  if (chunked && !WriteAll("0\r\n\r\n")) return false;
  return keep_alive;
}

void Connection::LingeringClose() {
  // Closing a socket with unread input makes the kernel send a reset, which
  // can destroy the response before the client reads it (a 413 sent while
  // the client still uploads). Stop sending, then read and drop what comes
  // for a short while.
  shutdown(fd_, SHUT_WR);
  const int64_t deadline = NowNanos() + int64_t{kLingerMs} * 1000000;
  for (;;) {
    in_.clear();
    const int wait_ms = std::min(kLingerIdleMs, RemainingMs(deadline));
    if (wait_ms <= 0 || ReadSome(wait_ms) != Read::kData) return;
  }
}

void Connection::Serve() {
  for (;;) {
    HttpRequest req;
    req.remote_addr = remote_addr_;
    req.remote_port = remote_port_;
    std::optional<ApiError> error;
    int64_t start_ns = NowNanos();
    const bool ok = ReadRequest(&req, &error, &start_ns);
    if (!ok) {
      if (error) {
        // The stream cannot be resynchronised after a framing error: answer
        // and close.
        HttpResponse res;
        FillError(*error, &res);
        WriteResponse(req, res, /*keep_alive=*/false);
        if (hooks_.log) hooks_.log(req, res, (NowNanos() - start_ns) * 1e-9);
        LingeringClose();
      }
      return;
    }
    served_one_ = true;
    probe_sent_ = false;
    req.client_gone = [this, &req] { return ClientGone(req); };
    HttpResponse res;
    hooks_.handler(req, res);
    const bool closing = hooks_.closing != nullptr && hooks_.closing->load();
    const bool keep = WriteResponse(req, res, WantsKeepAlive(req) && !closing);
    if (hooks_.log) hooks_.log(req, res, (NowNanos() - start_ns) * 1e-9);
    if (!keep) {
      if (res.stream == nullptr) LingeringClose();
      return;
    }
    // A kept-alive connection does not keep the buffer of a large body.
    if (in_.capacity() > kKeepBufferBytes) in_.shrink_to_fit();
  }
}

}  // namespace kvfork::server
