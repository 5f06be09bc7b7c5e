// Tool-call and reasoning parsers on replies written the way each model
// family writes them, whole and streamed byte by byte (the stream must give
// the same result however the text is cut), and the format each real chat
// template (llama.cpp's collection) selects.
#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "grammar/compile.h"
#include "grammar/matcher.h"
#include "server/assistant_output.h"
#include "server/reasoning_parser.h"
#include "server/tool_call_parser.h"
#include "server/tool_choice_grammar.h"
#include "test_env.h"

namespace kvfork::server {
namespace {

using nlohmann::ordered_json;

// Feeds text in pieces of `step` bytes; returns content + calls.
ToolCallOutput StreamIn(ToolCallFormat format, const std::string& text, size_t step,
                        size_t max_calls = SIZE_MAX) {
  ToolCallStreamParser parser(format, max_calls);
  ToolCallOutput all;
  auto add = [&all](ToolCallOutput o) {
    all.content += o.content;
    for (ToolCall& c : o.calls) all.calls.push_back(std::move(c));
  };
  for (size_t i = 0; i < text.size(); i += step) add(parser.Feed(text.substr(i, step)));
  add(parser.Finish());
  return all;
}

void ExpectSameEveryCut(ToolCallFormat format, const std::string& text) {
  ToolCallOutput whole = ParseToolCalls(format, text, SIZE_MAX);
  for (size_t step : {1, 2, 3, 7, 64}) {
    ToolCallOutput cut = StreamIn(format, text, step);
    EXPECT_EQ(cut.content, whole.content) << "step " << step;
    ASSERT_EQ(cut.calls.size(), whole.calls.size()) << "step " << step;
    for (size_t i = 0; i < cut.calls.size(); ++i) {
      EXPECT_EQ(cut.calls[i].name, whole.calls[i].name);
      EXPECT_EQ(cut.calls[i].arguments, whole.calls[i].arguments);
    }
  }
}

TEST(ToolCallParser, HermesQwen3ReplyWithTwoCalls) {
  const std::string reply =
      "Let me check both cities.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": "
      "{\"city\": \"Paris\", \"unit\": \"celsius\"}}\n</tool_call>\n<tool_call>\n{\"name\": "
      "\"get_weather\", \"arguments\": {\"city\": \"Tokyo\"}}\n</tool_call>";
  ToolCallOutput out = ParseToolCalls(ToolCallFormat::kHermes, reply, SIZE_MAX);
  EXPECT_EQ(out.content, "Let me check both cities.\n\n");
  ASSERT_EQ(out.calls.size(), 2u);
  EXPECT_EQ(out.calls[0].name, "get_weather");
  // The arguments are the model's own text (key order and spacing), so the
  // next turn's template prints them back unchanged.
  EXPECT_EQ(out.calls[0].arguments, "{\"city\": \"Paris\", \"unit\": \"celsius\"}");
  EXPECT_EQ(out.calls[1].arguments, "{\"city\": \"Tokyo\"}");
  EXPECT_EQ(out.calls[0].id.rfind("call_", 0), 0u);
  EXPECT_EQ(out.calls[0].id.size(), 5u + 24u);
  EXPECT_NE(out.calls[0].id, out.calls[1].id);
  ExpectSameEveryCut(ToolCallFormat::kHermes, reply);
}

TEST(ToolCallParser, HermesAtMostMaxCalls) {
  const std::string reply =
      "<tool_call>{\"name\": \"a\", \"arguments\": {}}</tool_call><tool_call>{\"name\": \"b\", "
      "\"arguments\": {}}</tool_call>";
  ToolCallOutput out = ParseToolCalls(ToolCallFormat::kHermes, reply, 1);
  ASSERT_EQ(out.calls.size(), 1u);
  EXPECT_EQ(out.calls[0].name, "a");
  EXPECT_EQ(StreamIn(ToolCallFormat::kHermes, reply, 1, 1).calls.size(), 1u);
}

TEST(ToolCallParser, HermesBrokenJsonStaysContent) {
  const std::string reply = "ok <tool_call>{\"name\": \"a\", \"arguments\": {</tool_call> done";
  ToolCallOutput out = ParseToolCalls(ToolCallFormat::kHermes, reply, SIZE_MAX);
  EXPECT_TRUE(out.calls.empty());
  EXPECT_EQ(out.content, reply);
  ExpectSameEveryCut(ToolCallFormat::kHermes, reply);
}

TEST(ToolCallParser, HermesUnclosedCallThatParsesIsACall) {
  // A stop string "</tool_call>" leaves the closing tag out of the text.
  const std::string reply = "<tool_call>\n{\"name\": \"lookup\", \"arguments\": {\"q\": \"x\"}}\n";
  ToolCallOutput out = ParseToolCalls(ToolCallFormat::kHermes, reply, SIZE_MAX);
  ASSERT_EQ(out.calls.size(), 1u);
  EXPECT_EQ(out.calls[0].arguments, "{\"q\": \"x\"}");
  EXPECT_EQ(out.content, "");
  // Cut mid-JSON (max_tokens): the text comes back as content.
  out = ParseToolCalls(ToolCallFormat::kHermes, "<tool_call>\n{\"name\": \"lo", SIZE_MAX);
  EXPECT_TRUE(out.calls.empty());
  EXPECT_EQ(out.content, "<tool_call>\n{\"name\": \"lo");
}

TEST(ToolCallParser, HermesPartialTagIsHeldThenReleased) {
  ToolCallStreamParser parser(ToolCallFormat::kHermes, SIZE_MAX);
  EXPECT_EQ(parser.Feed("a <tool").content, "a ");
  EXPECT_EQ(parser.Feed("box> b").content, "<toolbox> b");
  EXPECT_EQ(parser.Finish().content, "");
}

TEST(ToolCallParser, Llama3JsonReplies) {
  const std::string one = "{\"name\": \"get_weather\", \"parameters\": {\"city\": \"Paris\"}}";
  ToolCallOutput out = ParseToolCalls(ToolCallFormat::kLlama3Json, one, SIZE_MAX);
  ASSERT_EQ(out.calls.size(), 1u);
  EXPECT_EQ(out.calls[0].name, "get_weather");
  EXPECT_EQ(out.calls[0].arguments, "{\"city\": \"Paris\"}");
  EXPECT_EQ(out.content, "");
  ExpectSameEveryCut(ToolCallFormat::kLlama3Json, one);

  const std::string tagged = "<|python_tag|>" + one + "; {\"name\": \"time\", \"parameters\": {}}";
  out = ParseToolCalls(ToolCallFormat::kLlama3Json, tagged, SIZE_MAX);
  ASSERT_EQ(out.calls.size(), 2u);
  EXPECT_EQ(out.calls[1].name, "time");
  EXPECT_EQ(out.calls[1].arguments, "{}");
  ExpectSameEveryCut(ToolCallFormat::kLlama3Json, tagged);

  const std::string prose = "The weather in Paris is {sunny}.";
  out = ParseToolCalls(ToolCallFormat::kLlama3Json, prose, SIZE_MAX);
  EXPECT_TRUE(out.calls.empty());
  EXPECT_EQ(out.content, prose);
  // JSON that is not a call is the content.
  const std::string data = "{\"answer\": 42}";
  EXPECT_EQ(ParseToolCalls(ToolCallFormat::kLlama3Json, data, SIZE_MAX).content, data);
  // Prose streams out at once (not held to the end).
  ToolCallStreamParser parser(ToolCallFormat::kLlama3Json, SIZE_MAX);
  EXPECT_EQ(parser.Feed("  Hello").content, "  Hello");
}

TEST(ToolCallParser, MistralReplies) {
  const std::string reply =
      "[TOOL_CALLS][{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}, {\"name\": "
      "\"get_time\", \"arguments\": {\"tz\": \"CET\"}}]";
  ToolCallOutput out = ParseToolCalls(ToolCallFormat::kMistral, reply, SIZE_MAX);
  ASSERT_EQ(out.calls.size(), 2u);
  EXPECT_EQ(out.calls[1].name, "get_time");
  EXPECT_EQ(out.calls[1].arguments, "{\"tz\":\"CET\"}");
  ExpectSameEveryCut(ToolCallFormat::kMistral, reply);
  // [TOOL_CALLS] is a special token left out of the text: the array alone.
  out = ParseToolCalls(ToolCallFormat::kMistral, reply.substr(12), SIZE_MAX);
  EXPECT_EQ(out.calls.size(), 2u);
  EXPECT_EQ(ParseToolCalls(ToolCallFormat::kMistral, "[1] is a footnote", SIZE_MAX).content,
            "[1] is a footnote");
}

TEST(ToolCallParser, ArgumentsWithNestedValuesAndEscapes) {
  const std::string reply =
      "<tool_call>{\"arguments\" : {\"q\": \"a \\\"}\\\" b\", \"n\": [1, {\"x\": null}]}, "
      "\"name\": \"search\"}</tool_call>";
  ToolCallOutput out = ParseToolCalls(ToolCallFormat::kHermes, reply, SIZE_MAX);
  ASSERT_EQ(out.calls.size(), 1u);
  EXPECT_EQ(out.calls[0].name, "search");
  EXPECT_EQ(out.calls[0].arguments, "{\"q\": \"a \\\"}\\\" b\", \"n\": [1, {\"x\": null}]}");
  EXPECT_FALSE(ordered_json::parse(out.calls[0].arguments).is_discarded());
}

TEST(ToolCallParser, FormatNames) {
  for (ToolCallFormat f : {ToolCallFormat::kHermes, ToolCallFormat::kLlama3Json,
                           ToolCallFormat::kMistral, ToolCallFormat::kNone})
    EXPECT_EQ(ParseToolCallFormat(ToolCallFormatName(f)), f);
  EXPECT_FALSE(ParseToolCallFormat("auto"));
}

std::string ReadTemplate(const std::string& name) {
  std::ifstream in(testing::LlamaCppSourceDir() + "/models/templates/" + name);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

TEST(ToolCallParser, FormatFromRealTemplates) {
  struct Case {
    const char* file;
    ToolCallFormat format;
    bool reasoning;
  };
  const Case cases[] = {
      {"Qwen-Qwen3-0.6B.jinja", ToolCallFormat::kHermes, true},
      {"Qwen-Qwen2.5-7B-Instruct.jinja", ToolCallFormat::kHermes, false},
      {"NousResearch-Hermes-3-Llama-3.1-8B-tool_use.jinja", ToolCallFormat::kHermes, false},
      {"Qwen-QwQ-32B.jinja", ToolCallFormat::kHermes, true},
      {"meta-llama-Llama-3.1-8B-Instruct.jinja", ToolCallFormat::kLlama3Json, false},
      {"meta-llama-Llama-3.2-3B-Instruct.jinja", ToolCallFormat::kLlama3Json, false},
      {"mistralai-Mistral-Nemo-Instruct-2407.jinja", ToolCallFormat::kMistral, false},
      {"google-gemma-2-2b-it.jinja", ToolCallFormat::kNone, false},
  };
  for (const Case& c : cases) {
    const std::string source = ReadTemplate(c.file);
    if (source.empty())
      GTEST_SKIP() << "llama.cpp templates not installed (scripts/install-deps.sh)";
    EXPECT_EQ(DetectToolCallFormat(source), c.format) << c.file;
    EXPECT_EQ(TemplateUsesReasoning(source), c.reasoning) << c.file;
  }
}

ReasoningOutput ReasonIn(const std::string& text, size_t step, bool inside) {
  ReasoningStreamParser parser(inside);
  ReasoningOutput all;
  for (size_t i = 0; i < text.size(); i += step) {
    ReasoningOutput o = parser.Feed(text.substr(i, step));
    all.reasoning += o.reasoning;
    all.content += o.content;
  }
  ReasoningOutput o = parser.Finish();
  all.reasoning += o.reasoning;
  all.content += o.content;
  return all;
}

TEST(ReasoningParser, Qwen3ThinkingReply) {
  const std::string reply = "<think>\nThe user asks 2+2. That is 4.\n</think>\n\nThe answer is 4.";
  for (size_t step : {1, 2, 5, 100}) {
    ReasoningOutput out = ReasonIn(reply, step, false);
    EXPECT_EQ(out.reasoning, "\nThe user asks 2+2. That is 4.\n") << step;
    EXPECT_EQ(out.content, "The answer is 4.") << step;
  }
}

TEST(ReasoningParser, NoThinkIsAllContentAndUnclosedIsAllReasoning) {
  ReasoningOutput out = SplitReasoning("Hello <think> there", false);
  EXPECT_EQ(out.content, "Hello <think> there");
  EXPECT_EQ(out.reasoning, "");
  out = SplitReasoning("<think>still thinking", false);
  EXPECT_EQ(out.reasoning, "still thinking");
  EXPECT_EQ(out.content, "");
  // A template that opened <think> in the prompt (DeepSeek-R1, QwQ).
  for (size_t step : {1, 3, 50}) {
    out = ReasonIn("step one</think>Done.", step, true);
    EXPECT_EQ(out.reasoning, "step one");
    EXPECT_EQ(out.content, "Done.");
  }
  EXPECT_TRUE(PromptOpensReasoning("<|im_start|>assistant\n<think>\n"));
  EXPECT_FALSE(PromptOpensReasoning("<|im_start|>assistant\n<think>\n\n</think>\n\n"));
}

TEST(AssistantOutput, ReasoningThenToolCall) {
  AssistantParsing parsing;
  parsing.reasoning = true;
  parsing.tool_format = ToolCallFormat::kHermes;
  parsing.max_tool_calls = SIZE_MAX;
  const std::string reply =
      "<think>\nI should call the tool. <tool_call> is how.\n</think>\n\n<tool_call>\n{\"name\": "
      "\"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>";
  for (size_t step : {1, 4, 1000}) {
    AssistantOutputParser parser(parsing);
    AssistantDelta all;
    for (size_t i = 0; i < reply.size(); i += step) all.Append(parser.Feed(reply.substr(i, step)));
    all.Append(parser.Finish());
    // A tag inside the reasoning is the reasoning's text, not a call.
    EXPECT_EQ(all.reasoning, "\nI should call the tool. <tool_call> is how.\n");
    EXPECT_EQ(all.content, "");
    ASSERT_EQ(all.calls.size(), 1u);
    EXPECT_EQ(all.calls[0].arguments, "{\"city\": \"Paris\"}");
  }
}

TEST(ToolChoiceGrammar, PrefixRenamesRulesOnly) {
  EXPECT_EQ(
      PrefixGbnfRules("root ::= a-b \"root\" [a-z\\]] # root\na-b ::= \"x\\\"y\" root?\n", "t0-"),
      "t0-root ::= t0-a-b \"root\" [a-z\\]] # root\nt0-a-b ::= \"x\\\"y\" t0-root?\n");
}

bool Accepts(const std::string& gbnf, const std::string& text) {
  auto g = grammar::CompileGbnf(gbnf, "test");
  EXPECT_TRUE(g.ok()) << g.status().ToString() << "\n" << gbnf;
  if (!g.ok()) return false;
  grammar::GrammarMatcher m(*g);
  return m.AcceptBytes(text) && m.CanEnd();
}

TEST(ToolChoiceGrammar, ForcesOneCallValidUnderTheSchema) {
  const ordered_json tools = ordered_json::parse(R"([
    {"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object",
      "properties": {"city": {"type": "string", "maxLength": 8}}, "required": ["city"],
      "additionalProperties": false}}},
    {"type": "function", "function": {"name": "get_time"}}])");
  StatusOr<std::string> any = ForcedToolCallGbnf(ToolCallFormat::kHermes, tools, "");
  ASSERT_TRUE(any.ok()) << any.status().ToString();
  const std::string weather =
      "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\":\"Paris\"}}\n</tool_call>";
  EXPECT_TRUE(Accepts(*any, weather));
  EXPECT_TRUE(
      Accepts(*any, "<tool_call>\n{\"name\": \"get_time\", \"arguments\": {}}\n</tool_call>"));
  // Arguments outside the schema, another name, or a second call: refused.
  EXPECT_FALSE(Accepts(*any,
                       "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": "
                       "{\"city\":\"Paris, France\"}}\n</tool_call>"));
  EXPECT_FALSE(Accepts(*any, "<tool_call>\n{\"name\": \"nope\", \"arguments\": {}}\n</tool_call>"));
  EXPECT_FALSE(Accepts(*any, weather + weather));
  // What the grammar accepts, the parser reads back as the call.
  ToolCallOutput parsed = ParseToolCalls(ToolCallFormat::kHermes, weather, SIZE_MAX);
  ASSERT_EQ(parsed.calls.size(), 1u);
  EXPECT_EQ(parsed.calls[0].arguments, "{\"city\":\"Paris\"}");

