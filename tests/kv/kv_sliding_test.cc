// The paged cache with sliding-window layer groups (issue 24), without a
// model: the fake forward of kv_test_util.h writes a pattern per (token,
// position, plane) into every group's table. A long generation holds one
// window of sliding blocks; a prefix is reused only where every group holds
// the window before the reuse point; holes in a cached chain; forks;
// refusals. kv_property_test runs random workloads on grouped caches and
// kv_parity_test the real models.
#include <gtest/gtest.h>

#include <memory>
#include <vector>

#include "kv/kv_test_util.h"
#include "kv/paged_kv_cache.h"

namespace kvfork {
namespace {

using testing::Concat;
using testing::FakeForward;
using testing::HoldsPattern;
using testing::Prefill;
using testing::Range;
using testing::TinyGroups;
using testing::TinyLayout;

std::unique_ptr<PagedKvCache> MakeGrouped(int global_layers, int64_t window, int block_size,
                                          int64_t blocks, int64_t sliding_blocks = 0,
                                          bool prefix_cache = true) {
  KvCacheOptions o;
  o.layout = TinyLayout(block_size);
  o.groups = TinyGroups(global_layers, 2 - global_layers, window, block_size);
  o.num_blocks = blocks;
  o.sliding_blocks = sliding_blocks;
  o.prefix_cache = prefix_cache;
  auto c = PagedKvCache::Create(o);
  KVFORK_CHECK_MSG(c.ok(), c.status().ToString());
  return std::move(c).value();
}

int64_t HeldSliding(const PagedKvCache& c, SeqId s) {
  int64_t n = 0;
  for (BlockId b : c.SlidingBlockIds(s, 0)) n += b != kNoBlock;
  return n;
}

// A 2,000-token generation, one token a step, on window 32 and block 16:
// the sliding group never holds more than ceil(32 / 16) + 1 blocks, the
// global one holds every block, and the peak KV bytes stay within that.
void LongGenerationHoldsOneWindow(int global_layers, bool prefix_cache) {
  constexpr int kBs = 16;
  constexpr int64_t kWindow = 32, kTokens = 2000;
  auto c = MakeGrouped(global_layers, kWindow, kBs, 160, 0, prefix_cache);
  std::vector<int32_t> tokens = Range(1, 40);
  SeqId s = Prefill(*c, tokens);
  const int64_t bound = (kWindow + kBs - 1) / kBs + 1;
  for (int64_t n = 40; n < kTokens; ++n) {
    tokens.push_back(static_cast<int32_t>(n % 97));
    ASSERT_TRUE(c->Reserve(s, n + 1).ok());
    FakeForward(*c, s, tokens, n, 1);
    ASSERT_TRUE(c->Append(s, std::span<const int32_t>(tokens.data() + n, 1)).ok());
    ASSERT_LE(HeldSliding(*c, s), bound) << "at " << n + 1 << " tokens";
    ASSERT_EQ(static_cast<int64_t>(c->BlockIds(s).size()), (n + 1 + kBs - 1) / kBs);
    if (n % 97 == 0) {
      ASSERT_TRUE(c->Check().ok()) << c->Check().ToString();
    }
  }
  EXPECT_TRUE(HoldsPattern(*c, s));
  EXPECT_CHECK_OK(*c);
  const KvCacheStats st = c->Stats();
  ASSERT_EQ(st.sliding.size(), 1u);
  EXPECT_LE(st.sliding[0].peak_used_blocks, bound);
  const int64_t global_blocks = (kTokens + kBs - 1) / kBs;
  EXPECT_LE(st.peak_used_kv_bytes,
            global_blocks * static_cast<int64_t>(c->primary_layout().BlockBytes()) +
                bound * st.sliding[0].block_bytes);
  c->Release(s);
  EXPECT_CHECK_OK(*c);
  EXPECT_EQ(c->Stats().sliding[0].blocks_used, 0);
}

TEST(SlidingKvCache, LongGenerationHoldsOneWindowGemmaLike) {
  LongGenerationHoldsOneWindow(1, true);
}
TEST(SlidingKvCache, LongGenerationHoldsOneWindowMistralLike) {
  LongGenerationHoldsOneWindow(0, true);
}
TEST(SlidingKvCache, LongGenerationHoldsOneWindowWithoutPrefixCache) {
  LongGenerationHoldsOneWindow(1, false);
}

TEST(SlidingKvCache, GivenBackBlocksStayCachedAndHit) {
  // Window 8, block 4: after 60 tokens the next query sees [53, 60), so
  // blocks 0-12 are given back (cached: attached to their index nodes).
  auto c = MakeGrouped(1, 8, 4, 64);
  auto a = Range(1, 60);
  SeqId s = Prefill(*c, a);
  EXPECT_EQ(HeldSliding(*c, s), 2);
  EXPECT_EQ(c->Stats().sliding[0].blocks_cached, 13);
  c->Release(s);
  // A sibling diverging at 22 reuses 22: the window before 22 is [15, 22).
  PrefixMatch m;
  SeqId b = Prefill(*c, Concat(Range(1, 22), Range(500, 5)), "", &m);
  EXPECT_EQ(m.num_reused_tokens, 22);
  EXPECT_TRUE(HoldsPattern(*c, b));
  EXPECT_CHECK_OK(*c);
  c->Release(b);
  EXPECT_CHECK_OK(*c);
}

TEST(SlidingKvCache, ReuseNeedsEveryGroupsWindowBeforeTheReusePoint) {
  // Window 8, block 4; the global group has room, the sliding one 16 blocks.
  auto c = MakeGrouped(1, 8, 4, 64, /*sliding_blocks=*/16);
  SeqId s = Prefill(*c, Range(1, 60));  // 15 blocks; 0-12 given back
  c->Release(s);
  ASSERT_EQ(c->Stats().sliding[0].blocks_cached, 15);
  // Take the one free sliding block and six more: blocks 0-5 (given back
  // first) are evicted from the sliding group; the global group keeps all.
  auto hog = c->Admit(Range(900, 1), "other", 7 * 4, nullptr);
  ASSERT_TRUE(hog.ok()) << hog.status().ToString();
  EXPECT_EQ(c->Stats().sliding[0].evictions, 6);
  EXPECT_EQ(c->Stats().evictions, 0);
  c->Release(*hog);
  EXPECT_CHECK_OK(*c);
  // Diverging at 36: the window before 36 is [29, 36): blocks 7 and 8, held.
  PrefixMatch m;
  SeqId b = Prefill(*c, Concat(Range(1, 36), Range(500, 9)), "", &m);
  EXPECT_EQ(m.num_reused_tokens, 36);
  EXPECT_TRUE(HoldsPattern(*c, b));
  c->Release(b);
  // Diverging at 20: every reuse point up to 20 needs one of blocks 0-5 in
  // its window, so nothing is reused though the global group has it all.
  auto p = Concat(Range(1, 20), Range(700, 9));
  EXPECT_EQ(c->Match(p, "").num_reused_tokens, 0);
  // Diverging at 31: the window before 31 is [24, 31): block 6 and block 7
  // (the tail copied), both held, though blocks 0-5 of the chain are not.
  const int64_t at31 = c->Match(Concat(Range(1, 31), Range(800, 9)), "").num_reused_tokens;
  EXPECT_EQ(at31, 31);
  EXPECT_CHECK_OK(*c);
}

// A pinned prefix (cache control) keeps its sliding blocks: eviction takes
// an unpinned prefix's blocks first, so every reuse point of the pinned one
// keeps its window; only when every cached block is pinned does a pinned one
// go (counted).
void PinnedPrefixKeepsItsWindows(bool pin) {
  // Window 8, block 4; 32 sliding blocks: two 60-token prefixes (15 blocks
  // each, cached after release) and 2 free.
  auto c = MakeGrouped(1, 8, 4, 128, /*sliding_blocks=*/32);
  const auto a = Range(1, 60), b = Range(200, 60);
  c->Release(Prefill(*c, a));
  c->Release(Prefill(*c, b));
  ASSERT_EQ(c->Stats().sliding[0].blocks_cached, 30);
  if (pin) {
    EXPECT_EQ(c->Pin(a, "", 60'000), 15);
  }
  // Eight sliding blocks: the 2 free and 6 evicted, the least recently
  // cached first (a's blocks 0-5), or b's with a pinned.
  auto hog = c->Admit(Range(900, 1), "other", 8 * 4, nullptr);
  ASSERT_TRUE(hog.ok()) << hog.status().ToString();
  EXPECT_EQ(c->Stats().sliding[0].evictions, 6);
  EXPECT_EQ(c->Stats().sliding[0].pinned_evictions, 0);
  c->Release(*hog);
  EXPECT_CHECK_OK(*c);
  // Diverging at 20 needs blocks 3 and 4 (the window [13, 20)).
  EXPECT_EQ(c->Match(Concat(Range(1, 20), Range(700, 9)), "").num_reused_tokens, pin ? 20 : 0);
  EXPECT_EQ(c->Match(Concat(Range(200, 20), Range(700, 9)), "").num_reused_tokens, pin ? 0 : 20);
  if (!pin) return;
  // Every cached sliding block pinned: the oldest pinned one goes, counted.
  EXPECT_EQ(c->Pin(b, "", 60'000), 15);
  auto hog2 = c->Admit(Range(950, 1), "other", 10 * 4, nullptr);
  ASSERT_TRUE(hog2.ok()) << hog2.status().ToString();
  EXPECT_GT(c->Stats().sliding[0].pinned_evictions, 0);
  c->Release(*hog2);
  EXPECT_CHECK_OK(*c);
}

TEST(SlidingKvCache, PinnedPrefixKeepsItsWindows) { PinnedPrefixKeepsItsWindows(true); }
TEST(SlidingKvCache, UnpinnedPrefixLosesItsOldestWindowsFirst) {
  PinnedPrefixKeepsItsWindows(false);
}

TEST(SlidingKvCache, ForkSharesTheWindowAndCopiesTheTail) {
  auto c = MakeGrouped(1, 8, 4, 64);
  SeqId a = Prefill(*c, Range(1, 30));
  auto f = c->Fork(a);
  ASSERT_TRUE(f.ok());
  EXPECT_TRUE(HoldsPattern(*c, *f));
  EXPECT_EQ(HeldSliding(*c, *f), HeldSliding(*c, a));
  EXPECT_CHECK_OK(*c);
  c->Release(a);
  c->Release(*f);
  EXPECT_CHECK_OK(*c);
  c->ResetPrefixCache();
  EXPECT_CHECK_OK(*c);
  const KvCacheStats st = c->Stats();
  EXPECT_EQ(st.sliding[0].blocks_cached, 0);
  EXPECT_EQ(st.sliding[0].blocks_free, st.sliding[0].blocks_total);
}

TEST(SlidingKvCache, RefusesADiskTierAndGroupsThatDoNotSplitTheLayout) {
  KvCacheOptions o;
  o.layout = TinyLayout();
  o.num_blocks = 16;
  o.groups = TinyGroups(1, 1, 8);
  o.disk_dir = "/tmp/nowhere";
  o.model_fingerprint = 1;
  auto disk = PagedKvCache::Create(o);
  ASSERT_FALSE(disk.ok());
  EXPECT_NE(disk.status().message().find("--kv-disk-dir"), std::string::npos);
  o.disk_dir.clear();
  o.groups = TinyGroups(1, 2, 8);  // 3 layers for a 2-layer layout
  auto bad = PagedKvCache::Create(o);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("layers"), std::string::npos);
  o.groups = TinyGroups(1, 1, 0);  // a "sliding" group without a window
  EXPECT_FALSE(PagedKvCache::Create(o).ok());
}

}  // namespace
}  // namespace kvfork
