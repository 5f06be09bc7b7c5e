// The transport on real loopback sockets: pipelining, half-close, a header
// flood, chunked bodies over the limit, disconnect detection, and Stop
// against clients that trickle bytes or stopped reading.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <string>
#include <thread>

#include "core/timer.h"
#include "server/http_transport.h"

namespace kvfork::server {
namespace {

int Connect(int port) {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>(port));
  inet_pton(AF_INET, "127.0.0.1", &a.sin_addr);
  EXPECT_EQ(connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)), 0);
  return fd;
}

void SendAll(int fd, const std::string& s) {
  size_t off = 0;
  while (off < s.size()) {
    const ssize_t n = send(fd, s.data() + off, s.size() - off, MSG_NOSIGNAL);
    if (n <= 0) return;  // the server may close early (a 431): that is the test's to check
    off += static_cast<size_t>(n);
  }
}

// Everything until the server closes (or timeout_ms passes).
std::string ReadAll(int fd, int timeout_ms = 5000) {
  std::string out;
  char buf[65536];
  const int64_t deadline = NowNanos() + int64_t{timeout_ms} * 1000000;
  for (;;) {
    const int left = static_cast<int>((deadline - NowNanos()) / 1000000);
    if (left <= 0) break;
    pollfd p{fd, POLLIN, 0};
    if (poll(&p, 1, left) <= 0) break;
    const ssize_t n = recv(fd, buf, sizeof(buf), 0);
    if (n <= 0) break;
    out.append(buf, static_cast<size_t>(n));
  }
  return out;
}

int Count(const std::string& s, const std::string& what) {
  int n = 0;
  for (size_t at = s.find(what); at != std::string::npos; at = s.find(what, at + 1)) ++n;
  return n;
}

class TransportTest : public ::testing::Test {
 protected:
  void Start(HttpHandler handler, int threads = 4) {
    TransportOptions o;
    o.threads = threads;
    o.connection.limits.max_body_bytes = 1000;
    o.connection.limits.max_head_bytes = 4096;
    o.connection.limits.max_header_fields = 20;
    o.connection.read_timeout_ms = 2000;
    o.connection.write_timeout_ms = 30000;
    o.connection.keep_alive_timeout_ms = 2000;
    auto t = HttpTransport::Start(o, std::move(handler), nullptr);
    ASSERT_TRUE(t.ok()) << t.status().ToString();
    transport_ = std::move(t).value();
  }
  static void Echo(HttpRequest& req, HttpResponse& res) {
    res.content_type = "text/plain";
    res.body = req.method + " " + req.path + " body=" + req.body;
  }
  std::unique_ptr<HttpTransport> transport_;
};

TEST_F(TransportTest, PipelinedRequestsEachGetAResponseInOrder) {
  Start(Echo);
  const int fd = Connect(transport_->port());
  SendAll(fd,
          "POST /a HTTP/1.1\r\nContent-Length: 3\r\n\r\nonePOST /b HTTP/1.1\r\n"
          "Transfer-Encoding: chunked\r\n\r\n3\r\ntwo\r\n0\r\n\r\n"
          "\r\nGET /c HTTP/1.1\r\nConnection: close\r\n\r\n");
  const std::string out = ReadAll(fd);
  close(fd);
  EXPECT_EQ(Count(out, "HTTP/1.1 200 OK"), 3) << out;
  const size_t a = out.find("POST /a body=one"), b = out.find("POST /b body=two"),
               c = out.find("GET /c body=");
  ASSERT_NE(a, std::string::npos) << out;
  ASSERT_NE(b, std::string::npos) << out;
  ASSERT_NE(c, std::string::npos) << out;
  EXPECT_LT(a, b);
  EXPECT_LT(b, c);
  EXPECT_NE(out.find("Connection: close"), std::string::npos);
}

TEST_F(TransportTest, HalfClosedClientGetsItsResponse) {
  Start([](HttpRequest& req, HttpResponse& res) {
    // A slow handler that asks, as a non-streaming generation does, whether
    // the client is gone: a half-close is not a disconnect.
    bool gone = false;
    for (int i = 0; i < 10 && !gone; ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
      gone = req.client_gone();
    }
    res.body = gone ? "gone" : "still here";
  });
  const int fd = Connect(transport_->port());
  SendAll(fd, "POST /x HTTP/1.1\r\nContent-Length: 2\r\n\r\nhi");
  shutdown(fd, SHUT_WR);
  const std::string out = ReadAll(fd);
  close(fd);
  EXPECT_NE(out.find("HTTP/1.1 200 OK"), std::string::npos) << out;
  EXPECT_NE(out.find("still here"), std::string::npos) << out;
}

