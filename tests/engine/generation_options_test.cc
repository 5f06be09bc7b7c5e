// The pieces of min_tokens, include_stop_str_in_output and prompt logprobs
// that need no model: the sampler's min_tokens mask, the stop matcher's
// include / may_stop modes, LogprobsAt against the sampler, validation.
#include <gtest/gtest.h>

#include <limits>

#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "engine/logprobs.h"
#include "engine/request_validation.h"
#include "engine/sampler.h"
#include "engine/stop_matcher.h"

namespace kvfork {
namespace {

std::vector<float> RandomRow(int vocab, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> d(0.0f, 3.0f);
  std::vector<float> v(vocab);
  for (auto& x : v) x = d(rng);
  return v;
}

bool SameBits(float a, float b) { return std::memcmp(&a, &b, sizeof(a)) == 0; }

TEST(MinTokens, SamplerNeverPicksSuppressedIdsBeforeMinTokens) {
  for (double temperature : {0.0, 1.0}) {
    SamplingParams p;
    p.temperature = temperature;
    p.min_tokens = 3;
    Sampler s(p, {}, 7);
    s.SuppressUntilMinTokens({2, 5});
    // Token 2 dominates the row; 5 is next.
    std::vector<float> row = {0.0f, 0.0f, 50.0f, 0.0f, 0.0f, 40.0f, 1.0f};
    for (int i = 0; i < 3; ++i) {
      const int32_t t = s.Sample(row)->token;
      EXPECT_NE(t, 2) << "temperature " << temperature << " token " << i;
      EXPECT_NE(t, 5) << "temperature " << temperature << " token " << i;
    }
    EXPECT_EQ(s.Sample(row)->token, 2) << "after min_tokens the row decides";
  }
}

TEST(MinTokens, LogprobsStayRawWhileSuppressing) {
  // vLLM reports logprobs of the model's row, before any processor.
  SamplingParams p;
  p.temperature = 0.0;
  p.min_tokens = 1;
  p.top_logprobs = 2;
  Sampler s(p, {}, 1);
  s.SuppressUntilMinTokens({1});
  const std::vector<float> row = {1.0f, 9.0f, 2.0f};
  const SampleResult r = s.Sample(row).value();
  EXPECT_EQ(r.token, 2);
  ASSERT_EQ(r.top_logprobs.size(), 2u);
  EXPECT_EQ(r.top_logprobs[0].token, 1);
  const PromptTokenLogprob ref = LogprobsAt(row, 2, 2);
  EXPECT_TRUE(SameBits(r.logprob, ref.chosen.logprob));
}

std::pair<std::string, bool> FeedAll(StopMatcher& m, const std::vector<std::string>& deltas,
                                     int64_t min_deltas) {
  std::string out;
  for (size_t i = 0; i < deltas.size(); ++i) {
    auto r = m.Feed(deltas[i], static_cast<int64_t>(i) + 1 >= min_deltas);
    out += r.emit;
    if (r.stopped) return {out, true};
  }
  return {out + m.Flush(), false};
}

TEST(StopMatcherModes, IncludeStopKeepsTheMatchedString) {
  StopMatcher m({"END", "N"}, /*include_stop=*/true);
  EXPECT_EQ(FeedAll(m, {"ab E", "ND tail"}, 0), std::make_pair(std::string("ab END"), true));
  StopMatcher first({"xy", "x"}, true);  // same position: the first listed
  EXPECT_EQ(FeedAll(first, {"axyz"}, 0), std::make_pair(std::string("axy"), true));
}

TEST(StopMatcherModes, NoStopBeforeMayStopButASpanningOneIsFound) {
  // "END" whole in the first delta passes; one that ends in the third is found.
  StopMatcher m({"END"});
  EXPECT_EQ(FeedAll(m, {"aEND", "xE", "ND!"}, 3), std::make_pair(std::string("aENDx"), true));
  StopMatcher none({"END"});
  EXPECT_EQ(FeedAll(none, {"aEND", "bEND"}, 5), std::make_pair(std::string("aENDbEND"), false));
}

TEST(PromptLogprobs, LogprobsAtMatchesTheSamplersBits) {
  for (uint64_t seed = 1; seed <= 5; ++seed) {
    std::vector<float> row = RandomRow(997, seed);
    // Odd seeds: many ties (the top-k order breaks them by token id).
    if (seed % 2 == 1)
      for (float& v : row) v = std::round(v);
    SamplingParams p;
    p.temperature = 0.0;
    p.top_logprobs = 5;
    Sampler s(p, {}, 1);
    const SampleResult r = s.Sample(row).value();
    const PromptTokenLogprob lp = LogprobsAt(row, r.token, 5);
    EXPECT_EQ(lp.chosen.token, r.token);
    EXPECT_TRUE(SameBits(lp.chosen.logprob, r.logprob)) << seed;
    ASSERT_EQ(lp.top.size(), r.top_logprobs.size());
    for (size_t i = 0; i < lp.top.size(); ++i) {
      EXPECT_EQ(lp.top[i].token, r.top_logprobs[i].token);
      EXPECT_TRUE(SameBits(lp.top[i].logprob, r.top_logprobs[i].logprob));
    }
    // And it is log_softmax: the probabilities sum to 1.
    double sum = 0.0;
    for (int32_t t = 0; t < 997; ++t) sum += std::exp(LogprobsAt(row, t, 0).chosen.logprob);
    EXPECT_NEAR(sum, 1.0, 1e-4);
  }
}

TEST(Validation, MinTokensAndPromptLogprobsRanges) {
  RequestLimits limits;
  limits.vocab_size = 100;
  limits.max_context = 1000;
  Request r;
  r.id = "x";
  r.prompt_tokens = {1, 2, 3};
  r.sampling.max_tokens = 4;
  r.sampling.min_tokens = 4;
  EXPECT_TRUE(ValidateRequest(r, limits).ok());
  r.sampling.min_tokens = 5;
  Status st = ValidateRequest(r, limits);
  EXPECT_FALSE(st.ok());
  EXPECT_NE(st.ToString().find("min_tokens"), std::string::npos) << st.ToString();
  r.sampling.min_tokens = -1;
  EXPECT_FALSE(ValidateRequest(r, limits).ok());
  r.sampling.min_tokens = 0;
  r.sampling.prompt_logprobs = 21;
  st = ValidateRequest(r, limits);
  EXPECT_NE(st.ToString().find("prompt_logprobs"), std::string::npos) << st.ToString();
  r.sampling.prompt_logprobs = 20;
  EXPECT_TRUE(ValidateRequest(r, limits).ok());
}

// A prompt token whose logit is -Inf reports the sampler's floor, not -Inf
// (which JSON cannot hold), as a generated token does.
TEST(PromptLogprobs, NonFiniteLowLogprobsAreFlooredAsTheSamplerReportsThem) {
  const float inf = std::numeric_limits<float>::infinity();
  const std::vector<float> row = {0.0f, -inf, 1.0f};
  const PromptTokenLogprob lp = LogprobsAt(row, 1, 3);
  EXPECT_EQ(lp.chosen.logprob, static_cast<float>(kMinReportedLogprob));
  ASSERT_EQ(lp.top.size(), 3u);
  EXPECT_EQ(lp.top[2].token, 1);
  EXPECT_EQ(lp.top[2].logprob, static_cast<float>(kMinReportedLogprob));
}

}  // namespace
}  // namespace kvfork
