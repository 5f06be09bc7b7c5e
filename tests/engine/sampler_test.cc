#include "engine/sampler.h"

#include <gtest/gtest.h>

#include <algorithm>
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
  EXPECT_EQ(s.Sample(logits)->token, 1);
  auto l = RandomLogits(1000, 7);
  EXPECT_EQ(s.Sample(l)->token, Argmax(l));
}

TEST(Sampler, LogprobIsLogSoftmaxOfRawLogits) {
  SamplingParams p;
  p.temperature = 0.0;
  p.top_logprobs = 3;
  Sampler s(p, {}, 1);
  std::vector<float> logits = {1.0f, 2.0f, 0.0f, 4.0f};
  SampleResult r = *s.Sample(logits);
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
    for (auto& r : rows) out.push_back(s.Sample(r)->token);
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
  for (int i = 0; i < 600; ++i) seen[s.Sample(l)->token]++;
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
  for (int i = 0; i < 2000; ++i) seen[s.Sample(l)->token]++;
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
  for (int i = 0; i < 2000; ++i) seen[s.Sample(l)->token]++;
  EXPECT_EQ(seen.count(2), 0u);
  EXPECT_GT(seen[1], 400);
}

TEST(Sampler, SamplingMatchesDistribution) {
  std::vector<float> l = {std::log(0.7f), std::log(0.2f), std::log(0.1f)};
  SamplingParams p;
  Sampler s(p, {}, 11);
  std::vector<int> c(3);
  const int n = 20000;
  for (int i = 0; i < n; ++i) c[s.Sample(l)->token]++;
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
    EXPECT_EQ(s.Sample(l)->token, 2);
  }
  {
    SamplingParams p;
    p.temperature = 0;
    p.frequency_penalty = 2.0;  // token 0 after once: 5-2=3 < 4
    Sampler s(p, {}, 1);
    EXPECT_EQ(s.Sample(l)->token, 0);
    EXPECT_EQ(s.Sample(l)->token, 1);
    // now 0: 3, 1: 2, 2: 3; the tie goes to the lower id
    EXPECT_EQ(s.Sample(l)->token, 0);
  }
  {
    SamplingParams p;
    p.temperature = 0;
    p.repetition_penalty = 2.0;  // prompt token 0: 5/2 = 2.5 < 4
    std::vector<int32_t> prompt = {0};
    Sampler s(p, prompt, 1);
    EXPECT_EQ(s.Sample(l)->token, 1);
  }
  {
    SamplingParams p;
    p.temperature = 0;
    p.presence_penalty = 1.5;  // 0 -> 3.5 < 4
    Sampler s(p, {}, 1);
    EXPECT_EQ(s.Sample(l)->token, 0);
    EXPECT_EQ(s.Sample(l)->token, 1);
  }
}

// The sampler's algorithm written the plain way (full copy, scan argmax,
// std::sort of every candidate): the optimized Sampler must pick the same
// token for the same row, params and RNG state. Penalties and bias are left
// out; LogitBiasAndPenalties covers them.
class PlainSampler {
 public:
  PlainSampler(const SamplingParams& p, uint64_t seed) : p_(p), rng_(seed) {}

  int32_t Sample(const std::vector<float>& logits) {
    std::vector<float> x = logits;
    const int vocab = static_cast<int>(x.size());
    if (p_.temperature < kGreedyBelowTemperature || p_.top_k == 1) return Argmax(x);
    const float inv_t = static_cast<float>(1.0 / p_.temperature);
    float max_x = -INFINITY;
    for (float v : x) max_x = std::max(max_x, v);
    std::vector<std::pair<float, int32_t>> c;
    for (int i = 0; i < vocab; ++i) {
      const float e = std::exp((x[i] - max_x) * inv_t);
      if (e > 0.0f) c.emplace_back(e, i);
    }
    auto better = [](const std::pair<float, int32_t>& a, const std::pair<float, int32_t>& b) {
      return a.first != b.first ? a.first > b.first : a.second < b.second;
    };
    bool sorted = false;
    if (p_.top_k > 0 && p_.top_k < static_cast<int64_t>(c.size())) {
      std::sort(c.begin(), c.end(), better);
      c.resize(p_.top_k);
      sorted = true;
    }
    if ((p_.top_p < 1.0 || p_.min_p > 0.0) && !sorted) std::sort(c.begin(), c.end(), better);
    if (p_.min_p > 0.0) {
      const double threshold = p_.min_p * c.front().first;
      size_t keep = 1;
      while (keep < c.size() && c[keep].first >= threshold) ++keep;
      c.resize(keep);
    }
    if (p_.top_p < 1.0) {
      double total = 0.0;
      for (const auto& e : c) total += e.first;
      double cum = 0.0;
      size_t keep = 0;
      while (keep < c.size()) {
        cum += c[keep++].first;
        if (cum >= p_.top_p * total) break;
      }
      c.resize(keep);
    }
    double total = 0.0;
    for (const auto& e : c) total += e.first;
    const double u = static_cast<double>(rng_() >> 11) * 0x1.0p-53 * total;
    double cum = 0.0;
    for (const auto& e : c) {
      cum += e.first;
      if (u < cum) return e.second;
    }
    return c.back().second;
  }

