// HttpServer start and stop without a model: the path `kvfork serve` takes
// when loading fails right after the port is bound. A server destroyed at
// once must stop its listener and workers (with cpp-httplib this hung: its
// stop() was ignored until the accept loop ran), and a port with a live
// listener is refused.
#include <gtest/gtest.h>

#include <memory>

#include "server/http_server.h"

namespace kvfork::server {
namespace {

TEST(HttpServerLifecycle, DestroyRightAfterStartNeverHangs) {
  // Before the fix about one start in a few dozen hung in the destructor.
  for (int i = 0; i < 300; ++i) {
    ServerOptions o;
    o.port = 0;
    o.http_threads = 4;
    auto s = HttpServer::Start(o);
    ASSERT_TRUE(s.ok()) << s.status().ToString();
    ASSERT_GT((*s)->port(), 0);
  }
}

TEST(HttpServerLifecycle, DrainWithoutAttachReturns) {
  ServerOptions o;
  o.port = 0;
  auto s = HttpServer::Start(o);
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  EXPECT_EQ((*s)->Drain(0.1), 0);
}

TEST(HttpServerLifecycle, PortInUseIsRefused) {
  ServerOptions o;
  o.port = 0;
  auto first = HttpServer::Start(o);
  ASSERT_TRUE(first.ok()) << first.status().ToString();
  ServerOptions again;
  again.port = (*first)->port();
  auto second = HttpServer::Start(again);
  ASSERT_FALSE(second.ok()) << "a second server bound port " << again.port;
  EXPECT_NE(second.status().message().find("in use"), std::string::npos)
      << second.status().ToString();
  // Once the first is gone the port can be bound again at once.
  first->reset();
  auto third = HttpServer::Start(again);
  EXPECT_TRUE(third.ok()) << third.status().ToString();
}

TEST(HttpServerLifecycle, BadOptionsNameTheFlag) {
  ServerOptions o;
  o.port = 0;
  o.read_timeout_seconds = 0;
  auto s = HttpServer::Start(o);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.status().message().find("--http-read-timeout"), std::string::npos);
}

}  // namespace
}  // namespace kvfork::server