TEST_F(TransportTest, ClosedClientIsSeenGone) {
  std::atomic<int> saw_gone_ms{-1};
  Start([&saw_gone_ms](HttpRequest& req, HttpResponse& res) {
    const int64_t t0 = NowNanos();
    for (int i = 0; i < 100; ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
      if (req.client_gone()) {
        saw_gone_ms = static_cast<int>((NowNanos() - t0) / 1000000);
        break;
      }
    }
    res.body = "late";
  });
  const int fd = Connect(transport_->port());
  SendAll(fd, "GET /x HTTP/1.1\r\n\r\n");
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  close(fd);
  for (int i = 0; i < 150 && saw_gone_ms < 0; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  EXPECT_GE(saw_gone_ms.load(), 0) << "a closed client was never seen gone";
  EXPECT_LT(saw_gone_ms.load(), 1000);
}

TEST_F(TransportTest, HeaderFloodIs431AndClosed) {
  Start(Echo);
  const int fd = Connect(transport_->port());
  std::thread flood([fd] {
    std::string head = "GET / HTTP/1.1\r\n";
    for (int i = 0; i < 20000; ++i)
      head += "X-Flood-" + std::to_string(i) + ": " + std::string(40, 'a') + "\r\n";
    SendAll(fd, head + "\r\n");
  });
  const std::string out = ReadAll(fd);
  flood.join();
  close(fd);
  EXPECT_EQ(out.rfind("HTTP/1.1 431 ", 0), 0u) << out.substr(0, 200);
  // Too many fields, each small: also 431.
  const int fd2 = Connect(transport_->port());
  std::string head = "GET / HTTP/1.1\r\n";
  for (int i = 0; i < 21; ++i) head += "A" + std::to_string(i) + ": b\r\n";
  SendAll(fd2, head + "\r\n");
  const std::string out2 = ReadAll(fd2);
  close(fd2);
  EXPECT_EQ(out2.rfind("HTTP/1.1 431 ", 0), 0u) << out2.substr(0, 200);
}

TEST_F(TransportTest, ChunkedBodyOverTheLimitIs413) {
  Start(Echo);
  const int fd = Connect(transport_->port());
  std::thread sender([fd] {
    SendAll(fd, "POST /x HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n");
    for (int i = 0; i < 2000; ++i) SendAll(fd, "64\r\n" + std::string(100, 'z') + "\r\n");
    SendAll(fd, "0\r\n\r\n");
  });
  const std::string out = ReadAll(fd);
  sender.join();
  close(fd);
  EXPECT_EQ(out.rfind("HTTP/1.1 413 ", 0), 0u) << out.substr(0, 200);
}

TEST_F(TransportTest, StreamIsChunkedAndEnds) {
  Start([](HttpRequest&, HttpResponse& res) {
    res.content_type = "text/event-stream";
    res.stream = [](const StreamWrite& write) {
      return write("data: 1\n\n") && write("") && write("data: 2\n\n");
    };
  });
  const int fd = Connect(transport_->port());
  SendAll(fd, "GET /s HTTP/1.1\r\nConnection: close\r\n\r\n");
  const std::string out = ReadAll(fd);
  close(fd);
  EXPECT_NE(out.find("Transfer-Encoding: chunked"), std::string::npos) << out;
  EXPECT_NE(out.find("9\r\ndata: 1\n\n\r\n9\r\ndata: 2\n\n\r\n0\r\n\r\n"), std::string::npos)
      << out;
}

TEST_F(TransportTest, StopEndsTricklingAndStalledClientsAtOnce) {
  std::atomic<bool> stream_cut{false};
  Start([&stream_cut](HttpRequest&, HttpResponse& res) {
    res.content_type = "text/plain";
    res.stream = [&stream_cut](const StreamWrite& write) {
      const std::string block(1 << 16, 'x');
      while (write(block)) {
      }
      stream_cut = true;
      return false;
    };
  });
  // A client that reads nothing of an endless stream: the server's write blocks.
  const int stalled = Connect(transport_->port());
  int small = 4096;
  setsockopt(stalled, SOL_SOCKET, SO_RCVBUF, &small, sizeof(small));
  SendAll(stalled, "GET /s HTTP/1.1\r\n\r\n");
  // A client that trickles its head a byte at a time.
  const int trickle = Connect(transport_->port());
  std::atomic<bool> stop_trickle{false};
  std::thread trickler([&] {
    const std::string head = "GET /slow HTTP/1.1\r\nX-A: " + std::string(200, 'a');
    for (char c : head) {
      if (stop_trickle) break;
      SendAll(trickle, std::string(1, c));
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  const int64_t t0 = NowNanos();
  transport_->Stop(/*grace_seconds=*/0.5);
  const double seconds = (NowNanos() - t0) * 1e-9;
  stop_trickle = true;
  trickler.join();
  close(stalled);
  close(trickle);
  EXPECT_LT(seconds, 1.5) << "Stop waited for clients that hold their connections";
  EXPECT_TRUE(stream_cut.load());
}

TEST(HttpTransportOptions, ThreadCountIsBounded) {
  TransportOptions o;
  o.threads = kMaxHttpThreads + 1;
  auto t = HttpTransport::Start(
      o, [](HttpRequest&, HttpResponse&) {}, nullptr);
  ASSERT_FALSE(t.ok());
  EXPECT_NE(t.status().message().find("--http-threads must be in [1, 4096]"), std::string::npos)
      << t.status().ToString();
}

}  // namespace
}  // namespace kvfork::server
