#include "engine/stop_matcher.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace kvfork {
namespace {

// Feeds deltas, returns all emitted text and whether it stopped.
std::pair<std::string, bool> Match(std::vector<std::string> stops, std::vector<std::string> deltas) {
  StopMatcher m(std::move(stops));
  std::string out;
  for (const auto& d : deltas) {
    auto r = m.Feed(d);
    out += r.emit;
    if (r.stopped) return {out, true};
  }
  out += m.Flush();
  return {out, false};
}

TEST(StopMatcher, NoStopsPassesThrough) {
  EXPECT_EQ(Match({}, {"a", "b", "c"}), std::make_pair(std::string("abc"), false));
}

TEST(StopMatcher, StopSpanningTokensIsNotEmitted) {
  EXPECT_EQ(Match({"END"}, {"hello E", "N", "D more"}), std::make_pair(std::string("hello "), true));
}

TEST(StopMatcher, StopAtVeryStart) {
  EXPECT_EQ(Match({"##"}, {"#", "#", "x"}), std::make_pair(std::string(""), true));
}

TEST(StopMatcher, HoldsBackPossiblePrefixThenReleases) {
  StopMatcher m({"abc"});
  auto r = m.Feed("xxab");
  EXPECT_EQ(r.emit, "xx");
  EXPECT_FALSE(r.stopped);
  r = m.Feed("d");
  EXPECT_EQ(r.emit, "abd");
  r = m.Feed("a");
  EXPECT_EQ(r.emit, "");
  EXPECT_EQ(m.Flush(), "a");
}

TEST(StopMatcher, EarliestOfSeveralWins) {
  EXPECT_EQ(Match({"world", "lo"}, {"hello world"}), std::make_pair(std::string("hel"), true));
}

TEST(StopMatcher, OverlappingPrefixes) {
  // "aab" after "a", "a", "a", "b": the match starts at the second a.
  EXPECT_EQ(Match({"aab"}, {"a", "a", "a", "b"}), std::make_pair(std::string("a"), true));
}

TEST(StopMatcher, MultibyteText) {
  EXPECT_EQ(Match({"é!"}, {"caf", "é", "!", "z"}), std::make_pair(std::string("caf"), true));
  EXPECT_EQ(Match({"é!"}, {"caf", "é", "?"}), std::make_pair(std::string("café?"), false));
}

TEST(StopMatcher, NothingAfterStop) {
  StopMatcher m({"x"});
  EXPECT_TRUE(m.Feed("ax").stopped);
  EXPECT_EQ(m.Feed("more").emit, "");
  EXPECT_EQ(m.Flush(), "");
}

}  // namespace
}  // namespace kvfork
