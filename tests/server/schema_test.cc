// OpenAI request parsing: types, ranges, defaults, and that every error names
// its field and has OpenAI's shape.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "server/openai_schema.h"

namespace kvfork::server {
namespace {

using nlohmann::json;

SchemaLimits Limits() {
  SchemaLimits l;
  l.vocab_size = 1000;
  return l;
}

std::optional<ApiError> Chat(const std::string& body, ParsedRequest* out) {
  return ParseRequestBody(Endpoint::kChat, body, Limits(), out);
}
std::optional<ApiError> Completion(const std::string& body, ParsedRequest* out) {
  return ParseRequestBody(Endpoint::kCompletion, body, Limits(), out);
}

const char* kMsg = R"("messages":[{"role":"user","content":"hi"}])";

TEST(SchemaTest, ChatFieldsParsed) {
  ParsedRequest p;
  auto err = Chat(std::string("{") + kMsg +
                      R"(,"model":"m","max_tokens":7,"temperature":0.5,"top_p":0.9,"top_k":-1,
      "min_p":0.1,"n":3,"stop":["a","b"],"seed":42,"presence_penalty":1,"frequency_penalty":-1,
      "repetition_penalty":1.1,"logit_bias":{"5":-100,"7":2.5},"logprobs":true,"top_logprobs":3,
      "user":"u","cache_salt":"s","stream":true,"stream_options":{"include_usage":true},
      "ignore_eos":true,"chat_template_kwargs":{"enable_thinking":false},"unknown_field":[1,2]})",
                  &p);
  ASSERT_FALSE(err) << err->ToJson();
  EXPECT_EQ(p.model, "m");
  EXPECT_TRUE(p.max_tokens_given);
  EXPECT_EQ(p.sampling.max_tokens, 7);
  EXPECT_DOUBLE_EQ(p.sampling.temperature, 0.5);
  EXPECT_EQ(p.sampling.top_k, 0);
  EXPECT_EQ(p.sampling.n, 3);
  EXPECT_EQ(p.sampling.stop, (std::vector<std::string>{"a", "b"}));
  ASSERT_TRUE(p.sampling.seed.has_value());
  EXPECT_EQ(*p.sampling.seed, 42u);
  EXPECT_FLOAT_EQ(p.sampling.logit_bias.at(5), -100.0f);
  EXPECT_FLOAT_EQ(p.sampling.logit_bias.at(7), 2.5f);
  EXPECT_EQ(p.sampling.top_logprobs, 3);
  EXPECT_TRUE(p.sampling.ignore_eos);
  EXPECT_TRUE(p.stream);
  EXPECT_TRUE(p.include_usage);
  EXPECT_EQ(p.cache_salt, "s");
  EXPECT_EQ(p.chat.chat_template_kwargs["enable_thinking"], false);
  ASSERT_EQ(p.chat.messages.size(), 1u);
  EXPECT_EQ(p.chat.messages[0]["content"], "hi");
}

TEST(SchemaTest, DefaultsWhenAbsentOrNull) {
  ParsedRequest p;
  ASSERT_FALSE(Chat(std::string("{") + kMsg + R"(,"temperature":null,"stop":null})", &p));
  EXPECT_FALSE(p.max_tokens_given);
  EXPECT_DOUBLE_EQ(p.sampling.temperature, 1.0);
  EXPECT_EQ(p.sampling.n, 1);
  EXPECT_EQ(p.sampling.top_logprobs, -1);
  EXPECT_FALSE(p.stream);
  EXPECT_TRUE(p.sampling.stop.empty());
}

TEST(SchemaTest, MaxCompletionTokensWins) {
  ParsedRequest p;
  ASSERT_FALSE(Chat(std::string("{") + kMsg + R"(,"max_tokens":3,"max_completion_tokens":9})", &p));
  EXPECT_EQ(p.sampling.max_tokens, 9);
}

