// Parsing of min_tokens and include_stop_str_in_output (both endpoints), and
// the legacy completions logprobs object of an echoed prompt (first null).
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "server/openai_schema.h"
#include "server/response_writer.h"

namespace kvfork::server {
namespace {

using nlohmann::json;

std::optional<ApiError> Parse(Endpoint endpoint, const std::string& fields, ParsedRequest* out) {
  SchemaLimits limits;
  limits.vocab_size = 1000;
  const std::string head = endpoint == Endpoint::kChat
                               ? R"({"messages":[{"role":"user","content":"hi"}])"
                               : R"({"prompt":"hi")";
  return ParseRequestBody(endpoint, head + fields + "}", limits, out);
}

TEST(GenerationSchema, MinTokensAndIncludeStopStrOnBothEndpoints) {
  for (Endpoint e : {Endpoint::kChat, Endpoint::kCompletion}) {
    ParsedRequest p;
    auto err = Parse(e, R"(,"max_tokens":8,"min_tokens":8,"include_stop_str_in_output":true)", &p);
    ASSERT_FALSE(err) << err->ToJson();
    EXPECT_EQ(p.sampling.min_tokens, 8);
    EXPECT_TRUE(p.sampling.include_stop_str_in_output);
    err = Parse(e, "", &p);
    ASSERT_FALSE(err);
    EXPECT_EQ(p.sampling.min_tokens, 0);
    EXPECT_FALSE(p.sampling.include_stop_str_in_output);
    // Without max_tokens the server's default caps it later, not here.
    err = Parse(e, R"(,"min_tokens":100000)", &p);
    ASSERT_FALSE(err) << err->ToJson();
  }
}

TEST(GenerationSchema, BadValuesNameTheField) {
  const std::pair<const char*, const char*> cases[] = {
      {R"(,"max_tokens":2,"min_tokens":3)", "min_tokens"},
      {R"(,"min_tokens":-1)", "min_tokens"},
      {R"(,"min_tokens":1.5)", "min_tokens"},
      {R"(,"include_stop_str_in_output":"yes")", "include_stop_str_in_output"},
  };
  for (const auto& [fields, param] : cases) {
    ParsedRequest p;
    auto err = Parse(Endpoint::kCompletion, fields, &p);
    ASSERT_TRUE(err) << fields;
    EXPECT_EQ(err->http_status, 400) << fields;
    EXPECT_EQ(err->param, param) << fields;
  }
}

TEST(GenerationSchema, EchoedPromptsFirstTokenHasNullLogprobs) {
  LogprobEntry first;
  first.chosen = {"The", 0.0f};
  first.no_logprob = true;
  LogprobEntry second;
  second.chosen = {" cat", -1.5f};
  second.top = {{" dog", -0.5f}, {" cat", -1.5f}};
  const json j = CompletionLogprobsJson({first, second}, 0);
  EXPECT_EQ(j["tokens"], json({"The", " cat"}));
  EXPECT_TRUE(j["token_logprobs"][0].is_null());
  EXPECT_TRUE(j["top_logprobs"][0].is_null());
  EXPECT_EQ(j["token_logprobs"][1], -1.5);
  EXPECT_EQ(j["top_logprobs"][1], json({{" dog", -0.5}, {" cat", -1.5}}));
  EXPECT_EQ(j["text_offset"], json({0, 3}));
}

}  // namespace
}  // namespace kvfork::server