 private:
  SamplingParams p_;
  std::mt19937_64 rng_;
};

TEST(Sampler, SameTokensAsThePlainAlgorithm) {
  // Rows with many exact ties (logits on a coarse grid) and rows without;
  // vocab large enough that the radix sort runs every digit pass.
  std::vector<std::vector<float>> rows;
  for (int i = 0; i < 6; ++i) {
    std::vector<float> r = RandomLogits(8192, 500 + i);
    if (i % 2 == 0)
      for (float& v : r) v = std::round(v * 4.0f) / 4.0f;
    if (i % 3 == 0) r[i * 7] = -INFINITY;  // a token that can never be drawn
    rows.push_back(r);
  }
  std::vector<SamplingParams> params;
  for (double t : {0.0, 0.3, 1.0, 1.7}) {
    for (int mode = 0; mode < 6; ++mode) {
      SamplingParams p;
      p.temperature = t;
      if (mode == 1) p.top_p = 0.9;
      if (mode == 2) p.min_p = 0.05;
      if (mode == 3) p.top_k = 40;
      if (mode == 4) p.top_k = 300, p.top_p = 0.5;
      if (mode == 5) p.top_p = 0.999, p.min_p = 0.001;
      params.push_back(p);
    }
  }
  for (size_t pi = 0; pi < params.size(); ++pi) {
    for (uint64_t seed : {1u, 2u}) {
      Sampler fast(params[pi], {}, seed);
      PlainSampler plain(params[pi], seed);
      for (int rep = 0; rep < 2; ++rep)
        for (size_t r = 0; r < rows.size(); ++r)
          ASSERT_EQ(fast.Sample(rows[r])->token, plain.Sample(rows[r]))
              << "params " << pi << " seed " << seed << " row " << r;
    }
  }
}

TEST(Sampler, NonFiniteRowsAreAnErrorNamingTheToken) {
  for (double t : {0.0, 1.0}) {
    SamplingParams p;
    p.temperature = t;
    Sampler s(p, {}, 1);
    std::vector<float> l(100, 1.0f);
    l[50] = 2.0f;
    l[3] = NAN;
    StatusOr<SampleResult> r = s.Sample(l);
    ASSERT_FALSE(r.ok());
    EXPECT_EQ(r.status().code(), StatusCode::kInternal);
    EXPECT_NE(r.status().message().find("NaN) for token 3"), std::string::npos)
        << r.status().message();
    l[3] = 1.0f;
    l[97] = INFINITY;
    r = s.Sample(l);
    ASSERT_FALSE(r.ok());
    EXPECT_NE(r.status().message().find("+Inf) for token 97"), std::string::npos)
        << r.status().message();
    std::vector<float> none(40, -INFINITY);
    EXPECT_FALSE(s.Sample(none).ok());
    // -Inf alone is a token that can never be drawn, not an error.
    l[97] = -INFINITY;
    ASSERT_TRUE(s.Sample(l).ok());
    if (t == 0.0) {
      EXPECT_EQ(s.Sample(l)->token, 50);
    }
    EXPECT_EQ(s.num_generated(), t == 0.0 ? 2 : 1);  // failed samples record nothing
  }
}

