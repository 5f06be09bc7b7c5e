// The strict HTTP/1.1 request parser: limits (431, 413), framing that could
// smuggle a request behind a proxy (400), and the chunked decoder fed in
// every possible split.
#include "server/http_parser.h"

#include <gtest/gtest.h>

#include <string>

namespace kvfork::server {
namespace {

std::optional<ApiError> Parse(const std::string& head, HttpRequest* req,
                              const HttpLimits& limits = HttpLimits{}) {
  return ParseRequestHead(head, limits, req);
}

int StatusOf(const std::string& head, const HttpLimits& limits = HttpLimits{}) {
  HttpRequest req;
  if (auto err = Parse(head, &req, limits)) return err->http_status;
  BodyFraming framing;
  if (auto err = ParseBodyFraming(req, limits, &framing)) return err->http_status;
  return 200;
}

TEST(HttpParser, ParsesRequestLineHeadersAndQuery) {
  HttpRequest req;
  auto err = Parse(
      "GET /v1/models/a%2Fb?check=1&x=a+b%21 HTTP/1.1\r\nHost: x\r\n"
      "X-Request-Id:  abc \r\n\r\n",
      &req);
  ASSERT_FALSE(err) << err->message;
  EXPECT_EQ(req.method, "GET");
  EXPECT_EQ(req.path, "/v1/models/a/b");
  EXPECT_EQ(req.Param("check"), "1");
  EXPECT_EQ(req.Param("x"), "a b!");
  EXPECT_EQ(req.version_minor, 1);
  EXPECT_EQ(req.Header("x-request-id"), "abc");
  EXPECT_EQ(req.Header("X-REQUEST-ID"), "abc");
  EXPECT_TRUE(WantsKeepAlive(req));
}

TEST(HttpParser, KeepAliveFollowsVersionAndConnection) {
  HttpRequest req;
  ASSERT_FALSE(Parse("GET / HTTP/1.1\r\nConnection: Close\r\n\r\n", &req));
  EXPECT_FALSE(WantsKeepAlive(req));
  ASSERT_FALSE(Parse("GET / HTTP/1.0\r\n\r\n", &req));
  EXPECT_FALSE(WantsKeepAlive(req));
  ASSERT_FALSE(Parse("GET / HTTP/1.0\r\nConnection: keep-alive\r\n\r\n", &req));
  EXPECT_TRUE(WantsKeepAlive(req));
}

TEST(HttpParser, MalformedHeadsAre400) {
  EXPECT_EQ(StatusOf("GET / HTTP/1.1\r\nA: b\nC: d\r\n\r\n"), 400);  // bare LF
  EXPECT_EQ(StatusOf("GET / HTTP/1.1\r\nA: b\rC: d\r\n\r\n"), 400);  // bare CR
  EXPECT_EQ(StatusOf("GET / HTTP/1.1\r\nA: b\r\n c\r\n\r\n"), 400);  // obs-fold
  EXPECT_EQ(StatusOf("GET / HTTP/1.1\r\nA : b\r\n\r\n"), 400);       // space before ':'
  EXPECT_EQ(StatusOf("GET / HTTP/1.1\r\nNoColon\r\n\r\n"), 400);
  EXPECT_EQ(StatusOf(std::string("GET / HTTP/1.1\r\nA: b\0c\r\n\r\n", 26)), 400);  // NUL
  EXPECT_EQ(StatusOf("GET  / HTTP/1.1\r\n\r\n"), 400);
  EXPECT_EQ(StatusOf("GET noslash HTTP/1.1\r\n\r\n"), 400);
  EXPECT_EQ(StatusOf("GET /%zz HTTP/1.1\r\n\r\n"), 400);
  EXPECT_EQ(StatusOf("GET /a%00b HTTP/1.1\r\n\r\n"), 400);
  EXPECT_EQ(StatusOf("GET / HTTP/2.0\r\n\r\n"), 505);
  EXPECT_EQ(StatusOf("GET / FTP/1.1\r\n\r\n"), 400);
}

TEST(HttpParser, HeaderCountAndBytesAre431) {
  HttpLimits limits;
  limits.max_header_fields = 10;
  limits.max_head_bytes = 1024;
  std::string head = "GET / HTTP/1.1\r\n";
  for (int i = 0; i < 10; ++i) head += "H" + std::to_string(i) + ": v\r\n";
  EXPECT_EQ(StatusOf(head + "\r\n", limits), 200);
  EXPECT_EQ(StatusOf(head + "H10: v\r\n\r\n", limits), 431);
  // Bytes: the end of the head is only looked for within the limit.
  const std::string big = "GET / HTTP/1.1\r\nA: " + std::string(2000, 'x') + "\r\n\r\n";
  EXPECT_EQ(FindHeadEnd(big, limits), 0u);
  EXPECT_EQ(StatusOf(big, limits), 431);
  // One line: 8 KiB by default.
  const std::string line(9000, 'q');
  EXPECT_EQ(StatusOf("GET /?" + line + " HTTP/1.1\r\n\r\n"), 414);
  EXPECT_EQ(StatusOf("GET / HTTP/1.1\r\nA: " + line + "\r\n\r\n"), 431);
  const std::string ok = "GET / HTTP/1.1\r\nA: b\r\n\r\nnext";
  EXPECT_EQ(FindHeadEnd(ok, limits), ok.size() - 4);
}

TEST(HttpParser, SmugglingFramingIs400) {
  const std::string post = "POST /v1/completions HTTP/1.1\r\nHost: x\r\n";
  EXPECT_EQ(StatusOf(post + "Content-Length: 5\r\n\r\n"), 200);
  EXPECT_EQ(StatusOf(post + "Content-Length: 5\r\nContent-Length: 5\r\n\r\n"), 400);
  EXPECT_EQ(StatusOf(post + "Content-Length: 5\r\nContent-Length: 6\r\n\r\n"), 400);
  EXPECT_EQ(StatusOf(post + "Content-Length: 5, 5\r\n\r\n"), 400);
  EXPECT_EQ(StatusOf(post + "Content-Length: +5\r\n\r\n"), 400);
  EXPECT_EQ(StatusOf(post + "Content-Length: 0x5\r\n\r\n"), 400);
  EXPECT_EQ(StatusOf(post + "Content-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n"), 400);
  EXPECT_EQ(StatusOf(post + "Transfer-Encoding: chunked\r\nContent-Length: 5\r\n\r\n"), 400);
  EXPECT_EQ(StatusOf(post + "Transfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n\r\n"),
            400);
  EXPECT_EQ(StatusOf(post + "Transfer-Encoding: gzip, chunked\r\n\r\n"), 501);
  EXPECT_EQ(StatusOf("POST / HTTP/1.0\r\nTransfer-Encoding: chunked\r\n\r\n"), 400);
  HttpLimits limits;
  limits.max_body_bytes = 100;
  EXPECT_EQ(StatusOf(post + "Content-Length: 100\r\n\r\n", limits), 200);
  EXPECT_EQ(StatusOf(post + "Content-Length: 101\r\n\r\n", limits), 413);
  EXPECT_EQ(StatusOf(post + "Content-Length: 99999999999999999999\r\n\r\n", limits), 400);
}

// Feeds input split at `split` (and in one piece when split is 0).
ChunkedDecoder::State Decode(const std::string& in, size_t split, const HttpLimits& limits,
                             std::string* body, size_t* used_total, int* status) {
  ChunkedDecoder d(limits);
  body->clear();
  *used_total = 0;
  std::vector<std::string> parts;
  if (split == 0 || split >= in.size()) {
    parts = {in};
  } else {
    parts = {in.substr(0, split), in.substr(split)};
  }
  std::string pending;
  ChunkedDecoder::State s = ChunkedDecoder::State::kNeedMore;
  for (const std::string& p : parts) {
    pending += p;
    size_t used = 0;
    s = d.Feed(pending, body, &used);
    pending.erase(0, used);
    *used_total += used;
    if (s != ChunkedDecoder::State::kNeedMore) break;
  }
  *status = s == ChunkedDecoder::State::kError ? d.error().http_status : 0;
  return s;
}

TEST(ChunkedDecoder, EverySplitGivesTheSameBodyAndStopsAtTheEnd) {
  const std::string in =
      "5\r\nhello\r\n1;ext=1\r\n \r\nA\r\n0123456789\r\n0\r\nX-Trailer: t\r\n\r\nGET /next";
  const size_t end = in.size() - std::string("GET /next").size();
  for (size_t split = 0; split < in.size(); ++split) {
    std::string body;
    size_t used = 0;
    int status = 0;
    EXPECT_EQ(Decode(in, split, HttpLimits{}, &body, &used, &status), ChunkedDecoder::State::kDone)
        << "split " << split;
    EXPECT_EQ(body, "hello 0123456789") << "split " << split;
    EXPECT_EQ(used, end) << "the next request's bytes are not consumed; split " << split;
  }
}

TEST(ChunkedDecoder, BodyLimitIsA413BeforeTheDataIsKept) {
  HttpLimits limits;
  limits.max_body_bytes = 10;
  std::string body;
  size_t used = 0;
  int status = 0;
  EXPECT_EQ(Decode("5\r\nhello\r\n5\r\nworld\r\n0\r\n\r\n", 0, limits, &body, &used, &status),
            ChunkedDecoder::State::kDone);
  // 6 more bytes would pass 10: refused at the size line, before its data.
  EXPECT_EQ(Decode("5\r\nhello\r\n6\r\nworld!\r\n0\r\n\r\n", 0, limits, &body, &used, &status),
            ChunkedDecoder::State::kError);
  EXPECT_EQ(status, 413);
  EXPECT_EQ(body, "hello");
  // A huge declared chunk is refused at once.
  EXPECT_EQ(Decode("fffffffffffffff\r\n", 0, limits, &body, &used, &status),
            ChunkedDecoder::State::kError);
  EXPECT_EQ(status, 413);
}

TEST(ChunkedDecoder, MalformedChunksAre400) {
  for (const std::string& in : std::vector<std::string>{
           "x\r\n", "5\r\nhelloXX", "5\nhello\r\n", "\r\n", "-1\r\n", "ffffffffffffffff1\r\n",
           "0\r\nBad Trailer\r\n\r\n", std::string(2000, '1')}) {
    std::string body;
    size_t used = 0;
    int status = 0;
    EXPECT_EQ(Decode(in, 0, HttpLimits{}, &body, &used, &status), ChunkedDecoder::State::kError)
        << in.substr(0, 40);
    EXPECT_EQ(status, 400) << in.substr(0, 40);
  }
}

}  // namespace
}  // namespace kvfork::server
