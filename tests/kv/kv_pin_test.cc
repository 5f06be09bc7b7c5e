// Cache control (issue 25): pins with a TTL on the paged cache's prefix
// index, on a fake clock. A pinned prefix outlives LRU pressure until its
// TTL runs out; when only pinned blocks are left, the oldest pin goes first;
// a later pin extends a block's TTL; a reset drops pins; Check() holds. And
// the eviction policy alone (eviction_policy.h).
#include <gtest/gtest.h>

#include <memory>

#include "kv/eviction_policy.h"
#include "kv/kv_cache.h"
#include "kv/paged_kv_cache.h"
#include "kv_test_util.h"

namespace kvfork {
namespace {

using testing::Prefill;
using testing::Range;
using testing::TinyLayout;

struct FakeClock {
  int64_t now_ms = 1000;
};

std::unique_ptr<KvCache> PinCache(int64_t blocks, FakeClock* clock) {
  KvCacheOptions o;
  o.layout = TinyLayout(4);  // 4 tokens per block
  o.num_blocks = blocks;
  o.clock_ms = [clock] { return clock->now_ms; };
  auto c = KvCache::Create(KvBackend::kPaged, o);
  KVFORK_CHECK_MSG(c.ok(), c.status().ToString());
  return std::move(c).value();
}

// Unrelated prompts of 2 full blocks each, enough to cycle the whole pool.
void Churn(KvCache& c, int32_t base, int rounds) {
  for (int i = 0; i < rounds; ++i) c.Release(Prefill(c, Range(base + 100 * i, 8)));
}

TEST(KvPinTest, PinnedPrefixOutlivesLruPressureUntilItsTtl) {
  FakeClock clock;
  auto c = PinCache(10, &clock);
  const std::vector<int32_t> a = Range(1, 9);  // 2 full blocks + 1 token
  c->Release(Prefill(*c, a));
  EXPECT_EQ(c->Pin(a, "", 60000), 2);
  EXPECT_EQ(c->Stats().pinned_blocks, 2);
  EXPECT_EQ(c->Pin(a, "other-salt", 60000), 0) << "another salt's chain is not cached";
  Churn(*c, 5000, 20);
  EXPECT_EQ(c->Match(a, "").num_reused_tokens, 8) << "the pinned blocks survived LRU pressure";
  EXPECT_EQ(c->Stats().pinned_evictions, 0);
  EXPECT_CHECK_OK(*c);
  // An unpinned prefix under the same pressure is gone.
  const std::vector<int32_t> b = Range(300, 9);
  c->Release(Prefill(*c, b));
  Churn(*c, 9000, 20);
  EXPECT_EQ(c->Match(b, "").num_reused_tokens, 0);
  // After the TTL the pinned blocks are plain LRU leaves again.
  clock.now_ms += 60001;
  Churn(*c, 20000, 20);
  EXPECT_EQ(c->Match(a, "").num_reused_tokens, 0);
  EXPECT_EQ(c->Stats().pinned_blocks, 0);
  EXPECT_EQ(c->Stats().pinned_evictions, 0) << "an expired pin is not a pinned eviction";
  EXPECT_CHECK_OK(*c);
}

TEST(KvPinTest, WhenOnlyPinsAreLeftTheOldestPinGoesFirst) {
  FakeClock clock;
  auto c = PinCache(8, &clock);
  const std::vector<int32_t> a = Range(1, 9), b = Range(50, 9);
  c->Release(Prefill(*c, a));
  ASSERT_EQ(c->Pin(a, "", 3600000), 2);
  clock.now_ms += 10;
  c->Release(Prefill(*c, b));
  ASSERT_EQ(c->Pin(b, "", 3600000), 2);
  // 8 blocks: a's and b's 2 pinned + 1 partial each, 2 free. A 6-block
  // prompt takes the free ones, the partial tails, then a's pins (oldest).
  SeqId big = Prefill(*c, Range(700, 24));
  EXPECT_EQ(c->Stats().pinned_evictions, 2);
  EXPECT_EQ(c->Match(a, "").num_reused_tokens, 0);
  EXPECT_EQ(c->Match(b, "").num_reused_tokens, 8);
  EXPECT_EQ(c->Stats().pinned_blocks, 2);
  EXPECT_CHECK_OK(*c);
  c->Release(big);
  EXPECT_CHECK_OK(*c);
}

TEST(KvPinTest, RepinningExtendsAndMakesThePinTheNewest) {
  FakeClock clock;
  auto c = PinCache(8, &clock);
  const std::vector<int32_t> a = Range(1, 9), b = Range(50, 9);
  c->Release(Prefill(*c, a));
  c->Pin(a, "", 1000);
  clock.now_ms += 10;
  c->Release(Prefill(*c, b));
  c->Pin(b, "", 1000);
  clock.now_ms += 10;
  c->Pin(a, "", 5000);  // a is now the newest pin, until t + 5000
  clock.now_ms += 2000;  // b's pin ran out, a's did not
  SeqId big = Prefill(*c, Range(700, 24));
  EXPECT_EQ(c->Match(a, "").num_reused_tokens, 8);
  EXPECT_EQ(c->Match(b, "").num_reused_tokens, 0);
  EXPECT_EQ(c->Stats().pinned_evictions, 0);
  c->Release(big);
  // A reset drops pinned blocks too.
  c->ResetPrefixCache();
  EXPECT_EQ(c->Match(a, "").num_reused_tokens, 0);
  EXPECT_EQ(c->Stats().pinned_blocks, 0);
  EXPECT_CHECK_OK(*c);
}

TEST(KvPinTest, ReferencedPinnedBlocksAndTheDenseBackend) {
  FakeClock clock;
  auto c = PinCache(8, &clock);
  const std::vector<int32_t> a = Range(1, 9);
  SeqId s = Prefill(*c, a);
  EXPECT_EQ(c->Pin(a, "", 1000), 2) << "running blocks can be pinned (they stay after release)";
  EXPECT_CHECK_OK(*c);
  c->Release(s);
  EXPECT_CHECK_OK(*c);
  EXPECT_EQ(c->Stats().pinned_blocks, 2);
  KvCacheOptions o;
  o.layout = TinyLayout(4);
  o.num_blocks = 8;
  o.max_context = 16;
  auto dense = *KvCache::Create(KvBackend::kDense, o);
  dense->Release(Prefill(*dense, a));
  EXPECT_EQ(dense->Pin(a, "", 1000), 0);
}

TEST(EvictionPolicyTest, LruFirstThenExpiredPinsThenTheOldestPin) {
  int64_t now = 0;
  EvictionPolicy p(8);
  p.set_clock([&now] { return now; });
  bool pinned = true;
  EXPECT_EQ(p.Next(&pinned), kNoBlock);
  p.AddLeaf(3, /*tick=*/30);
  p.AddLeaf(1, 10);
  p.AddLeaf(2, 20);
  EXPECT_EQ(p.Next(&pinned), 1);
  EXPECT_FALSE(pinned);
  p.Pin(1, 100);  // t=0, until 100
  now = 5;
  p.Pin(2, 50);   // t=5, until 55
  EXPECT_EQ(p.Next(&pinned), 3) << "unpinned leaves go first";
  p.Forget(3);
  EXPECT_EQ(p.Next(&pinned), 1) << "then the oldest pin";
  EXPECT_TRUE(pinned);
  now = 60;  // 2's pin ran out: it is an LRU leaf again
  EXPECT_EQ(p.Next(&pinned), 2);
  EXPECT_FALSE(pinned);
  EXPECT_EQ(p.num_pinned(), 1);
  // A pinned interior block becomes a pinned leaf later; leaving the index
  // drops its pin.
  p.Pin(5, 1000);
  EXPECT_EQ(p.num_pinned(), 2);
  EXPECT_EQ(p.num_leaves(), 2);
  p.AddLeaf(5, 50);
  p.Forget(2);
  p.Forget(1);
  EXPECT_EQ(p.Next(&pinned), 5);
  EXPECT_TRUE(pinned);
  p.Forget(5);
  EXPECT_EQ(p.num_pinned(), 0);
  EXPECT_EQ(p.Next(&pinned), kNoBlock);
  EXPECT_TRUE(p.CheckTotals(0, 0).ok());
}

}  // namespace
}  // namespace kvfork
