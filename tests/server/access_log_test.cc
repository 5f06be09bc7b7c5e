// The access-log line and request ids.
#include "server/access_log.h"

#include <gtest/gtest.h>

namespace kvfork::server {
namespace {

TEST(AccessLog, OneLineWithEveryField) {
  AccessRecord r;
  r.unix_ms = 1764896523456;  // 2025-12-05T01:02:03.456Z
  r.request_id = "req-1";
  r.remote = "127.0.0.1:5555";
  r.method = "POST";
  r.route = "/v1/completions";
  r.status = 200;
  r.seconds = 0.0123;
  r.extra = TokenFields(5, 2, 16);
  EXPECT_EQ(AccessLogLine(r),
            "access time=2025-12-05T01:02:03.456Z id=req-1 remote=127.0.0.1:5555 method=POST "
            "route=/v1/completions status=200 duration_ms=12.3 prompt_tokens=5 cached_tokens=2 "
            "completion_tokens=16");
}

TEST(AccessLog, FieldsCannotForgeLinesOrFields) {
  AccessRecord r;
  r.request_id = "a b\nc";
  r.method = "";
  const std::string line = AccessLogLine(r);
  EXPECT_EQ(line.find('\n'), std::string::npos);
  EXPECT_NE(line.find("id=a_b_c "), std::string::npos) << line;
  EXPECT_NE(line.find("method=- "), std::string::npos) << line;
}

TEST(RequestId, EchoedWhenSaneElseGenerated) {
  EXPECT_EQ(RequestIdFor("abc-123"), "abc-123");
  const std::string generated = RequestIdFor("");
  EXPECT_EQ(generated.size(), 32u);
  EXPECT_NE(RequestIdFor(""), generated);
  EXPECT_EQ(RequestIdFor("has space").size(), 32u);
  EXPECT_EQ(RequestIdFor(std::string(129, 'x')).size(), 32u);
  EXPECT_EQ(RequestIdFor(std::string(128, 'x')), std::string(128, 'x'));
}

}  // namespace
}  // namespace kvfork::server