  StatusOr<std::string> named = ForcedToolCallGbnf(ToolCallFormat::kHermes, tools, "get_time");
  ASSERT_TRUE(named.ok());
  EXPECT_FALSE(Accepts(*named, weather));
  StatusOr<std::string> llama =
      ForcedToolCallGbnf(ToolCallFormat::kLlama3Json, tools, "get_weather");
  ASSERT_TRUE(llama.ok());
  EXPECT_TRUE(Accepts(*llama, "{\"name\": \"get_weather\", \"parameters\": {\"city\":\"Rome\"}}"));
  StatusOr<std::string> mistral = ForcedToolCallGbnf(ToolCallFormat::kMistral, tools, "get_time");
  ASSERT_TRUE(mistral.ok());
  EXPECT_TRUE(Accepts(*mistral, "[{\"name\": \"get_time\", \"arguments\": {}}]"));

  EXPECT_FALSE(ForcedToolCallGbnf(ToolCallFormat::kHermes, tools, "nope").ok());
  EXPECT_FALSE(ForcedToolCallGbnf(ToolCallFormat::kNone, tools, "").ok());
  const ordered_json bad = ordered_json::parse(
      R"([{"type": "function", "function": {"name": "f", "parameters": {"not": {}}}}])");
  StatusOr<std::string> err = ForcedToolCallGbnf(ToolCallFormat::kHermes, bad, "");
  ASSERT_FALSE(err.ok());
  EXPECT_NE(err.status().message().find("tools[0].function.parameters"), std::string::npos)
      << err.status().ToString();
}

}  // namespace
}  // namespace kvfork::server
