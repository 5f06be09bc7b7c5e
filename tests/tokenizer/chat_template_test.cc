// ChatTemplate renders Qwen3 and Llama 3/3.1/3.2 templates byte-identically to
// Python's jinja2 with transformers' settings, on goldens made by
// tools/chat_template/make_goldens.py; unsupported constructs and
// raise_exception surface as errors naming the line.
#include "tokenizer/chat_template.h"

#include <cstdlib>
#include <ctime>
#include <fstream>
#include <map>
#include <sstream>
#include <thread>

#include <gtest/gtest.h>

#include "test_env.h"

namespace kvfork {
namespace {

using nlohmann::ordered_json;

std::string ReadFile(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  EXPECT_TRUE(f.good()) << "cannot read " << path;
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

// The same sources make_goldens.py reads.
std::string TemplateSource(const std::string& name) {
  auto from_config = [](const std::string& dir) {
    ordered_json cfg = ordered_json::parse(ReadFile(dir + "/tokenizer_config.json"));
    return cfg["chat_template"].get<std::string>();
  };
  const std::string templates = testing::LlamaCppSourceDir() + "/models/templates/";
  if (name == "qwen3") return from_config(testing::QwenTokenizerDir());
  if (name == "llama3") return from_config(testing::LlamaTokenizerDir());
  if (name == "llama3.1") return ReadFile(templates + "meta-llama-Llama-3.1-8B-Instruct.jinja");
  if (name == "llama3.2") return ReadFile(templates + "meta-llama-Llama-3.2-3B-Instruct.jinja");
  ADD_FAILURE() << "unknown template " << name;
  return "";
}

class ChatTemplateGoldens : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    // The generator renders strftime_now in UTC.
    setenv("TZ", "UTC", 1);
    tzset();
  }

