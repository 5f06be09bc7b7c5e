// The flag parser's usage: `--help` lists every flag a command reads with
// its default and exits 0; a missing required flag fails with that list.
// Then the real binary: `kvfork <command> --help` for each command, and
// `kvfork serve` without --model.
#include "cli/flags.h"

#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <string>
#include <vector>

#include "test_env.h"

namespace kvfork::cli {
namespace {

StatusOr<Flags> ParseArgs(std::vector<std::string> args, const std::set<std::string>& bools = {}) {
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  return Flags::Parse(static_cast<int>(argv.size()), argv.data(), bools);
}

// Reads the flags the way a command does.
void ReadServeLike(Flags* f) {
  (void)f->GetRequiredString("model");
  (void)f->GetInt("port", 8080);
  (void)f->GetDouble("drain-seconds", 30.0);
  (void)f->GetString("host", "127.0.0.1");
  (void)f->GetBool("log-prompts");
}

TEST(Flags, HelpIsNotAFlagNeedingAValue) {
  StatusOr<Flags> f = ParseArgs({"serve", "--help"});
  ASSERT_TRUE(f.ok()) << f.status().ToString();  // was "flag --help needs a value"
  EXPECT_TRUE(f->help_requested());
  ReadServeLike(&*f);
  const std::string usage = f->Usage();
  EXPECT_NE(usage.find("usage: kvfork serve --model VALUE [flags]"), std::string::npos) << usage;
  EXPECT_NE(usage.find("--port  (default 8080)"), std::string::npos) << usage;
  EXPECT_NE(usage.find("--drain-seconds  (default 30)"), std::string::npos) << usage;
  EXPECT_NE(usage.find("--host  (default 127.0.0.1)"), std::string::npos) << usage;
  EXPECT_NE(usage.find("--log-prompts  (switch"), std::string::npos) << usage;
  EXPECT_NE(usage.find("--model  (required)"), std::string::npos) << usage;
  EXPECT_EXIT((void)f->Finish(), ::testing::ExitedWithCode(0), "");
}

TEST(Flags, HelpIgnoresBadValues) {
  StatusOr<Flags> f = ParseArgs({"serve", "--port", "abc", "-h"});
  ASSERT_TRUE(f.ok());
  StatusOr<int64_t> port = f->GetInt("port", 8080);
  ASSERT_TRUE(port.ok());
  EXPECT_EQ(*port, 8080);
}

TEST(Flags, MissingRequiredFlagFailsWithTheUsage) {
  StatusOr<Flags> f = ParseArgs({"serve", "--port", "9"});
  ASSERT_TRUE(f.ok());
  ReadServeLike(&*f);
  Status s = f->Finish();
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("missing required flag --model"), std::string::npos);
  EXPECT_NE(s.message().find("--port  (default 8080)"), std::string::npos) << s.message();
}

TEST(Flags, UnknownFlagStillAnError) {
  StatusOr<Flags> f = ParseArgs({"serve", "--model", "m", "--prot", "9"});
  ASSERT_TRUE(f.ok());
  ReadServeLike(&*f);
  Status s = f->Finish();
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("--prot"), std::string::npos);
}

struct CommandRun {
  int exit_code = -1;
  std::string output;  // stdout, then stderr
};

CommandRun RunKvfork(const std::string& args) {
  CommandRun r;
  const std::string cmd = testing::KvforkBin() + " " + args + " 2>/tmp/kvfork_flags_test_err_" +
                          std::to_string(getpid());
  FILE* p = popen(cmd.c_str(), "r");
  if (p == nullptr) return r;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof(buf), p)) > 0) r.output.append(buf, n);
  const int status = pclose(p);
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  const std::string err_path = "/tmp/kvfork_flags_test_err_" + std::to_string(getpid());
  if (FILE* e = fopen(err_path.c_str(), "r")) {
    while ((n = fread(buf, 1, sizeof(buf), e)) > 0) r.output.append(buf, n);
    fclose(e);
  }
  std::remove(err_path.c_str());
  return r;
}

TEST(KvforkBinary, CommandHelpListsFlagsAndExitsZero) {
  CommandRun serve = RunKvfork("serve --help");
  EXPECT_EQ(serve.exit_code, 0) << serve.output;
  for (const char* want : {"usage: kvfork serve", "--model  (required)", "--port  (default 8080)",
                           "--special-tokens-in-content  (default text)", "--no-prefix-cache"})
    EXPECT_NE(serve.output.find(want), std::string::npos) << want << " in:\n" << serve.output;
  for (const char* cmd :
       {"generate --help", "make-model --help", "tokenize --help", "export-gguf --help",
        "bench --help", "bench kernels --help", "bench engine -h"}) {
    CommandRun r = RunKvfork(cmd);
    EXPECT_EQ(r.exit_code, 0) << cmd << ":\n" << r.output;
    EXPECT_NE(r.output.find("usage: kvfork"), std::string::npos) << cmd << ":\n" << r.output;
  }
}

TEST(KvforkBinary, ServeWithoutModelPrintsTheUsage) {
  CommandRun r = RunKvfork("serve");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.output.find("missing required flag --model"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("--port  (default 8080)"), std::string::npos) << r.output;
}

}  // namespace
}  // namespace kvfork::cli