TEST(SchemaTest, ContentPartsJoinedAndDeveloperIsSystem) {
  ParsedRequest p;
  ASSERT_FALSE(Chat(R"({"messages":[{"role":"developer","content":"be brief"},
      {"role":"user","content":[{"type":"text","text":"a"},{"type":"text","text":"b"}]}]})",
                    &p));
  EXPECT_EQ(p.chat.messages[0]["role"], "system");
  EXPECT_EQ(p.chat.messages[1]["content"], "ab");
}

TEST(SchemaTest, CompletionPromptForms) {
  ParsedRequest p;
  ASSERT_FALSE(Completion(R"({"prompt":"hello","logprobs":2,"echo":true})", &p));
  ASSERT_EQ(p.prompts.size(), 1u);
  EXPECT_EQ(p.prompts[0].text, "hello");
  EXPECT_EQ(p.sampling.top_logprobs, 2);
  EXPECT_TRUE(p.echo);
  ASSERT_FALSE(Completion(R"({"prompt":[1,2,3]})", &p));
  ASSERT_EQ(p.prompts.size(), 1u);
  EXPECT_TRUE(p.prompts[0].is_tokens);
  EXPECT_EQ(p.prompts[0].tokens, (std::vector<int32_t>{1, 2, 3}));
  ASSERT_FALSE(Completion(R"({"prompt":["a",[4,5]]})", &p));
  ASSERT_EQ(p.prompts.size(), 2u);
  EXPECT_FALSE(p.prompts[0].is_tokens);
  EXPECT_TRUE(p.prompts[1].is_tokens);
}

// Values that ask for the default are accepted: a client that always sends
// them gets a 200.
TEST(SchemaTest, DefaultValuesOfUnsupportedFieldsAreAccepted) {
  ParsedRequest p;
  auto err = Chat(std::string("{") + kMsg +
                      R"(,"echo":false,"response_format":{"type":"text"},"tool_choice":"auto",
      "parallel_tool_calls":true,"functions":null,"modalities":["text"],"use_beam_search":false,
      "skip_special_tokens":true,"length_penalty":1.0,"priority":0,"bad_words":[],
      "metadata":{"a":"b"},"store":false,"service_tier":"auto","prompt_cache_key":"k"})",
                  &p);
  EXPECT_FALSE(err) << err->ToJson();
  EXPECT_FALSE(Completion(R"({"prompt":"x","suffix":null,"best_of":2,"n":2})", &p));
  EXPECT_FALSE(Completion(R"({"prompt":"x","suffix":""})", &p));
}

// max_tokens 0 is left for /v1/completions with echo and logprobs (scoring
// the prompt); its hook says so.
TEST(SchemaTest, ZeroMaxTokensOnlyForEchoWithLogprobs) {
  ParsedRequest p;
  auto err = Completion(R"({"prompt":"x","max_tokens":0,"echo":true,"logprobs":1})", &p);
  ASSERT_FALSE(err) << err->ToJson();
  EXPECT_TRUE(AllowsZeroMaxTokens(p));
  EXPECT_EQ(p.sampling.max_tokens, 0);
  ASSERT_FALSE(Completion(R"({"prompt":"x","max_tokens":1})", &p));
  EXPECT_FALSE(AllowsZeroMaxTokens(p));
}

