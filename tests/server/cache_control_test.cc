// Cache control in the Anthropic translation (issue 25): cache_control
// breakpoints on tools, system and content blocks become one pin through the
// message of the last breakpoint, with the longest TTL; a malformed
// cache_control is a 400 naming its field; usage splits the prompt into
// read, written (the pinned prefix computed now) and the rest.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "server/anthropic_messages.h"
#include "server/chat_formatter.h"

namespace kvfork::server {
namespace {

using ojson = nlohmann::ordered_json;

ojson Body(const std::string& text) {
  ojson b = ojson::parse(text);
  b["model"] = "m";
  b["max_tokens"] = 4;
  return b;
}

TEST(AnthropicCacheControl, BreakpointsBecomeOnePin) {
  ojson chat;
  AnthropicCacheControl cc;
  // No breakpoint: no pin.
  ASSERT_FALSE(AnthropicToChatBody(Body(R"({"messages":[{"role":"user","content":"hi"}]})"), false,
                                   &chat, &cc));
  EXPECT_FALSE(cc.present);
  // On the system prompt: the first chat message (the system one), 5 min.
  ASSERT_FALSE(AnthropicToChatBody(
      Body(R"({"system":[{"type":"text","text":"s","cache_control":{"type":"ephemeral"}}],
               "messages":[{"role":"user","content":"hi"}]})"),
      false, &chat, &cc));
  EXPECT_TRUE(cc.present);
  EXPECT_EQ(cc.chat_messages, 1u);
  EXPECT_EQ(cc.ttl_ms, 5 * 60 * 1000);
  // The last breakpoint sets the extent (through its message, counted in
  // chat messages: system + 2), the longest TTL the duration.
  ASSERT_FALSE(AnthropicToChatBody(
      Body(R"({"system":"s",
               "tools":[{"name":"t","input_schema":{"type":"object"},
                         "cache_control":{"type":"ephemeral","ttl":"1h"}}],
               "messages":[{"role":"user","content":"a"},
                           {"role":"assistant","content":[{"type":"text","text":"b",
                             "cache_control":{"type":"ephemeral","ttl":"5m"}}]},
                           {"role":"user","content":"c"}]})"),
      false, &chat, &cc));
  EXPECT_EQ(cc.chat_messages, 3u);
  EXPECT_EQ(cc.ttl_ms, 60 * 60 * 1000);
}

TEST(AnthropicCacheControl, MalformedCacheControlNamesItsField) {
  ojson chat;
  AnthropicCacheControl cc;
  struct Case {
    const char* body;
    const char* param;
  };
  for (const Case& c : {
           Case{R"({"system":[{"type":"text","text":"s","cache_control":{"type":"ephemeral","ttl":"2h"}}],
                    "messages":[{"role":"user","content":"hi"}]})",
                "system[0].cache_control.ttl"},
           Case{R"({"messages":[{"role":"user","content":[{"type":"text","text":"x",
                    "cache_control":{"type":"persistent"}}]}]})",
                "messages[0].content[0].cache_control.type"},
           Case{R"({"tools":[{"name":"t","input_schema":{},"cache_control":"yes"}],
                    "messages":[{"role":"user","content":"hi"}]})",
                "tools[0].cache_control"},
       }) {
    std::optional<ApiError> err = AnthropicToChatBody(Body(c.body), false, &chat, &cc);
    ASSERT_TRUE(err.has_value()) << c.body;
    EXPECT_EQ(err->http_status, 400);
    EXPECT_EQ(err->param, c.param);
    // count_tokens checks them too.
    EXPECT_TRUE(AnthropicToChatBody(Body(c.body), true, &chat, nullptr).has_value());
  }
}

// Anthropic's rules across breakpoints (render order tools, system,
// messages): at most four, and no longer TTL after a shorter one.
TEST(AnthropicCacheControl, TooManyOrMisorderedBreakpointsAreA400) {
  const std::string five = R"({"type":"ephemeral"})";
  auto text = [](const std::string& cc) {
    return R"({"type":"text","text":"x","cache_control":)" + cc + "}";
  };
  ojson chat;
  AnthropicCacheControl cc;
  struct Case {
    std::string body;
    const char* param;  // nullptr: accepted
  };
  const std::string one_hour = R"({"type":"ephemeral","ttl":"1h"})";
  for (const Case& c : std::vector<Case>{
           // Four are fine: one tool, one system block, two content blocks.
           {R"({"tools":[{"name":"t","input_schema":{},"cache_control":)" + five + R"(}],
                "system":[)" + text(five) + R"(],
                "messages":[{"role":"user","content":[)" + text(five) + "," + text(five) + "]}]}",
            nullptr},
           // A fifth names itself, counted in render order (the tool comes
           // first although "system" is written before "tools").
           {R"({"system":[)" + text(five) + "," + text(five) + R"(],
                "tools":[{"name":"t","input_schema":{},"cache_control":)" + five + R"(}],
                "messages":[{"role":"user","content":[)" + text(five) + "," + text(five) + "]}]}",
            "messages[0].content[1].cache_control"},
           // 1h after 5m: the later one is named.
           {R"({"system":[)" + text(five) + R"(],
                "messages":[{"role":"user","content":[)" + text(one_hour) + "]}]}",
            "messages[0].content[0].cache_control"},
           // A 5m tool before a 1h system block: the tool renders first.
           {R"({"system":[)" + text(one_hour) + R"(],
                "tools":[{"name":"t","input_schema":{},"cache_control":)" + five + R"(}],
                "messages":[{"role":"user","content":"hi"}]})",
            "system[0].cache_control"},
           // 1h then 5m is the order Anthropic asks for.
           {R"({"system":[)" + text(one_hour) + R"(],
                "messages":[{"role":"user","content":[)" + text(five) + "]}]}",
            nullptr},
       }) {
    std::optional<ApiError> err = AnthropicToChatBody(Body(c.body), false, &chat, &cc);
    if (c.param == nullptr) {
      EXPECT_FALSE(err.has_value()) << c.body << ": " << err->message;
      continue;
    }
    ASSERT_TRUE(err.has_value()) << c.body;
    EXPECT_EQ(err->http_status, 400);
    EXPECT_EQ(err->param, c.param) << err->message;
    EXPECT_TRUE(AnthropicToChatBody(Body(c.body), true, &chat, nullptr).has_value());
  }
}

TEST(AnthropicCacheControl, UsageSplitsThePromptIntoReadWrittenAndTheRest) {
  ResponseMeta meta;
  meta.id = "msg_1";
  meta.model = "m";
  auto f = MakeAnthropicFormatter(meta, 100, /*pin_tokens=*/60);
  Usage u{100, 3, 16};  // prompt, completion, cached
  const nlohmann::json j = f->Body({}, u);
  EXPECT_EQ(j["usage"]["cache_read_input_tokens"], 16);
  EXPECT_EQ(j["usage"]["cache_creation_input_tokens"], 44);
  EXPECT_EQ(j["usage"]["input_tokens"], 40);
}

}  // namespace
}  // namespace kvfork::server
