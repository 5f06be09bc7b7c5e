// core/progress.h: the report on a terminal (forced, and a real pseudo-
// terminal), silence on a pipe and a file, the throttle, the final newline,
// and the byte units.
#include "core/progress.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <stdlib.h>
#include <unistd.h>

#include <cstdio>
#include <string>

namespace kvfork {
namespace {

// A FILE* whose bytes the test reads back (not a terminal: fileno is -1).
class Captured {
 public:
  Captured() : file_(open_memstream(&data_, &size_)) {}
  ~Captured() {
    if (file_ != nullptr) std::fclose(file_);
    free(data_);
  }
  FILE* file() { return file_; }
  std::string Text() {
    std::fflush(file_);
    return std::string(data_, size_);
  }

 private:
  char* data_ = nullptr;
  size_t size_ = 0;
  FILE* file_;
};

ProgressOptions Forced(FILE* out, const std::string& label, int64_t total) {
  ProgressOptions o;
  o.label = label;
  o.total = total;
  o.out = out;
  o.enabled = true;  // as if `out` were a terminal
  o.min_interval_ns = 0;
  return o;
}

TEST(Progress, OnATerminalRewritesOneLineAndEndsWithANewline) {
  Captured c;
  {
    Progress p(Forced(c.file(), "round", 5));
    EXPECT_TRUE(p.enabled());
    p.Update(1);
    p.Update(2, "8 seqs");
    p.Finish();
    p.Finish();   // once only
    p.Update(3);  // after Finish: nothing
  }
  EXPECT_EQ(c.Text(), "\rround: 1/5   20%\rround: 2/5   40%  8 seqs\rround: 2/5   40%  8 seqs\n");
}

TEST(Progress, DestructorFinishes) {
  Captured c;
  {
    Progress p(Forced(c.file(), "round", 2));
    p.Update(2);
  }
  EXPECT_EQ(c.Text(), "\rround: 2/2  100%\rround: 2/2  100%\n");
}

TEST(Progress, AShorterLineBlanksTheRestOfTheLongerOne) {
  Captured c;
  Progress p(Forced(c.file(), "x", 0));
  p.Update(1, "a long note");
  p.Update(2, "");
  const std::string first = "\rx: 1  a long note";
  EXPECT_EQ(c.Text(), first + "\rx: 2" + std::string(first.size() - 5, ' '));
}

TEST(Progress, ThrottledToTheInterval) {
  Captured c;
  ProgressOptions o = Forced(c.file(), "n", 1000);
  o.min_interval_ns = int64_t{3600} * 1'000'000'000;  // nothing after the first within the test
  Progress p(o);
  for (int64_t i = 1; i <= 1000; ++i) p.Update(i);
  p.Finish();  // always shows where it ended
  EXPECT_EQ(c.Text(), "\rn: 1/1000    0%\rn: 1000/1000  100%\n");
}

TEST(Progress, Bytes) {
  Captured c;
  ProgressOptions o = Forced(c.file(), "loading m", int64_t{3} << 30);
  o.bytes = true;
  {
    Progress p(o);
    p.Update(int64_t{3} << 29, "7/10 tensors");
  }
  EXPECT_EQ(c.Text(),
            "\rloading m: 1.50 GiB / 3.00 GiB   50%  7/10 tensors"
            "\rloading m: 1.50 GiB / 3.00 GiB   50%  7/10 tensors\n");
  EXPECT_EQ(FormatBytes(512), "512 B");
  EXPECT_EQ(FormatBytes(1536), "1.5 KiB");
  EXPECT_EQ(FormatBytes(int64_t{350} << 20), "350.0 MiB");
}

TEST(Progress, SilentWhenNotATerminal) {
  Captured c;  // a memory stream
  ProgressOptions o;
  o.label = "quiet";
  o.total = 3;
  o.out = c.file();
  o.min_interval_ns = 0;
  {
    Progress p(o);
    EXPECT_FALSE(p.enabled());
    p.Update(1);
    p.Update(3);
  }
  EXPECT_EQ(c.Text(), "");

  int fds[2];
  ASSERT_EQ(pipe(fds), 0);
  FILE* w = fdopen(fds[1], "w");
  ASSERT_NE(w, nullptr);
  o.out = w;
  {
    Progress p(o);
    EXPECT_FALSE(p.enabled());
    p.Update(2);
  }
  std::fclose(w);
  char buf[16];
  EXPECT_EQ(read(fds[0], buf, sizeof(buf)), 0);  // nothing was written to the pipe
  close(fds[0]);

  o.out = stderr;
  o.enabled = false;  // forced off even where stderr is a terminal
  Progress off(o);
  EXPECT_FALSE(off.enabled());
}

TEST(Progress, OnByDefaultOnARealTerminal) {
  const int master = posix_openpt(O_RDWR | O_NOCTTY);
  if (master < 0 || grantpt(master) != 0 || unlockpt(master) != 0)
    GTEST_SKIP() << "no pseudo-terminal here";
  const int slave = open(ptsname(master), O_RDWR | O_NOCTTY);
  ASSERT_GE(slave, 0);
  FILE* tty = fdopen(slave, "w");
  ASSERT_NE(tty, nullptr);
  ProgressOptions o;
  o.label = "t";
  o.out = tty;
  {
    Progress p(o);
    EXPECT_TRUE(p.enabled());
    p.Update(1);
  }
  std::fclose(tty);
  char buf[64] = {};
  const ssize_t n = read(master, buf, sizeof(buf) - 1);
  ASSERT_GT(n, 0);
  EXPECT_NE(std::string(buf, static_cast<size_t>(n)).find("t: 1"), std::string::npos);
  close(master);
}

}  // namespace
}  // namespace kvfork