  // Renders every case of a goldens file and compares; returns the number checked.
  int CheckGoldens(const std::string& path) {
    ordered_json goldens = ordered_json::parse(ReadFile(path));
    std::map<std::string, ChatTemplate> parsed;
    int checked = 0;
    for (const auto& g : goldens) {
      const std::string name = g["name"].get<std::string>();
      const std::string tmpl_name = g["template"].get<std::string>();
      SCOPED_TRACE(tmpl_name + " " + name);
      const ChatTemplate* tmpl = nullptr;
      StatusOr<ChatTemplate> micro = Status(StatusCode::kInternal, "unused");
      if (g.contains("source")) {
        micro = ChatTemplate::Parse(g["source"].get<std::string>());
        if (!micro.ok() && g.contains("error")) {
          ++checked;
          continue;
        }
        EXPECT_TRUE(micro.ok()) << micro.status().ToString();
        if (!micro.ok()) continue;
        tmpl = &*micro;
      } else {
        auto it = parsed.find(tmpl_name);
        if (it == parsed.end()) {
          StatusOr<ChatTemplate> t = ChatTemplate::Parse(TemplateSource(tmpl_name));
          EXPECT_TRUE(t.ok()) << t.status().ToString();
          if (!t.ok()) return checked;
          it = parsed.emplace(tmpl_name, std::move(t).value()).first;
        }
        tmpl = &it->second;
      }
      StatusOr<std::string> out = tmpl->RenderAt(g["context"], g["now"].get<std::time_t>());
      if (g.contains("expected")) {
        EXPECT_TRUE(out.ok()) << out.status().ToString();
        if (out.ok()) {
          EXPECT_EQ(*out, g["expected"].get<std::string>());
        }
      } else {
        EXPECT_FALSE(out.ok()) << "Python failed with " << g["error"] << " but we rendered:\n"
                               << *out;
        if (!out.ok() && g["error_type"] == "TemplateError") {
          EXPECT_NE(out.status().message().find(g["error"].get<std::string>()), std::string::npos)
              << out.status().ToString();
        }
      }
      ++checked;
    }
    return checked;
  }
};

TEST_F(ChatTemplateGoldens, CheckedInGoldensMatch) {
  const int n = CheckGoldens(testing::SourceDir() + "/tests/data/chat_template/goldens.json");
  EXPECT_GT(n, 280);
}

// Runs the Python generator now (jinja2 as installed) and compares with it, so
// the goldens cannot drift from what jinja2 renders.
TEST_F(ChatTemplateGoldens, LivePythonJinja2Matches) {
  const std::string out = testing::BuildDir() + "/chat_template_goldens_live.json";
  const std::string cmd = "/usr/bin/python3 " + testing::SourceDir() +
                          "/tools/chat_template/make_goldens.py --out " + out + " > /dev/null";
  ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd << " (needs python3-jinja2)";
  EXPECT_EQ(ReadFile(out),
            ReadFile(testing::SourceDir() + "/tests/data/chat_template/goldens.json"))
      << "checked-in goldens are stale: rerun tools/chat_template/make_goldens.py";
  EXPECT_GT(CheckGoldens(out), 280);
}

// Per template, the goldens cover at least 20 conversations.
TEST(ChatTemplateCoverage, TwentyConversationsPerTemplate) {
  ordered_json goldens = ordered_json::parse(
      ReadFile(testing::SourceDir() + "/tests/data/chat_template/goldens.json"));
  std::map<std::string, int> rendered;
  for (const auto& g : goldens) rendered[g["template"].get<std::string>()] += g.contains("expected");
  for (const char* name : {"qwen3", "llama3", "llama3.1", "llama3.2"}) {
    EXPECT_GE(rendered[name], 20) << name;
  }
}

Status ParseError(const std::string& source) {
  StatusOr<ChatTemplate> t = ChatTemplate::Parse(source);
  return t.ok() ? OkStatus() : t.status();
}

TEST(ChatTemplateErrors, UnsupportedConstructNamesItAndTheLine) {
  struct Case {
    std::string source;
    std::string construct;
    std::string line;
  };
  const Case cases[] = {
      {"a\nb\n{% include 'x.jinja' %}", "include", "line 3"},
      {"{% raw %}x{% endraw %}", "raw", "line 1"},
      {"\n{{ x | wordwrap(3) }}", "filter 'wordwrap'", "line 2"},
      {"{% if x is sameasnot 3 %}{% endif %}", "test 'sameasnot'", "line 1"},
      {"{% for x in y recursive %}{% endfor %}", "recursive", "line 1"},
      {"\n\n\n{% extends 'base' %}", "extends", "line 4"},
      {"{{ f(*args) }}", "*args", "line 1"},
  };
  for (const Case& c : cases) {
    Status s = ParseError(c.source);
    EXPECT_EQ(s.code(), StatusCode::kUnimplemented) << c.source << ": " << s.ToString();
    EXPECT_NE(s.message().find(c.construct), std::string::npos) << s.ToString();
    EXPECT_NE(s.message().find(c.line), std::string::npos) << s.ToString();
  }
}

TEST(ChatTemplateErrors, UnsupportedAtRenderTimeNamesIt) {
  StatusOr<ChatTemplate> t = ChatTemplate::Parse("x\n{{ 'a'.zfill(3) }}");
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  StatusOr<std::string> out = t->Render(nlohmann::json::object());
  ASSERT_FALSE(out.ok());
  EXPECT_NE(out.status().message().find("str.zfill"), std::string::npos) << out.status().ToString();
  EXPECT_NE(out.status().message().find("line 2"), std::string::npos) << out.status().ToString();
}

TEST(ChatTemplateErrors, SyntaxErrorsNameTheLine) {
  for (const char* src : {"{% if x %}never closed", "{{ 1 + }}", "\n{% for x y %}{% endfor %}",
                          "{{ 'unterminated }}", "{% endif %}"}) {
    Status s = ParseError(src);
    EXPECT_FALSE(s.ok()) << src;
    EXPECT_NE(s.message().find("chat template line "), std::string::npos) << s.ToString();
  }
}

TEST(ChatTemplateErrors, RaiseExceptionMessageSurfaces) {
  StatusOr<ChatTemplate> t = ChatTemplate::Parse(
      "ok\n{% if messages | length == 0 %}{{ raise_exception('Need at least one message!') }}"
      "{% endif %}");
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  StatusOr<std::string> out = t->Render({{"messages", nlohmann::json::array()}});
  ASSERT_FALSE(out.ok());
  EXPECT_EQ(out.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(out.status().message().find("Need at least one message!"), std::string::npos)
      << out.status().ToString();
  EXPECT_NE(out.status().message().find("line 2"), std::string::npos) << out.status().ToString();
  StatusOr<std::string> fine = t->Render({{"messages", {{{"role", "user"}}}}});
  ASSERT_TRUE(fine.ok()) << fine.status().ToString();
  EXPECT_EQ(*fine, "ok\n");
}

TEST(ChatTemplateErrors, UndefinedBehavesLikeJinja2) {
  StatusOr<ChatTemplate> t = ChatTemplate::Parse("[{{ nothing }}]{{ nothing.attr }}");
  ASSERT_TRUE(t.ok());
  StatusOr<std::string> out = t->Render(nlohmann::json::object());
  ASSERT_FALSE(out.ok());
  EXPECT_NE(out.status().message().find("'nothing' is undefined"), std::string::npos)
      << out.status().ToString();
  StatusOr<ChatTemplate> u = ChatTemplate::Parse("[{{ nothing }}]{{ m.content.startswith('x') }}");
  ASSERT_TRUE(u.ok());
  out = u->Render({{"m", {{"content", nullptr}}}});
  ASSERT_FALSE(out.ok());
  EXPECT_NE(out.status().message().find("'None' has no attribute 'startswith'"), std::string::npos)
      << out.status().ToString();
}

TEST(ChatTemplateErrors, SandboxRefusesMutation) {
  StatusOr<ChatTemplate> t = ChatTemplate::Parse("{{ l.append(1) }}");
  ASSERT_TRUE(t.ok());
  StatusOr<std::string> out = t->Render({{"l", nlohmann::json::array()}});
  ASSERT_FALSE(out.ok());
  EXPECT_NE(out.status().message().find("unsafe"), std::string::npos) << out.status().ToString();
}

TEST(ChatTemplate, RenderOrderedKeepsKeyOrderRenderSorts) {
  StatusOr<ChatTemplate> t = ChatTemplate::Parse("{{ tool | tojson }}");
  ASSERT_TRUE(t.ok());
  const char* text = R"({"tool": {"type": "function", "function": {"name": "f"}}})";
  StatusOr<std::string> ordered = t->RenderOrdered(ordered_json::parse(text));
  ASSERT_TRUE(ordered.ok());
  EXPECT_EQ(*ordered, R"({"type": "function", "function": {"name": "f"}})");
  StatusOr<std::string> sorted = t->Render(nlohmann::json::parse(text));
  ASSERT_TRUE(sorted.ok());
  EXPECT_EQ(*sorted, R"({"function": {"name": "f"}, "type": "function"})");
}

// One parsed template rendered from several threads gives the same bytes.
TEST(ChatTemplate, RendersConcurrently) {
  StatusOr<ChatTemplate> t = ChatTemplate::Parse(TemplateSource("qwen3"));
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  ordered_json ctx = {{"messages",
                       {{{"role", "system"}, {"content", "sys"}},
                        {{"role", "user"}, {"content", "hi"}},
                        {{"role", "assistant"}, {"content", "<think>x</think>yo"}},
                        {{"role", "user"}, {"content", "again"}}}},
                      {"add_generation_prompt", true}};
  StatusOr<std::string> expected = t->RenderOrdered(ctx);
  ASSERT_TRUE(expected.ok()) << expected.status().ToString();
  std::vector<std::thread> threads;
  std::vector<int> mismatches(4, 0);
  for (int w = 0; w < 4; ++w) {
    threads.emplace_back([&, w] {
      for (int i = 0; i < 200; ++i) {
        StatusOr<std::string> out = t->RenderOrdered(ctx);
        if (!out.ok() || *out != *expected) ++mismatches[w];
      }
    });
  }
  for (auto& th : threads) th.join();
  for (int w = 0; w < 4; ++w) EXPECT_EQ(mismatches[w], 0) << "thread " << w;
}

}  // namespace
}  // namespace kvfork
