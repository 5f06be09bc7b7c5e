#include "engine/request_validation.h"

#include <gtest/gtest.h>

#include <functional>
#include <string>

namespace kvfork {
namespace {

RequestLimits Limits() {
  RequestLimits l;
  l.vocab_size = 1000;
  l.max_context = 128;
  l.max_pool_tokens = 256;
  return l;
}

Request Good() {
  Request r;
  r.id = "r1";
  r.prompt_tokens = {1, 2, 3};
  r.sampling.max_tokens = 10;
  return r;
}

void ExpectError(const std::function<void(Request&)>& edit, const std::string& param,
                 StatusCode code = StatusCode::kInvalidArgument) {
  Request r = Good();
  edit(r);
  Status s = ValidateRequest(r, Limits());
  EXPECT_EQ(s.code(), code) << s.ToString();
  EXPECT_NE(s.message().find(param), std::string::npos) << s.message();
}

TEST(RequestValidation, GoodRequestPasses) {
  EXPECT_TRUE(ValidateRequest(Good(), Limits()).ok());
  Request r = Good();
  r.sampling.max_tokens = 0;
  EXPECT_TRUE(ValidateRequest(r, Limits()).ok());
  r.sampling.top_p = 1.0;
  r.sampling.max_tokens = 125;  // 3 + 125 = 128 fits exactly
  EXPECT_TRUE(ValidateRequest(r, Limits()).ok());
}

TEST(RequestValidation, EachBadParameterIsNamed) {
  ExpectError([](Request& r) { r.prompt_tokens.clear(); }, "prompt");
  ExpectError([](Request& r) { r.prompt_tokens[1] = 1000; }, "prompt token 1");
  ExpectError([](Request& r) { r.prompt_tokens[0] = -1; }, "prompt token 0");
  ExpectError([](Request& r) { r.sampling.max_tokens = -1; }, "max_tokens");
  ExpectError([](Request& r) { r.sampling.top_p = 0.0; }, "top_p");
  ExpectError([](Request& r) { r.sampling.top_p = 1.5; }, "top_p must be in (0, 1], got 1.5");
  ExpectError([](Request& r) { r.sampling.temperature = -0.1; }, "temperature");
  ExpectError([](Request& r) { r.sampling.top_k = -2; }, "top_k");
  ExpectError([](Request& r) { r.sampling.min_p = 1.2; }, "min_p");
  ExpectError([](Request& r) { r.sampling.repetition_penalty = 0; }, "repetition_penalty");
  ExpectError([](Request& r) { r.sampling.presence_penalty = 3; }, "presence_penalty");
  ExpectError([](Request& r) { r.sampling.frequency_penalty = -3; }, "frequency_penalty");
  ExpectError([](Request& r) { r.sampling.logit_bias[5000] = 1; }, "logit_bias");
  ExpectError([](Request& r) { r.sampling.logit_bias[5] = 200; }, "logit_bias");
  ExpectError([](Request& r) { r.sampling.n = 0; }, "n must be");
  ExpectError([](Request& r) { r.sampling.n = 17; }, "n must be");
  ExpectError([](Request& r) { r.sampling.top_logprobs = 21; }, "top_logprobs");
  ExpectError([](Request& r) { r.sampling.stop = {"a", ""}; }, "stop string 1");
  ExpectError([](Request& r) { r.sampling.stop_token_ids = {4, 1000}; }, "stop_token_ids");
}

// Engine-thread work per token is bounded whoever builds the request.
TEST(RequestValidation, PerTokenCostsAreBounded) {
  RequestLimits l = Limits();
  l.vocab_size = 5000;  // room for 1,024 distinct logit_bias ids
  Request r = Good();
  r.sampling.stop = {"a", std::string(static_cast<size_t>(l.max_stop_bytes), 'x')};
  for (int i = 0; i < l.max_logit_bias; ++i) r.sampling.logit_bias[i] = 1;
  r.sampling.stop_token_ids.assign(static_cast<size_t>(l.max_stop_token_ids), 7);
  EXPECT_TRUE(ValidateRequest(r, l).ok()) << ValidateRequest(r, l).ToString();
  ExpectError(
      [](Request& r) {
        r.sampling.stop = {"a", std::string(100000, 'x')};
      },
      "stop string 1 is 100000 bytes, at most 256");
  ExpectError(
      [](Request& r) {
        for (int i = 0; i < 1025; ++i) r.sampling.logit_bias[i] = 1;
      },
      "logit_bias has 1025 entries, at most 1024");
  ExpectError([](Request& r) { r.sampling.stop_token_ids.assign(129, 7); },
              "stop_token_ids has 129 ids, at most 128");
}

TEST(RequestValidation, TooLongIsOutOfRange) {
  ExpectError([](Request& r) { r.sampling.max_tokens = 126; }, "context length 128",
              StatusCode::kOutOfRange);
  RequestLimits l = Limits();
  l.max_context = 10000;
  Request r = Good();
  r.sampling.max_tokens = 300;
  Status s = ValidateRequest(r, l);
  EXPECT_EQ(s.code(), StatusCode::kOutOfRange);
  EXPECT_NE(s.message().find("KV pool"), std::string::npos) << s.message();
}

}  // namespace
}  // namespace kvfork