// Every value the request validation accepts gives a token from a finite
// row: the crash reproductions (temperature 1e-38, 3e-39, 1e-45,
// 1e-300; repetition_penalty 1e-40, 5e-324) and the other extremes.
TEST(Sampler, ExtremeAcceptedParamsAlwaysGiveAToken) {
  std::vector<std::vector<float>> rows = {RandomLogits(512, 3), RandomLogits(512, 4)};
  rows.push_back(std::vector<float>(512, 0.0f));  // all ties, exact zeros (0 * Inf = NaN)
  std::vector<float> huge = RandomLogits(512, 5);
  for (float& v : huge) v *= 1e37f;  // finite, near the float range's edge
  rows.push_back(huge);
  std::vector<float> holes = RandomLogits(512, 6);
  for (int i = 0; i < 512; i += 2) holes[i] = -INFINITY;
  rows.push_back(holes);
  const std::vector<int32_t> prompt = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15};
  for (double t : {0.0, 5e-324, 1e-300, 1e-45, 3e-39, 1e-38, 1e-6, 1e-5, 0.01, 1.0, 2.0, 1e30,
                   1e300, 1.7976931348623157e308}) {
    for (double rp : {5e-324, 1e-40, 1e-3, 1.0, 1.3, 1e10, 1e300}) {
      for (int mode = 0; mode < 4; ++mode) {
        SamplingParams p;
        p.temperature = t;
        p.repetition_penalty = rp;
        p.presence_penalty = mode == 1 ? 2.0 : -2.0;
        p.frequency_penalty = mode == 1 ? -2.0 : 2.0;
        p.logit_bias = {{1, 100.0f}, {2, -100.0f}, {0, 100.0f}};
        if (mode == 2) p.top_p = 1e-300, p.min_p = 1.0;
        if (mode == 3) p.top_k = 1 + mode, p.top_logprobs = 20;
        Sampler s(p, prompt, 7);
        for (int rep = 0; rep < 3; ++rep) {
          for (const auto& row : rows) {
            StatusOr<SampleResult> r = s.Sample(row);
            ASSERT_TRUE(r.ok()) << "t " << t << " rp " << rp << " mode " << mode << ": "
                                << r.status().ToString();
            ASSERT_GE(r->token, 0);
            ASSERT_LT(r->token, 512);
            ASSERT_NE(row[r->token], -INFINITY) << "drew an impossible token";
            if (p.top_logprobs >= 0) {
              ASSERT_TRUE(std::isfinite(r->logprob));
            }
          }
        }
      }
    }
  }
}

TEST(Sampler, ReportedLogprobsAreNeverMinusInfinity) {
  // The fuzz target's find: at a huge temperature a token whose
  // log-probability is -3.4e38 can be drawn, and float made it -Inf.
  SamplingParams p;
  p.temperature = 1e185;
  p.top_logprobs = 3;
  Sampler s(p, {}, 1);
  const std::vector<float> l = {-2.7e38f, 6.9e37f, -INFINITY};
  for (int i = 0; i < 20; ++i) {
    SampleResult r = *s.Sample(l);
    EXPECT_TRUE(std::isfinite(r.logprob));
    EXPECT_GE(r.logprob, kMinReportedLogprob);
    ASSERT_EQ(r.top_logprobs.size(), 3u);
    EXPECT_EQ(r.top_logprobs[2].token, 2);
    EXPECT_EQ(r.top_logprobs[2].logprob, static_cast<float>(kMinReportedLogprob));
  }
}

TEST(Sampler, TinyTemperatureIsGreedy) {
  const std::vector<float> l = RandomLogits(1000, 9);
  for (double t : {1e-38, 9.9e-6}) {
    SamplingParams p;
    p.temperature = t;
    Sampler s(p, {}, 1);
    EXPECT_TRUE(s.Cheap());
    for (int i = 0; i < 5; ++i) EXPECT_EQ(s.Sample(l)->token, Argmax(l));
  }
}

TEST(Sampler, RepetitionPenaltyIsClampedToItsDocumentedRange) {
  // Token 0 (seen in the prompt) at 5, token 1 at 0.04: a penalty of 1e-40
  // acts as 0.01 (5 / 0.01 = 500 still wins), 1e300 as 100 (5 / 100 = 0.05
  // still beats 0.04, where 5 / 1e300 would lose).
  const std::vector<float> l = {5.0f, 0.04f, -1.0f};
  const std::vector<int32_t> prompt = {0};
  for (double rp : {1e-40, 5e-324, 1e300}) {
    SamplingParams p;
    p.temperature = 0.0;
    p.repetition_penalty = rp;
    Sampler s(p, prompt, 1);
    EXPECT_EQ(s.Sample(l)->token, 0) << rp;
  }
  SamplingParams p;
  p.temperature = 0.0;
  p.repetition_penalty = 200.0;  // inside the float range but clamped: 5 / 100 > 0.04
  Sampler s(p, prompt, 1);
  EXPECT_EQ(s.Sample(l)->token, 0);
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
