// Route matching (404 / 405 with Allow / HEAD as GET) and the CORS policy.
#include "server/http_router.h"

#include <gtest/gtest.h>

#include "server/cors.h"

namespace kvfork::server {
namespace {

Router TestRouter() {
  Router r;
  const RouteHandler none = [](const HttpRequest&, HttpResponse&) {};
  r.Add("POST", "/v1/completions", none);
  r.Add("GET", "/health", none);
  r.Add("GET", "/ping", none);
  r.Add("POST", "/ping", none);
  r.AddPrefix("GET", "/v1/models/", none);
  return r;
}

TEST(Router, WrongMethodListsTheAllowedOnes) {
  const Router r = TestRouter();
  const RouteHandler* h = nullptr;
  std::string allow;
  EXPECT_EQ(r.Find("POST", "/v1/completions", &h, &allow), Router::Match::kFound);
  EXPECT_EQ(r.Find("GET", "/v1/completions", &h, &allow), Router::Match::kWrongMethod);
  EXPECT_EQ(allow, "POST");
  EXPECT_EQ(r.Find("POST", "/health", &h, &allow), Router::Match::kWrongMethod);
  EXPECT_EQ(allow, "GET, HEAD");
  EXPECT_EQ(r.Find("HEAD", "/health", &h, &allow), Router::Match::kFound);
  EXPECT_EQ(r.Find("DELETE", "/ping", &h, &allow), Router::Match::kWrongMethod);
  EXPECT_EQ(allow, "GET, HEAD, POST");
  EXPECT_EQ(r.Find("GET", "/nope", &h, &allow), Router::Match::kNoRoute);
}

TEST(Router, PrefixRoutesNeedSomethingAfterThePrefix) {
  const Router r = TestRouter();
  const RouteHandler* h = nullptr;
  std::string allow;
  EXPECT_EQ(r.Find("GET", "/v1/models/x", &h, &allow), Router::Match::kFound);
  EXPECT_EQ(r.Find("GET", "/v1/models/", &h, &allow), Router::Match::kNoRoute);
  EXPECT_EQ(r.Pattern("/v1/models/x/y"), "/v1/models/");
  EXPECT_EQ(r.Pattern("/elsewhere"), "");
}

HttpRequest Preflight(const std::string& origin) {
  HttpRequest req;
  req.method = "OPTIONS";
  req.path = "/v1/chat/completions";
  req.headers = {{"origin", origin}, {"access-control-request-method", "POST"}};
  return req;
}

TEST(Cors, OffByDefaultAndOnlyForListedOrigins) {
  EXPECT_FALSE(CorsPolicy({}).IsPreflight(Preflight("http://a.example")));
  const CorsPolicy cors({"http://a.example"});
  ASSERT_TRUE(cors.IsPreflight(Preflight("http://a.example")));
  HttpResponse ok;
  cors.AnswerPreflight(Preflight("http://a.example"), ok);
  EXPECT_EQ(ok.status, 204);
  ASSERT_NE(ok.FindHeader("access-control-allow-origin"), nullptr);
  EXPECT_EQ(*ok.FindHeader("Access-Control-Allow-Origin"), "http://a.example");
  HttpResponse denied;
  cors.AnswerPreflight(Preflight("http://b.example"), denied);
  EXPECT_EQ(denied.status, 403);
  EXPECT_EQ(denied.FindHeader("Access-Control-Allow-Origin"), nullptr);
  HttpRequest get;
  get.headers = {{"origin", "http://b.example"}};
  HttpResponse plain;
  cors.Apply(get, plain);
  EXPECT_TRUE(plain.headers.empty());
  HttpResponse any;
  CorsPolicy({"*"}).Apply(get, any);
  EXPECT_EQ(*any.FindHeader("Access-Control-Allow-Origin"), "http://b.example");
}

}  // namespace
}  // namespace kvfork::server