TEST(SchemaTest, GenerationPromptFlags) {
  ParsedRequest p;
  ASSERT_FALSE(Chat(std::string("{") + kMsg + "}", &p));
  EXPECT_TRUE(p.chat.add_generation_prompt);
  EXPECT_FALSE(p.chat.continue_final_message);
  EXPECT_FALSE(p.add_special_tokens);  // chat: the template writes BOS
  ASSERT_FALSE(Chat(std::string("{") + kMsg + R"(,"add_generation_prompt":false})", &p));
  EXPECT_FALSE(p.chat.add_generation_prompt);
  // Older clients send it inside chat_template_kwargs.
  ASSERT_FALSE(Chat(
      std::string("{") + kMsg + R"(,"chat_template_kwargs":{"add_generation_prompt":false}})", &p));
  EXPECT_FALSE(p.chat.add_generation_prompt);
  // continue_final_message alone turns the generation prompt off.
  ASSERT_FALSE(
      Chat(R"({"messages":[{"role":"user","content":"x"},{"role":"assistant","content":"y"}],
      "continue_final_message":true})",
           &p));
  EXPECT_TRUE(p.chat.continue_final_message);
  EXPECT_FALSE(p.chat.add_generation_prompt);
  ASSERT_FALSE(Completion(R"({"prompt":"x"})", &p));
  EXPECT_TRUE(p.add_special_tokens);
  ASSERT_FALSE(Completion(R"({"prompt":"x","add_special_tokens":false})", &p));
  EXPECT_FALSE(p.add_special_tokens);
}

// The body is parsed with its objects in the client's order; a repeated key
// keeps its first place and its last value, as Python's json.loads.
TEST(SchemaTest, ToolsKeepTheClientsKeyOrder) {
  ParsedRequest p;
  ASSERT_FALSE(Chat(std::string("{") + kMsg +
                        R"(,"tools":[{"type":"function","function":{"name":"f","parameters":
      {"type":"object","properties":{"zeta":{"type":"string"},"alpha":{"type":"integer"}},
       "required":["zeta"]}}}]})",
                    &p));
  EXPECT_EQ(p.chat.tools.dump(),
            R"([{"type":"function","function":{"name":"f","parameters":{"type":"object",)"
            R"("properties":{"zeta":{"type":"string"},"alpha":{"type":"integer"}},)"
            R"("required":["zeta"]}}}])");
  nlohmann::ordered_json j;
  ASSERT_FALSE(ParseJsonBody(R"({"b":1,"a":2,"b":3})", &j));
  EXPECT_EQ(j.dump(), R"({"b":3,"a":2})");
}

// An object with very many keys parses in linear time (nlohmann's own
// ordered parse scans the object for every key: minutes for this one).
TEST(SchemaTest, OrderedParseOfALargeObjectIsLinear) {
  std::string body = "{";
  const int n = 200000;
  for (int i = 0; i < n; ++i)
    body += (i ? ",\"k" : "\"k") + std::to_string(i) + "\":" + std::to_string(i);
  body += ",\"k7\":-1}";
  nlohmann::ordered_json j;
  ASSERT_FALSE(ParseJsonBody(body, &j));
  ASSERT_EQ(j.size(), static_cast<size_t>(n));
  EXPECT_EQ(j.begin().key(), "k0");
  EXPECT_EQ(j["k7"], -1);
  std::string deep(kMaxJsonDepth + 1, '[');
  EXPECT_TRUE(ParseJsonBody(deep + std::string(kMaxJsonDepth + 1, ']'), &j).has_value());
  EXPECT_TRUE(ParseJsonBody("{\"a\":", &j).has_value());
}

struct BadCase {
  Endpoint endpoint;
  const char* body;
  const char* param;  // expected "param"; "" = null
};

