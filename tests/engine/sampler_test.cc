#include "engine/sampler.h"

#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <random>
#include <vector>

namespace kvfork {
namespace {

std::vector<float> RandomLogits(int vocab, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> d(0.0f, 2.0f);
  std::vector<float> v(vocab);
  for (auto& x : v) x = d(rng);
  return v;
}

int Argmax(const std::vector<float>& v) {
  int best = 0;
  for (int i = 1; i < static_cast<int>(v.size()); ++i)
    if (v[i] > v[best]) best = i;
  return best;
}

TEST(Sampler, GreedyPicksArgmaxLowestIdOnTies) {
  SamplingParams p;
  p.temperature = 0.0;
  Sampler s(p, {}, 1);
  std::vector<float> logits = {0.5f, 3.0f, 1.0f, 3.0f};
  EXPECT_EQ(s.Sample(logits).token, 1);
  auto l = RandomLogits(1000, 7);
  EXPECT_EQ(s.Sample(l).token, Argmax(l));
}

TEST(Sampler, LogprobIsLogSoftmaxOfRawLogits) {
  SamplingParams p;
  p.temperature = 0.0;
  p.top_logprobs = 3;
  Sampler s(p, {}, 1);
  std::vector<float> logits = {1.0f, 2.0f, 0.0f, 4.0f};
  SampleResult r = s.Sample(logits);
  double z = 0;
  for (float x : logits) z += std::exp(x);
  EXPECT_EQ(r.token, 3);
  EXPECT_NEAR(r.logprob, 4.0 - std::log(z), 1e-5);
  ASSERT_EQ(r.top_logprobs.size(), 3u);
  EXPECT_EQ(r.top_logprobs[0].token, 3);
  EXPECT_EQ(r.top_logprobs[1].token, 1);
  EXPECT_EQ(r.top_logprobs[2].token, 0);
  EXPECT_NEAR(r.top_logprobs[1].logprob, 2.0 - std::log(z), 1e-5);
}

TEST(Sampler, SameSeedSameTokensDifferentSeedDiffers) {
  SamplingParams p;
  p.temperature = 1.0;
  std::vector<std::vector<float>> rows;
  for (int i = 0; i < 50; ++i) rows.push_back(RandomLogits(500, 100 + i));
  auto run = [&](uint64_t seed) {
    Sampler s(p, {}, seed);
    std::vector<int32_t> out;
    for (auto& r : rows) out.push_back(s.Sample(r).token);
    return out;
  };
  EXPECT_EQ(run(42), run(42));
  EXPECT_NE(run(42), run(43));
}

TEST(Sampler, TopKRestrictsToKBest) {
  SamplingParams p;
  p.top_k = 3;
  auto l = RandomLogits(200, 3);
  std::vector<int> order(l.size());
  for (int i = 0; i < 200; ++i) order[i] = i;
  std::sort(order.begin(), order.end(), [&](int a, int b) { return l[a] > l[b]; });
  Sampler s(p, {}, 9);
  std::map<int, int> seen;
  for (int i = 0; i < 600; ++i) seen[s.Sample(l).token]++;
  for (auto& [t, c] : seen) EXPECT_TRUE(t == order[0] || t == order[1] || t == order[2]) << t;
  EXPECT_GE(seen.size(), 2u);
}

TEST(Sampler, TopPKeepsNucleus) {
  // probabilities 0.5, 0.3, 0.2 (as logits): top_p 0.6 keeps the first two.
  std::vector<float> l = {std::log(0.5f), std::log(0.3f), std::log(0.2f)};
  SamplingParams p;
  p.top_p = 0.6;
  Sampler s(p, {}, 5);
  std::map<int, int> seen;
  for (int i = 0; i < 2000; ++i) seen[s.Sample(l).token]++;
  EXPECT_EQ(seen.count(2), 0u);
  EXPECT_GT(seen[0], seen[1]);
  EXPECT_GT(seen[1], 400);
}

TEST(Sampler, MinPDropsUnlikely) {
  std::vector<float> l = {std::log(0.6f), std::log(0.35f), std::log(0.05f)};
  SamplingParams p;
  p.min_p = 0.2;  // threshold 0.12: token 2 goes
  Sampler s(p, {}, 5);
  std::map<int, int> seen;
  for (int i = 0; i < 2000; ++i) seen[s.Sample(l).token]++;
  EXPECT_EQ(seen.count(2), 0u);
  EXPECT_GT(seen[1], 400);
}

TEST(Sampler, SamplingMatchesDistribution) {
  std::vector<float> l = {std::log(0.7f), std::log(0.2f), std::log(0.1f)};
  SamplingParams p;
  Sampler s(p, {}, 11);
  std::vector<int> c(3);
  const int n = 20000;
  for (int i = 0; i < n; ++i) c[s.Sample(l).token]++;
  EXPECT_NEAR(c[0] / double(n), 0.7, 0.02);
  EXPECT_NEAR(c[1] / double(n), 0.2, 0.02);
  EXPECT_NEAR(c[2] / double(n), 0.1, 0.02);
}

TEST(Sampler, LogitBiasAndPenalties) {
  std::vector<float> l = {5.0f, 4.0f, 3.0f, -1.0f};
  {
    SamplingParams p;
    p.temperature = 0;
    p.logit_bias[2] = 10.0f;
    Sampler s(p, {}, 1);
    EXPECT_EQ(s.Sample(l).token, 2);
  }
  {
    SamplingParams p;
    p.temperature = 0;
    p.frequency_penalty = 2.0;  // token 0 after once: 5-2=3 < 4
    Sampler s(p, {}, 1);
    EXPECT_EQ(s.Sample(l).token, 0);
    EXPECT_EQ(s.Sample(l).token, 1);
    // now 0: 3, 1: 2, 2: 3; the tie goes to the lower id
    EXPECT_EQ(s.Sample(l).token, 0);
  }
  {
    SamplingParams p;
    p.temperature = 0;
    p.repetition_penalty = 2.0;  // prompt token 0: 5/2 = 2.5 < 4
    std::vector<int32_t> prompt = {0};
    Sampler s(p, prompt, 1);
    EXPECT_EQ(s.Sample(l).token, 1);
  }
  {
    SamplingParams p;
    p.temperature = 0;
    p.presence_penalty = 1.5;  // 0 -> 3.5 < 4
    Sampler s(p, {}, 1);
    EXPECT_EQ(s.Sample(l).token, 0);
    EXPECT_EQ(s.Sample(l).token, 1);
  }
}

TEST(Sampler, ChoiceSeeds) {
  SamplingParams p;
  p.seed = 77;
  EXPECT_EQ(Sampler::ChoiceSeed(p, 5, 0), 77u);
  EXPECT_NE(Sampler::ChoiceSeed(p, 5, 1), 77u);
  EXPECT_EQ(Sampler::ChoiceSeed(p, 5, 1), Sampler::ChoiceSeed(p, 6, 1));
  p.seed.reset();
  EXPECT_EQ(Sampler::ChoiceSeed(p, 5, 0), 5u);
}

}  // namespace
}  // namespace kvfork
