// Randomized property test: long random runs of admit (prompts drawn to share
// prefixes), chunked prefill, decode, fork and release under small pools,
// with many sequences holding blocks at once, calling Check() after every
// operation. At the end, with everything released, used == 0 and
// free + cached == total; every running sequence always holds the pattern of
// its own tokens (no block was overwritten while shared).
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

#include "kv/kv_test_util.h"

namespace kvfork {
namespace {

struct Config {
  const char* name;
  KvBackend backend;
  bool prefix_cache;
  bool tail_copy;
  int64_t blocks;
  // Layer groups (paged): global layers and one sliding layer of window 6
  // (a block is 4 positions, so windows cut the 1-31-token prompts); -1 = none.
  int global_layers = -1;
};

int64_t OpsFromEnv(int64_t fallback) {
  const char* v = std::getenv("KVFORK_KV_PROPERTY_OPS");
  return v != nullptr ? std::atoll(v) : fallback;
}

void RunProperty(const Config& cfg, int64_t num_ops, uint32_t seed) {
  KvCacheOptions o;
  o.layout = testing::TinyLayout();
  o.num_blocks = cfg.blocks;
  o.prefix_cache = cfg.prefix_cache;
  o.tail_copy = cfg.tail_copy;
  o.max_context = 48;
  if (cfg.global_layers >= 0) {
    o.groups = testing::TinyGroups(cfg.global_layers, 2 - cfg.global_layers, 6);
  }
  auto made = KvCache::Create(cfg.backend, o);
  ASSERT_TRUE(made.ok()) << made.status().ToString();
  KvCache& c = **made;
  std::mt19937 rng(seed);
  auto uni = [&](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); };

  // Prompts are drawn from a few "documents" and cut at random points, with
  // a small alphabet so blocks and tails collide often.
  std::vector<std::vector<int32_t>> docs(6);
  for (auto& d : docs)
    for (int i = 0; i < 40; ++i) d.push_back(uni(0, 3));
  const char* salts[] = {"", "", "", "t2"};