TEST(SchemaTest, BadRequestsNameTheField) {
  const BadCase cases[] = {
      {Endpoint::kChat, R"({"messages":[{"role":"user","content":"x"}],"temperature":"hot"})",
       "temperature"},
      {Endpoint::kChat, R"({"messages":[{"role":"user","content":"x"}],"temperature":3})",
       "temperature"},
      {Endpoint::kChat, R"({"messages":[{"role":"user","content":"x"}],"top_p":0})", "top_p"},
      {Endpoint::kChat, R"({"messages":[{"role":"user","content":"x"}],"n":1000})", "n"},
      {Endpoint::kChat, R"({"messages":[{"role":"user","content":"x"}],"n":1.5})", "n"},
      {Endpoint::kChat, R"({"messages":[{"role":"user","content":"x"}],"max_tokens":-1})",
       "max_tokens"},
      {Endpoint::kChat, R"({"messages":[{"role":"user","content":"x"}],"max_tokens":"9"})",
       "max_tokens"},
      {Endpoint::kChat, R"({"messages":[{"role":"user","content":"x"}],"stop":5})", "stop"},
      {Endpoint::kChat, R"({"messages":[{"role":"user","content":"x"}],"stop":["a",3]})",
       "stop[1]"},
      {Endpoint::kChat, R"({"messages":[{"role":"user","content":"x"}],"seed":"x"})", "seed"},
      {Endpoint::kChat, R"({"messages":[{"role":"user","content":"x"}],"logit_bias":{"abc":1}})",
       "logit_bias"},
      {Endpoint::kChat, R"({"messages":[{"role":"user","content":"x"}],"logit_bias":{"5":500}})",
       "logit_bias.5"},
      {Endpoint::kChat, R"({"messages":[{"role":"user","content":"x"}],"logit_bias":{"5000":1}})",
       "logit_bias"},
      {Endpoint::kChat, R"({"messages":[{"role":"user","content":"x"}],"top_logprobs":3})",
       "top_logprobs"},
      {Endpoint::kChat, R"({"messages":[{"role":"user","content":"x"}],"stream":"yes"})", "stream"},
      {Endpoint::kChat,
       R"({"messages":[{"role":"user","content":"x"}],"stream_options":{"include_usage":true}})",
       "stream_options"},
      {Endpoint::kChat, R"({"messages":[{"role":"user","content":"x"}],"model":7})", "model"},
      {Endpoint::kChat,
       R"({"messages":[{"role":"user","content":"x"}],"chat_template_kwargs":{"enable_thinking":"no"}})",
       "chat_template_kwargs.enable_thinking"},
      {Endpoint::kChat, R"({"messages":[]})", "messages"},
      // Known fields that are not implemented: a 400 naming them, not a 200.
      {Endpoint::kCompletion, R"({"prompt":"x","suffix":"end"})", "suffix"},
      {Endpoint::kCompletion, R"({"prompt":"x","best_of":3})", "best_of"},
      {Endpoint::kCompletion, R"({"prompt":"x","n":2,"best_of":1})", "best_of"},
      {Endpoint::kChat, R"({"messages":[{"role":"user","content":"x"}],"echo":true})", "echo"},
      {Endpoint::kChat, R"({"messages":[{"role":"user","content":"x"}],"max_tokens":0})",
       "max_tokens"},
      {Endpoint::kChat, R"({"messages":[{"role":"user","content":"x"}],"max_completion_tokens":0})",
       "max_completion_tokens"},
      {Endpoint::kCompletion, R"({"prompt":"x","max_tokens":0})", "max_tokens"},
      {Endpoint::kCompletion, R"({"prompt":"x","max_tokens":0,"echo":true})", "max_tokens"},
      {Endpoint::kCompletion, R"({"prompt":"x","max_tokens":0,"logprobs":1})", "max_tokens"},
      {Endpoint::kChat,
       R"({"messages":[{"role":"user","content":"x"}],"response_format":{"type":"bogus"}})",
       "response_format.type"},
      {Endpoint::kChat, R"({"messages":[{"role":"user","content":"x"}],"tool_choice":"required"})",
       "tool_choice"},
      {Endpoint::kChat,
       R"({"messages":[{"role":"user","content":"x"}],"tool_choice":{"type":"function","function":{"name":"f"}}})",
       "tool_choice"},
      {Endpoint::kChat,
       R"({"messages":[{"role":"user","content":"x"}],"functions":[{"name":"f"}]})", "functions"},
      {Endpoint::kChat, R"({"messages":[{"role":"user","content":"x"}],"reasoning_effort":"extreme"})",
       "reasoning_effort"},
      {Endpoint::kChat,
       R"({"messages":[{"role":"user","content":"x"}],"modalities":["text","audio"]})",
       "modalities"},
      {Endpoint::kChat, R"({"messages":[{"role":"user","content":"x"}],"use_beam_search":true})",
       "use_beam_search"},
      {Endpoint::kChat,
       R"({"messages":[{"role":"user","content":"x"}],"guided_json":{"type":"integer","minimum":1}})",
       "guided_json"},
      {Endpoint::kCompletion, R"({"prompt":"x","skip_special_tokens":false})",
       "skip_special_tokens"},
      {Endpoint::kCompletion, R"({"prompt":"x","truncate_prompt_tokens":5})",
       "truncate_prompt_tokens"},
      {Endpoint::kChat, R"({"messages":[{"role":"user","content":"x"}],"chat_template":"{{ 1 }}"})",
       "chat_template"},
      {Endpoint::kChat,
       R"({"messages":[{"role":"user","content":"x"}],"stream":true,"stream_options":{"continuous_usage_stats":true}})",
       "stream_options.continuous_usage_stats"},
      // continue_final_message and add_generation_prompt together (vLLM: 400).
      {Endpoint::kChat,
       R"({"messages":[{"role":"assistant","content":"x"}],"continue_final_message":true,"add_generation_prompt":true})",
       "continue_final_message"},
      {Endpoint::kChat,
       R"({"messages":[{"role":"user","content":"x"}],"add_generation_prompt":"yes"})",
       "add_generation_prompt"},
      {Endpoint::kChat, R"({"messages":[{"role":"user","content":"x"}],"add_special_tokens":1})",
       "add_special_tokens"},
      {Endpoint::kChat, R"({"messages":"hi"})", "messages"},
      {Endpoint::kChat, R"({})", "messages"},
      {Endpoint::kChat, R"({"messages":[{"role":"wizard","content":"x"}]})", "messages[0].role"},
      {Endpoint::kChat, R"({"messages":[{"content":"x"}]})", "messages[0].role"},
      {Endpoint::kChat, R"({"messages":[{"role":"user"}]})", "messages[0].content"},
      {Endpoint::kChat, R"({"messages":[{"role":"user","content":5}]})", "messages[0].content"},
      {Endpoint::kChat, R"({"messages":[{"role":"user","content":[{"type":"image_url"}]}]})",
       "messages[0].content[0].type"},
      {Endpoint::kCompletion, R"({})", "prompt"},
      {Endpoint::kCompletion, R"({"prompt":[]})", "prompt"},
      {Endpoint::kCompletion, R"({"prompt":{"a":1}})", "prompt"},
      {Endpoint::kCompletion, R"({"prompt":[1,-2]})", "prompt[1]"},
      {Endpoint::kCompletion, R"({"prompt":[1,99999]})", "prompt[1]"},
      {Endpoint::kCompletion, R"({"prompt":"x","logprobs":9})", "logprobs"},
      {Endpoint::kCompletion, R"({"prompt":["a",7]})", "prompt[1]"},
      {Endpoint::kChat, R"([1,2])", ""},
      {Endpoint::kChat, R"({"messages": [)", ""},
      {Endpoint::kChat, "{\"messages\":[{\"role\":\"user\",\"content\":\"\xff\xfe\"}]}", ""},
  };
  for (const BadCase& c : cases) {
    ParsedRequest p;
    auto err = ParseRequestBody(c.endpoint, c.body, Limits(), &p);
    ASSERT_TRUE(err.has_value()) << c.body;
    EXPECT_EQ(err->http_status, 400) << c.body;
    EXPECT_EQ(err->param, c.param) << c.body << " -> " << err->ToJson();
    json j = json::parse(err->ToJson());
    ASSERT_TRUE(j.contains("error")) << c.body;
    for (const char* k : {"message", "type", "param", "code"})
      EXPECT_TRUE(j["error"].contains(k)) << c.body << " lacks " << k;
    EXPECT_FALSE(j["error"]["message"].get<std::string>().empty());
    if (*c.param != '\0') {
      EXPECT_NE(j["error"]["message"].get<std::string>().find(c.param), std::string::npos)
          << "message should name the field: " << j.dump();
    }
  }
}

