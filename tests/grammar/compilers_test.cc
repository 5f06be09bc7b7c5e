// JSON Schema, json_object, regex and choice compilers: what each accepts
// and rejects, and errors that name the unsupported keyword.
#include <gtest/gtest.h>

#include "grammar/compile.h"
#include "grammar/json_schema.h"
#include "grammar/matcher.h"

namespace kvfork::grammar {
namespace {

bool Matches(const std::shared_ptr<const Grammar>& g, const std::string& text) {
  GrammarMatcher m(g);
  return m.AcceptBytes(text) && m.CanEnd();
}

std::shared_ptr<const Grammar> Schema(const std::string& schema) {
  auto g = CompileJsonSchema(schema, "schema");
  EXPECT_TRUE(g.ok()) << g.status().ToString();
  return g.ok() ? *g : nullptr;
}

TEST(JsonSchema, ObjectWithRequiredAndOptionalProperties) {
  auto g = Schema(R"({"type":"object","properties":{"a":{"type":"integer"},
    "b":{"type":"string"},"c":{"type":"boolean"}},"required":["b"],"additionalProperties":false})");
  EXPECT_TRUE(Matches(g, R"({"b": "x"})"));
  EXPECT_TRUE(Matches(g, R"({"b":"x","a":-12,"c":true})"));
  EXPECT_TRUE(Matches(g, R"({"b":"x","c":false})"));
  EXPECT_TRUE(Matches(g, "{\n  \"b\": \"\\u00e9\\n\",\n  \"a\": 0\n}"));
  EXPECT_FALSE(Matches(g, R"({"a":1})"));            // b is required
  EXPECT_FALSE(Matches(g, R"({"b":"x","a":1.5})"));  // integer
  EXPECT_FALSE(Matches(g, R"({"b":"x","d":1})"));    // no additional properties
  EXPECT_FALSE(Matches(g, R"({"b":"x",})"));
  EXPECT_FALSE(Matches(g, R"({"b":"x"} )"
                          "\n\n"));  // bounded trailing space: one newline
}

TEST(JsonSchema, OnlyOptionalProperties) {
  auto g = Schema(R"({"properties":{"a":{"type":"null"},"b":{"type":"number"}}})");
  EXPECT_TRUE(Matches(g, "{}"));
  EXPECT_TRUE(Matches(g, R"({"b":1.5e-3})"));
  EXPECT_TRUE(Matches(g, R"({"a":null,"b":0})"));
  EXPECT_FALSE(Matches(g, R"({"b":0,"a":null})"));  // schema order
  EXPECT_FALSE(Matches(g, R"({,"b":0})"));
  EXPECT_FALSE(Matches(g, R"({"b":01})"));
}

TEST(JsonSchema, EnumConstAnyOfAndTypeLists) {
  auto g = Schema(R"({"anyOf":[{"enum":["red","green",3,null]},{"const":{"k":[1]}},
    {"type":["boolean","null"]}]})");
  EXPECT_TRUE(Matches(g, R"("green")"));
  EXPECT_TRUE(Matches(g, "3"));
  EXPECT_TRUE(Matches(g, R"({"k":[1]})"));
  EXPECT_TRUE(Matches(g, "true"));
  EXPECT_FALSE(Matches(g, R"("blue")"));
  EXPECT_FALSE(Matches(g, "4"));
}

TEST(JsonSchema, ArraysWithBounds) {
  auto g = Schema(R"({"type":"array","items":{"type":"integer"},"minItems":2,"maxItems":3})");
  EXPECT_TRUE(Matches(g, "[1, 2]"));
  EXPECT_TRUE(Matches(g, "[1,2,3]"));
  EXPECT_FALSE(Matches(g, "[1]"));
  EXPECT_FALSE(Matches(g, "[1,2,3,4]"));
  auto any = Schema(R"({"type":"array","maxItems":0})");
  EXPECT_TRUE(Matches(any, "[]"));
  EXPECT_FALSE(Matches(any, "[1]"));
}

TEST(JsonSchema, StringLengthsCountCharacters) {
  auto g = Schema(R"({"type":"string","minLength":2,"maxLength":3})");
  EXPECT_TRUE(Matches(g, R"("ab")"));
  EXPECT_TRUE(Matches(g, "\"日本語\""));
  EXPECT_TRUE(Matches(g, R"("a\"c")"));
  EXPECT_FALSE(Matches(g, R"("a")"));
  EXPECT_FALSE(Matches(g, R"("abcd")"));
  EXPECT_FALSE(Matches(g, "\"a\nb\""));  // a raw control character
}

TEST(JsonSchema, PatternMatchesTheDecodedString) {
  auto g = Schema(R"({"type":"string","pattern":"^[a-c]+\\d{2}(x|\"|\\\\)$"})");
  EXPECT_TRUE(Matches(g, R"("ab12x")"));
  EXPECT_TRUE(Matches(g, R"("c99\"")"));
  EXPECT_TRUE(Matches(g, R"("c99\\")"));
  EXPECT_FALSE(Matches(g, R"("ab1x")"));
  EXPECT_FALSE(Matches(g, R"("ab12"")"));
}

TEST(JsonSchema, RefsAndRecursiveDefs) {
  auto g = Schema(R"({"$defs":{"node":{"type":"object","properties":{"v":{"type":"integer"},
    "next":{"anyOf":[{"$ref":"#/$defs/node"},{"type":"null"}]}},"required":["v","next"]}},
    "$ref":"#/$defs/node"})");
  EXPECT_TRUE(Matches(g, R"({"v":1,"next":{"v":2,"next":null}})"));
  EXPECT_FALSE(Matches(g, R"({"v":1,"next":{"v":2}})"));
}

