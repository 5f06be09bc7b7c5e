// PeerClosed on real loopback connections, IPv4 and IPv6: open while the
// client holds its socket, closed once the client closes it.
#include "server/peer_watch.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <string>
#include <thread>

#include <gtest/gtest.h>

namespace kvfork::server {
namespace {

struct Conn {
  int listener = -1, client = -1, accepted = -1;
  std::string local, remote;  // the server side's view, as httplib reports it
  int local_port = 0, remote_port = 0;
  ~Conn() {
    for (int fd : {listener, client, accepted})
      if (fd >= 0) close(fd);
  }
};

std::string AddrString(const sockaddr_storage& ss, int* port) {
  char buf[INET6_ADDRSTRLEN] = {};
  if (ss.ss_family == AF_INET) {
    const auto* a = reinterpret_cast<const sockaddr_in*>(&ss);
    inet_ntop(AF_INET, &a->sin_addr, buf, sizeof(buf));
    *port = ntohs(a->sin_port);
  } else {
    const auto* a = reinterpret_cast<const sockaddr_in6*>(&ss);
    inet_ntop(AF_INET6, &a->sin6_addr, buf, sizeof(buf));
    *port = ntohs(a->sin6_port);
  }
  return buf;
}

// A loopback connection of the family; false if the family is unavailable.
bool Open(int family, Conn* c) {
  sockaddr_storage ss{};
  socklen_t len;
  if (family == AF_INET) {
    auto* a = reinterpret_cast<sockaddr_in*>(&ss);
    a->sin_family = AF_INET;
    a->sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    len = sizeof(*a);
  } else {
    auto* a = reinterpret_cast<sockaddr_in6*>(&ss);
    a->sin6_family = AF_INET6;
    a->sin6_addr = in6addr_loopback;
    len = sizeof(*a);
  }
  c->listener = socket(family, SOCK_STREAM, 0);
  if (c->listener < 0 || bind(c->listener, reinterpret_cast<sockaddr*>(&ss), len) != 0 ||
      listen(c->listener, 1) != 0 ||
      getsockname(c->listener, reinterpret_cast<sockaddr*>(&ss), &len) != 0)
    return false;
  c->client = socket(family, SOCK_STREAM, 0);
  if (c->client < 0 || connect(c->client, reinterpret_cast<sockaddr*>(&ss), len) != 0) return false;
  c->accepted = accept(c->listener, nullptr, nullptr);
  if (c->accepted < 0) return false;
  sockaddr_storage l{}, r{};
  socklen_t ll = sizeof(l), rl = sizeof(r);
  getsockname(c->accepted, reinterpret_cast<sockaddr*>(&l), &ll);
  getpeername(c->accepted, reinterpret_cast<sockaddr*>(&r), &rl);
  c->local = AddrString(l, &c->local_port);
  c->remote = AddrString(r, &c->remote_port);
  return true;
}

void ExpectOpenThenClosed(int family) {
  Conn c;
  if (!Open(family, &c)) GTEST_SKIP() << "no loopback for address family " << family;
  EXPECT_FALSE(PeerClosed(c.local, c.local_port, c.remote, c.remote_port)) << c.local << " " << c.remote;
  close(c.client);
  c.client = -1;
  bool closed = false;
  for (int i = 0; i < 100 && !closed; ++i) {
    closed = PeerClosed(c.local, c.local_port, c.remote, c.remote_port);
    if (!closed) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  EXPECT_TRUE(closed) << c.local << ":" << c.local_port << " <- " << c.remote << ":" << c.remote_port;
}

TEST(PeerWatch, Ipv4LoopbackOpenThenClosed) { ExpectOpenThenClosed(AF_INET); }
TEST(PeerWatch, Ipv6LoopbackOpenThenClosed) { ExpectOpenThenClosed(AF_INET6); }

TEST(PeerWatch, UnknownOrUnparsableIsNotClosed) {
  EXPECT_FALSE(PeerClosed("not an address", 1, "127.0.0.1", 2));
  EXPECT_FALSE(PeerClosed("127.0.0.1", 1, "127.0.0.1", 2));  // no such connection
}

}  // namespace
}  // namespace kvfork::server