// What costs engine-thread work on every token is bounded: stop strings by
// count and length, logit_bias and stop_token_ids by entries (vLLM's 1024
// and 128). At the limit is fine, one over is a 400 naming field and limit.
TEST(SchemaTest, PerTokenCostsAreBounded) {
  SchemaLimits limits = Limits();
  limits.vocab_size = 5000;  // room for 1,024 distinct logit_bias ids
  auto body = [](json extra) {
    json b = {{"messages", {{{"role", "user"}, {"content", "x"}}}}};
    b.update(extra);
    return b.dump();
  };
  auto bias = [](int entries) {
    json b = json::object();
    for (int i = 0; i < entries; ++i) b[std::to_string(i)] = 1;
    return b;
  };
  auto ids = [](int n) {
    json a = json::array();
    for (int i = 0; i < n; ++i) a.push_back(i);
    return a;
  };
  const std::string at(static_cast<size_t>(limits.max_stop_bytes), 's');
  const std::string over = at + "s";
  struct Case {
    json extra;
    const char* param;  // "" = accepted
    const char* limit;  // the limit the message must state
  };
  const Case cases[] = {
      {{{"stop", at}}, "", ""},
      {{{"stop", {"a", at}}}, "", ""},
      {{{"stop", over}}, "stop", "at most 256"},
      {{{"stop", {"a", over}}}, "stop[1]", "at most 256"},
      {{{"stop", std::string(100000, 'x')}}, "stop", "at most 256"},
      {{{"logit_bias", bias(1024)}}, "", ""},
      {{{"logit_bias", bias(1025)}}, "logit_bias", "at most 1024"},
      {{{"stop_token_ids", ids(128)}}, "", ""},
      {{{"stop_token_ids", ids(129)}}, "stop_token_ids", "at most 128"},
  };
  for (const Case& c : cases) {
    ParsedRequest p;
    auto err = ParseRequestBody(Endpoint::kChat, body(c.extra), limits, &p);
    if (*c.param == '\0') {
      EXPECT_FALSE(err.has_value()) << c.extra.dump().substr(0, 80) << " -> " << err->ToJson();
      continue;
    }
    ASSERT_TRUE(err.has_value()) << c.extra.dump().substr(0, 80);
    EXPECT_EQ(err->http_status, 400);
    EXPECT_EQ(err->param, c.param);
    EXPECT_NE(err->message.find(c.limit), std::string::npos) << err->message;
    EXPECT_NE(err->message.find(c.param), std::string::npos) << err->message;
  }
}