  struct Live {
    SeqId id;
    std::vector<int32_t> target;  // the tokens it will eventually hold
  };
  std::vector<Live> live;
  int64_t admitted = 0, exhausted = 0;
  for (int64_t op = 0; op < num_ops; ++op) {
    int kind = uni(0, 9);
    // Keep the number of holders bounded (sequences with nothing reserved
    // yet cost no blocks, so the pool alone does not bound them).
    if (live.size() > 24) kind = 9;
    if (kind <= 2 || live.empty()) {  // admit
      const auto& d = docs[uni(0, 5)];
      std::vector<int32_t> prompt(d.begin(), d.begin() + uni(1, 30));
      if (uni(0, 2) == 0) prompt.push_back(uni(0, 3));
      int64_t reserve = uni(0, 1) ? static_cast<int64_t>(prompt.size()) : uni(0, 4);
      KvCacheStats before = c.Stats();
      PrefixMatch m;
      StatusOr<SeqId> s = c.Admit(prompt, salts[uni(0, 3)], reserve, &m);
      if (s.ok()) {
        ++admitted;
        ASSERT_LE(m.num_reused_tokens, static_cast<int64_t>(prompt.size()) - 1);
        ASSERT_EQ(c.NumTokens(*s), m.num_reused_tokens);
        ASSERT_TRUE(testing::HoldsPattern(c, *s)) << "adopted KV differs at op " << op;
        live.push_back({*s, prompt});
      } else {
        ASSERT_EQ(s.status().code(), StatusCode::kResourceExhausted) << s.status().ToString();
        KvCacheStats after = c.Stats();
        ASSERT_EQ(after.blocks_free, before.blocks_free);
        ASSERT_EQ(after.blocks_cached, before.blocks_cached);
        for (size_t g = 0; g < after.sliding.size(); ++g) {
          ASSERT_EQ(after.sliding[g].blocks_free, before.sliding[g].blocks_free);
          ASSERT_EQ(after.sliding[g].blocks_cached, before.sliding[g].blocks_cached);
        }
        ++exhausted;
      }
    } else if (kind <= 6) {  // compute a chunk (prefill) or one decode token
      Live& l = live[uni(0, static_cast<int>(live.size()) - 1)];
      int64_t have = c.NumTokens(l.id);
      if (have >= static_cast<int64_t>(l.target.size())) l.target.push_back(uni(0, 3));
      int64_t n = std::min<int64_t>(uni(1, 9), static_cast<int64_t>(l.target.size()) - have);
      if (have + n > c.max_sequence_tokens()) continue;
      Status r = c.Reserve(l.id, have + n);
      if (!r.ok()) {
        ASSERT_EQ(r.code(), StatusCode::kResourceExhausted) << r.ToString();
        ++exhausted;
      } else {
        testing::FakeForward(c, l.id, l.target, have, n);
        std::vector<int32_t> chunk(l.target.begin() + have, l.target.begin() + have + n);
        ASSERT_TRUE(c.Append(l.id, chunk).ok());
        ASSERT_TRUE(testing::HoldsPattern(c, l.id)) << "KV corrupted at op " << op;
      }
    } else if (kind == 7) {  // fork
      Live& l = live[uni(0, static_cast<int>(live.size()) - 1)];
      StatusOr<SeqId> f = c.Fork(l.id);
      if (f.ok()) {
        std::vector<int32_t> t(c.Tokens(*f).begin(), c.Tokens(*f).end());
        ASSERT_TRUE(testing::HoldsPattern(c, *f));
        live.push_back({*f, t});
      } else {
        ASSERT_EQ(f.status().code(), StatusCode::kResourceExhausted);
      }
    } else {  // release
      size_t i = uni(0, static_cast<int>(live.size()) - 1);
      c.Release(live[i].id);
      live.erase(live.begin() + i);
    }
    Status st = c.Check();
    ASSERT_TRUE(st.ok()) << cfg.name << " op " << op << ": " << st.ToString();
    if (uni(0, 999) == 0) {
      c.ResetPrefixCache();
      ASSERT_TRUE(c.Check().ok());
    }
  }
  std::fprintf(stderr, "%s: %lld ops, %lld admitted, %lld exhausted, %zu live at end\n", cfg.name,
               static_cast<long long>(num_ops), static_cast<long long>(admitted),
               static_cast<long long>(exhausted), live.size());
  for (const Live& l : live) c.Release(l.id);
  ASSERT_TRUE(c.Check().ok());
  KvCacheStats st = c.Stats();
  EXPECT_EQ(st.blocks_used, 0);
  EXPECT_EQ(st.num_sequences, 0);
  EXPECT_EQ(st.blocks_free + st.blocks_cached, st.blocks_total);
  for (const KvGroupStats& g : st.sliding) {
    EXPECT_EQ(g.blocks_used, 0);
    EXPECT_EQ(g.blocks_free + g.blocks_cached, g.blocks_total);
  }
  if (cfg.global_layers >= 0) {
    EXPECT_EQ(st.sliding.size(), 1u);
  }
  EXPECT_GT(admitted, num_ops / 20);
  if (cfg.prefix_cache) {
    EXPECT_GT(st.hits_tokens, 0);
  }
  // The small pool must actually run out now and then, or eviction and the
  // all-or-nothing paths went untested.
  EXPECT_GT(exhausted, 0);
}

class KvProperty : public ::testing::TestWithParam<Config> {};

TEST_P(KvProperty, RandomOpsKeepInvariants) {
  // 100k operations per configuration (KVFORK_KV_PROPERTY_OPS overrides).
  RunProperty(GetParam(), OpsFromEnv(100000), 1234);
}

INSTANTIATE_TEST_SUITE_P(
    Configs, KvProperty,
    ::testing::Values(Config{"paged", KvBackend::kPaged, true, true, 40},
                      Config{"paged_no_tail", KvBackend::kPaged, true, false, 40},
                      Config{"paged_no_cache", KvBackend::kPaged, false, true, 40},
                      Config{"dense", KvBackend::kDense, true, true, 60},
                      // Gemma 3-like: a global layer and a sliding one.
                      Config{"paged_sliding", KvBackend::kPaged, true, true, 40, 1},
                      Config{"paged_sliding_no_tail", KvBackend::kPaged, true, false, 40, 1},
                      Config{"paged_sliding_no_cache", KvBackend::kPaged, false, true, 40, 1},
                      // Mistral-like: no global layer, two sliding ones.
                      Config{"paged_sliding_only", KvBackend::kPaged, true, true, 40, 0}),
    [](const auto& info) { return std::string(info.param.name); });

}  // namespace
}  // namespace kvfork
