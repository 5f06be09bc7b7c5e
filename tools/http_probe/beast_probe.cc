// The Boost.Beast alternative measured for docs/server.md ("Transport"): the
// smallest Beast HTTP/1.1 server that enforces the same limits (64 KiB of
// head, 16 MiB of body), for its build cost and its memory under the floods
// of tools/http_probe/header_flood.py. Not part of the build:
//   g++ -O2 -std=c++20 tools/http_probe/beast_probe.cc -o /tmp/beast_probe -pthread
//   /tmp/beast_probe PORT
#include <utility>  // Boost 1.74 asio needs std::exchange declared first (C++20)

#include <boost/asio.hpp>
#include <boost/beast.hpp>

#include <cstdio>
#include <thread>

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = asio::ip::tcp;

static void Serve(tcp::socket sock) {
  beast::flat_buffer buf;
  for (;;) {
    http::request_parser<http::string_body> parser;
    parser.header_limit(64 << 10);
    parser.body_limit(16 << 20);
    beast::error_code ec;
    http::read(sock, buf, parser, ec);
    http::response<http::string_body> res;
    res.version(11);
    if (ec == http::error::header_limit) {
      res.result(431);
    } else if (ec == http::error::body_limit) {
      res.result(413);
    } else if (ec) {
      std::fprintf(stderr, "parse error: %s\n", ec.message().c_str());
      res.result(400);
    } else {
      res.result(200);
      res.body() = "ok";
    }
    res.prepare_payload();
    res.keep_alive(!ec && parser.get().keep_alive());
    http::write(sock, res, ec);
    if (ec || !res.keep_alive()) return;
  }
}

int main(int argc, char** argv) {
  asio::io_context io;
  tcp::acceptor acceptor(io, {asio::ip::make_address("127.0.0.1"),
                              static_cast<unsigned short>(argc > 1 ? std::atoi(argv[1]) : 0)});
  std::fprintf(stderr, "listening on http://127.0.0.1:%d\n", acceptor.local_endpoint().port());
  for (;;) std::thread(Serve, acceptor.accept()).detach();
}