TEST(SchemaTest, FromStatusMapsCodes) {
  EXPECT_EQ(FromStatus(InvalidArgumentError("x")).http_status, 400);
  EXPECT_EQ(FromStatus(OutOfRangeError("x")).code, "context_length_exceeded");
  EXPECT_EQ(FromStatus(ResourceExhaustedError("x")).http_status, 429);
  EXPECT_EQ(FromStatus(UnavailableError("x")).http_status, 503);
  EXPECT_EQ(FromStatus(InternalError("x")).http_status, 500);
}

// nlohmann's lexer ends the input at a NUL outside a string: the body must be
// refused, not parsed as its prefix.
TEST(SchemaTest, NulByteInBodyIsInvalidJson) {
  nlohmann::json j;
  for (const std::string& body : {std::string("{\"prompt\": \"hi\"}\0{\"x\": 1}", 25),
                                  std::string("{\"prompt\": \"a\0b\"}", 17),
                                  std::string("{\"prompt\":\0 \"hi\"}", 17)}) {
    auto err = ParseJsonBody(body, &j);
    ASSERT_TRUE(err.has_value()) << "parsed: " << j.dump();
    EXPECT_EQ(err->http_status, 400);
    EXPECT_EQ(err->code, "invalid_json");
  }
  EXPECT_FALSE(ParseJsonBody(R"({"prompt": "escaped \u0000 is fine"})", &j).has_value());
}

}  // namespace
}  // namespace kvfork::server
