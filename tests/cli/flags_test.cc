// The flag parser: `--help` lists every flag a command reads with its
// placeholder, description and default, and exits 0; every error (missing
// value, bad number, missing required flag, unknown flag with the nearest
// name) comes with that full list. The real binary's commands are checked
// by tests/cli/cli_help_test.py.
#include "cli/flags.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace kvfork::cli {
namespace {

Flags ParseArgs(std::vector<std::string> args, const std::set<std::string>& bools = {}) {
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  return Flags::Parse(static_cast<int>(argv.size()), argv.data(), bools);
}

// Reads the flags the way a command does.
void ReadServeLike(Flags* f) {
  (void)f->GetRequiredString("model", "the model directory");
  (void)f->GetInt("port", 8080, "TCP port");
  (void)f->GetDouble("drain-seconds", 30.0, "seconds to drain");
  (void)f->GetString("host", "127.0.0.1", "address to listen on");
  (void)f->GetString("api-key", "", "keys (none: open)");
  (void)f->GetBool("log-prompts", "log prompts");
}

bool Contains(const std::string& text, const std::string& want) {
  return text.find(want) != std::string::npos;
}

TEST(Flags, UsageListsEveryFlagWithDescriptionAndDefault) {
  Flags f = ParseArgs({"serve", "--help"}, {"log-prompts"});
  EXPECT_TRUE(f.help_requested());  // --help is not a flag needing a value
  ReadServeLike(&f);
  const std::string usage = f.Usage();
  EXPECT_TRUE(Contains(usage, "usage: kvfork serve --model VALUE [flags]\n")) << usage;
  // One column for the descriptions: the longest head is "--drain-seconds X".
  EXPECT_TRUE(Contains(usage, "\n  --model VALUE      the model directory (required)\n")) << usage;
  EXPECT_TRUE(Contains(usage, "\n  --port N           TCP port (default 8080)\n")) << usage;
  EXPECT_TRUE(Contains(usage, "\n  --drain-seconds X  seconds to drain (default 30)\n")) << usage;
  EXPECT_TRUE(Contains(usage, "\n  --host VALUE       address to listen on (default 127.0.0.1)\n"))
      << usage;
  EXPECT_TRUE(Contains(usage, "\n  --api-key VALUE    keys (none: open)\n")) << usage;
  EXPECT_TRUE(Contains(usage, "\n  --log-prompts      log prompts\n")) << usage;
  EXPECT_TRUE(Contains(usage, "\n  --help             print this list and exit\n")) << usage;
  EXPECT_EXIT((void)f.Finish(), ::testing::ExitedWithCode(0), "");
}

TEST(Flags, HelpReturnsDefaultsWhateverElseIsGiven) {
  Flags f = ParseArgs({"serve", "--port", "abc", "--nonsense", "1", "-h"});
  EXPECT_EQ(f.GetInt("port", 8080, "TCP port"), 8080);
  EXPECT_EQ(f.GetRequiredString("model", "m"), "");
  EXPECT_EXIT((void)f.Finish(), ::testing::ExitedWithCode(0), "");
}

TEST(Flags, ValuesAndPositionals) {
  Flags f = ParseArgs({"x", "--port=9", "--host", "h", "--ratio", "0.5", "--on", "a", "b"}, {"on"});
  EXPECT_EQ(f.GetInt("port", 1, "p"), 9);
  EXPECT_EQ(f.GetString("host", "", "h"), "h");
  EXPECT_EQ(f.GetDouble("ratio", 1.0, "r"), 0.5);
  EXPECT_TRUE(f.GetBool("on", "o"));
  EXPECT_FALSE(f.GetBool("off", "o"));
  EXPECT_EQ(f.positional(), (std::vector<std::string>{"a", "b"}));
  EXPECT_TRUE(f.Finish().ok());
}

TEST(Flags, MissingRequiredFlagFailsWithTheWholeUsage) {
  Flags f = ParseArgs({"serve", "--port", "9"});
  ReadServeLike(&f);
  Status s = f.Finish();
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.message().rfind("missing required flag --model\n\nusage: kvfork serve", 0), 0u)
      << s.message();
  // Flags read after the required one are listed too.
  EXPECT_TRUE(Contains(s.message(), "--log-prompts")) << s.message();
}

TEST(Flags, BadValuesFailWithTheWholeUsage) {
  for (const auto& [args, error] : std::vector<std::pair<std::vector<std::string>, std::string>>{
           {{"serve", "--model", "m", "--port", "80x"}, "flag --port: '80x' is not an integer"},
           {{"serve", "--model", "m", "--drain-seconds", "soon"},
            "flag --drain-seconds: 'soon' is not a number"},
           {{"serve", "--model", "m", "--log-prompts=maybe"},
            "flag --log-prompts: 'maybe' is not true/false"},
           {{"serve", "--model", "m", "--port"}, "flag --port needs a value"}}) {
    Flags f = ParseArgs(args, {"log-prompts"});
    ReadServeLike(&f);
    Status s = f.Finish();
    ASSERT_FALSE(s.ok()) << error;
    EXPECT_EQ(s.message().rfind(error, 0), 0u) << s.message();
    EXPECT_TRUE(Contains(s.message(), "\n\nusage: kvfork serve")) << s.message();
    EXPECT_TRUE(Contains(s.message(), "--log-prompts      log prompts")) << s.message();
  }
}

TEST(Flags, UnknownFlagIsNamedWithTheNearestOne) {
  Flags f = ParseArgs({"serve", "--model", "m", "--prot", "9", "--frobnicate", "1"});
  ReadServeLike(&f);
  Status s = f.Finish();
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(
      s.message().rfind("unknown flag --frobnicate, --prot (did you mean --port?)\n\nusage:", 0),
      0u)
      << s.message();
  // Last on the line, a flag nobody reads is unknown, not one that "needs a value".
  Flags g = ParseArgs({"serve", "--model", "m", "--log-promtps"}, {"log-prompts"});
  ReadServeLike(&g);
  s = g.Finish();
  EXPECT_EQ(s.message().rfind("unknown flag --log-promtps (did you mean --log-prompts?)", 0), 0u)
      << s.message();
}

TEST(Flags, PositionalDescription) {
  Flags f = ParseArgs({"tokenize"});
  f.DescribePositional("TEXT...", "the text");
  (void)f.GetRequiredString("model", "m");
  EXPECT_TRUE(Contains(f.Usage(),
                       "usage: kvfork tokenize --model VALUE [flags] TEXT...\n"
                       "  TEXT...: the text\n"))
      << f.Usage();
}

}  // namespace
}  // namespace kvfork::cli