TEST(JsonSchema, UnsupportedKeywordsAreNamed) {
  for (const char* kw : {"minimum", "format", "allOf", "not", "patternProperties", "uniqueItems",
                         "prefixItems", "if"}) {
    const std::string schema =
        std::string(R"({"type":"object","properties":{"x":{"type":"integer",")") + kw + R"(":1}}})";
    auto g = CompileJsonSchema(schema, "response_format.json_schema.schema");
    ASSERT_FALSE(g.ok()) << kw;
    EXPECT_NE(g.status().message().find("'" + std::string(kw) + "'"), std::string::npos)
        << g.status().message();
    EXPECT_NE(g.status().message().find("/properties/x"), std::string::npos);
    EXPECT_NE(g.status().message().find("response_format.json_schema.schema"), std::string::npos);
  }
  EXPECT_FALSE(CompileJsonSchema("{", "s").ok());
  EXPECT_FALSE(CompileJsonSchema(R"({"$ref":"http://x/y"})", "s").ok());
  EXPECT_FALSE(CompileJsonSchema(R"({"type":"strin"})", "s").ok());
}

TEST(JsonSchema, SeveralSchemasInOneGrammar) {
  // A forced tool call: one alternative per tool, each with its own rules.
  JsonSchemaGrammarBuilder b;
  auto weather = b.Add(R"({"type":"object","properties":{"city":{"type":"string"},
    "days":{"type":"integer"}},"required":["city"],"additionalProperties":false})",
                       "tools[0].function.parameters");
  auto search = b.Add(R"({"type":"object","properties":{"q":{"type":"string"},
    "n":{"type":"integer"}},"additionalProperties":false})",
                      "tools[1].function.parameters");
  ASSERT_TRUE(weather.ok() && search.ok());
  const std::string call = GbnfLiteral("<tool_call>\n{\"name\": \"");
  const std::string root = call + " (" + GbnfLiteral("get_weather\", \"arguments\": ") + " " +
                           *weather + " | " + GbnfLiteral("search\", \"arguments\": ") + " " +
                           *search + ") " + GbnfLiteral("}\n</tool_call>");
  auto g = CompileGbnf(b.Build(root), "tool_choice");
  ASSERT_TRUE(g.ok()) << g.status().ToString();
  EXPECT_TRUE(Matches(*g,
                      "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": "
                      "{\"city\": \"Paris\", \"days\": 3}}\n</tool_call>"));
  EXPECT_TRUE(Matches(*g, "<tool_call>\n{\"name\": \"search\", \"arguments\": {}}\n</tool_call>"));
  EXPECT_FALSE(Matches(*g,
                       "<tool_call>\n{\"name\": \"search\", \"arguments\": "
                       "{\"city\": \"Paris\"}}\n</tool_call>"));
  EXPECT_FALSE(Matches(*g, "<tool_call>\n{\"name\": \"other\", \"arguments\": {}}\n</tool_call>"));
}

TEST(JsonObject, AnyObject) {
  auto g = CompileJsonObject();
  EXPECT_TRUE(Matches(g, R"({"a":[1,{"b":null}],"c":"d"})"));
  EXPECT_TRUE(Matches(g, "{}"));
  EXPECT_FALSE(Matches(g, "[]"));
  EXPECT_FALSE(Matches(g, R"("x")"));
}

TEST(Regex, Subset) {
  auto g = CompileRegex(R"((\+1 )?\(\d{3}\) [0-9]{3}-\d{4}|[^a-z\s]{2,}x*?)", "guided_regex");
  ASSERT_TRUE(g.ok()) << g.status().ToString();
  EXPECT_TRUE(Matches(*g, "(555) 123-4567"));
  EXPECT_TRUE(Matches(*g, "+1 (555) 123-4567"));
  EXPECT_TRUE(Matches(*g, "AB"));
  EXPECT_TRUE(Matches(*g, "ABxx"));
  EXPECT_FALSE(Matches(*g, "ab"));
  EXPECT_FALSE(Matches(*g, "A B"));
  auto dot = CompileRegex("a.c", "r");
  ASSERT_TRUE(dot.ok());
  EXPECT_TRUE(Matches(*dot,
                      "a\xE2\x82\xAC"
                      "c"));
  EXPECT_FALSE(Matches(*dot, "a\nc"));
}

TEST(Regex, NonRegularFeaturesAreErrors) {
  for (const char* re : {R"((a)\1)", "(?=a)a", "(?!a)b", "a\\bc", "a^b", "*a", "(a"}) {
    auto g = CompileRegex(re, "guided_regex");
    EXPECT_FALSE(g.ok()) << re;
    if (!g.ok()) {
      EXPECT_NE(g.status().message().find("guided_regex"), std::string::npos);
    }
  }
}

TEST(Choice, ExactlyOneString) {
  auto g = CompileChoice({"yes", "no", "yes sir"}, "guided_choice");
  ASSERT_TRUE(g.ok());
  EXPECT_TRUE(Matches(*g, "yes"));
  EXPECT_TRUE(Matches(*g, "yes sir"));
  EXPECT_FALSE(Matches(*g, "ye"));
  EXPECT_FALSE(Matches(*g, "no "));
  EXPECT_FALSE(CompileChoice({}, "guided_choice").ok());
}

}  // namespace
}  // namespace kvfork::grammar
