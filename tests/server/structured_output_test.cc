// Each structured-output field form compiles to a grammar that accepts what
// it should; bad or unsupported ones are a 400 naming the field.
#include "server/structured_output.h"

#include <gtest/gtest.h>

#include "grammar/matcher.h"
#include "server/openai_schema.h"

namespace kvfork::server {
namespace {

using json = nlohmann::ordered_json;

bool Accepts(const SamplingParams& sp, const std::string& text) {
  if (sp.grammar == nullptr) return false;
  grammar::GrammarMatcher m(sp.grammar);
  return m.AcceptBytes(text) && m.CanEnd();
}

SamplingParams Parse(const std::string& body) {
  SamplingParams sp;
  std::optional<ApiError> e = ParseStructuredOutput(json::parse(body), &sp);
  EXPECT_FALSE(e.has_value()) << body << ": " << (e ? e->message : "");
  return sp;
}

std::string ErrorParam(const std::string& body) {
  SamplingParams sp;
  std::optional<ApiError> e = ParseStructuredOutput(json::parse(body), &sp);
  return e ? e->param : "(no error)";
}

TEST(StructuredOutput, EveryFieldForm) {
  const std::string schema = R"({"type":"object","properties":{"a":{"type":"integer"}},
    "required":["a"],"additionalProperties":false})";
  for (
      const std::string& body :
      {R"({"response_format":{"type":"json_schema","json_schema":{"name":"x","strict":true,"schema":)" +
           schema + "}}}",
       R"({"structured_outputs":{"json":)" + schema + "}}", R"({"guided_json":)" + schema + "}",
       R"({"guided_json":)" + json(json::parse(schema).dump()).dump() + "}",  // JSON text
       R"({"json_schema":)" + schema + "}",
       R"({"response_format":{"type":"json_object","schema":)" + schema + "}}"}) {
    SamplingParams sp = Parse(body);
    EXPECT_TRUE(Accepts(sp, R"({"a": 12})")) << body;
    EXPECT_FALSE(Accepts(sp, R"({"a": "12"})")) << body;
  }
  SamplingParams obj = Parse(R"({"response_format":{"type":"json_object"}})");
  EXPECT_TRUE(Accepts(obj, R"({"anything": [1, "x"]})"));
  EXPECT_FALSE(Accepts(obj, "[1]"));
  for (const char* body :
       {R"({"guided_regex":"[0-9]{3}"})", R"({"structured_outputs":{"regex":"[0-9]{3}"}})"}) {
    SamplingParams sp = Parse(body);
    EXPECT_TRUE(Accepts(sp, "123"));
    EXPECT_FALSE(Accepts(sp, "12"));
  }
  for (const char* body :
       {R"({"guided_choice":["yes","no"]})", R"({"structured_outputs":{"choice":["yes","no"]}})"}) {
    SamplingParams sp = Parse(body);
    EXPECT_TRUE(Accepts(sp, "no"));
    EXPECT_FALSE(Accepts(sp, "maybe"));
  }
  for (const char* body :
       {R"({"grammar":"root ::= \"a\"+"})", R"({"guided_grammar":"root ::= \"a\"+"})",
        R"({"structured_outputs":{"grammar":"root ::= \"a\"+"}})"}) {
    SamplingParams sp = Parse(body);
    EXPECT_TRUE(Accepts(sp, "aaa"));
    EXPECT_FALSE(Accepts(sp, "b"));
  }
  EXPECT_EQ(Parse(R"({"response_format":{"type":"text"}})").grammar, nullptr);
  EXPECT_EQ(Parse(R"({"grammar":""})").grammar, nullptr);  // llama.cpp: none
  EXPECT_EQ(Parse("{}").grammar, nullptr);
}

TEST(StructuredOutput, ErrorsNameTheField) {
  EXPECT_EQ(ErrorParam(R"({"response_format":{"type":"bogus"}})"), "response_format.type");
  EXPECT_EQ(ErrorParam(R"({"response_format":{"type":"json_schema"}})"),
            "response_format.json_schema");
  EXPECT_EQ(
      ErrorParam(
          R"({"response_format":{"type":"json_schema","json_schema":{"schema":{"type":"string","format":"email"}}}})"),
      "response_format.json_schema.schema");
  EXPECT_EQ(ErrorParam(R"({"guided_regex":"(a)\\1"})"), "guided_regex");
  EXPECT_EQ(ErrorParam(R"({"guided_choice":[]})"), "guided_choice");
  EXPECT_EQ(ErrorParam(R"({"guided_choice":["a",1]})"), "guided_choice[1]");
  EXPECT_EQ(ErrorParam(R"({"grammar":"root ::= undefined"})"), "grammar");
  EXPECT_EQ(ErrorParam(R"({"structured_outputs":{"structural_tag":"x"}})"),
            "structured_outputs.structural_tag");
  EXPECT_EQ(ErrorParam(R"({"structured_outputs":{"regex":"a","choice":["a"]}})"),
            "structured_outputs.choice");
  EXPECT_EQ(ErrorParam(R"({"guided_regex":"a","grammar":"root ::= \"a\""})"), "grammar");
}

TEST(StructuredOutput, ReachesTheParsedRequestOnBothRoutes) {
  ParsedRequest chat, completion;
  SchemaLimits limits;
  limits.vocab_size = 1000;
  ASSERT_FALSE(ParseRequestBody(Endpoint::kChat,
                                R"({"messages":[{"role":"user","content":"x"}],
                                    "response_format":{"type":"json_object"}})",
                                limits, &chat));
  EXPECT_NE(chat.sampling.grammar, nullptr);
  ASSERT_FALSE(ParseRequestBody(
      Endpoint::kCompletion, R"({"prompt":"x","guided_choice":["a","b"]})", limits, &completion));
  EXPECT_NE(completion.sampling.grammar, nullptr);
}

TEST(StructuredOutput, ConstrainForOtherRoutes) {
  SamplingParams sp;
  ASSERT_FALSE(
      ConstrainToJsonSchema(json::parse(R"({"type":"array","maxItems":1})"), "tools[0]", &sp));
  EXPECT_TRUE(Accepts(sp, "[1]"));
  EXPECT_FALSE(Accepts(sp, "[1,2]"));
  ASSERT_FALSE(
      ConstrainToGbnf("root ::= \"<tool_call>\" [a-z]+ \"</tool_call>\"", "tool_choice", &sp));
  EXPECT_TRUE(Accepts(sp, "<tool_call>f</tool_call>"));
  std::optional<ApiError> e = ConstrainToJsonSchema(json::parse(R"({"not":{}})"), "tools[0]", &sp);
  ASSERT_TRUE(e.has_value());
  EXPECT_EQ(e->param, "tools[0]");
}

}  // namespace
}  // namespace kvfork::server
