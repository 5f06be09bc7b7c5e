// Unit tests of the paged and dense KV caches: every case issue 4 names.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstring>
#include <fstream>
#include <iterator>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "kv/block_pool.h"
#include "kv/dense_kv_cache.h"
#include "kv/kv_test_util.h"
#include "kv/paged_kv_cache.h"

namespace kvfork {
namespace {

using testing::Concat;
using testing::HoldsPattern;
using testing::Prefill;
using testing::Range;
using testing::TinyLayout;

std::unique_ptr<PagedKvCache> MakePaged(int64_t blocks, bool tail_copy = true,
                                        bool prefix_cache = true) {
  KvCacheOptions o;
  o.layout = TinyLayout();
  o.num_blocks = blocks;
  o.tail_copy = tail_copy;
  o.prefix_cache = prefix_cache;
  auto c = PagedKvCache::Create(o);
  KVFORK_CHECK_MSG(c.ok(), c.status().ToString());
  return std::move(c).value();
}

TEST(PagedKvCache, FullPromptHitRecomputesLastToken) {
  auto c = MakePaged(64);
  auto p = Range(100, 32);  // 8 full blocks of 4
  SeqId a = Prefill(*c, p);
  c->Release(a);
  EXPECT_CHECK_OK(*c);
  PrefixMatch m;
  SeqId b = Prefill(*c, p, "", &m);
  EXPECT_EQ(m.num_reused_tokens, 31);
  EXPECT_EQ(m.num_shared_blocks, 7);
  EXPECT_EQ(m.num_tail_tokens, 3);
  EXPECT_TRUE(HoldsPattern(*c, b));
  EXPECT_CHECK_OK(*c);
  c->Release(b);
  auto off = MakePaged(64, /*tail_copy=*/false);
  off->Release(Prefill(*off, p));
  EXPECT_EQ(off->Match(p, "").num_reused_tokens, 28);
}

TEST(PagedKvCache, DivergentSiblingsShareFullBlocksAndCopyTail) {
  auto c = MakePaged(64);
  auto common = Range(1, 10);
  auto p1 = Concat(common, Range(500, 7));
  auto p2 = Concat(common, Range(900, 7));
  SeqId a = Prefill(*c, p1);
  c->Release(a);
  PrefixMatch m;
  SeqId b = Prefill(*c, p2, "", &m);
  EXPECT_EQ(m.num_shared_blocks, 2);
  EXPECT_EQ(m.num_tail_tokens, 2);
  EXPECT_EQ(m.num_reused_tokens, 10);
  EXPECT_TRUE(HoldsPattern(*c, b));
  EXPECT_CHECK_OK(*c);
  KvCacheStats st = c->Stats();
  EXPECT_EQ(st.hits_tokens, 10);
  EXPECT_EQ(st.tail_copied_tokens, 2);
  EXPECT_EQ(st.queries_tokens, 34);
  c->Release(b);
  EXPECT_CHECK_OK(*c);
}

TEST(PagedKvCache, TailCopyOffFloorsToBlockBoundary) {
  auto c = MakePaged(64, /*tail_copy=*/false);
  auto common = Range(1, 10);
  c->Release(Prefill(*c, Concat(common, Range(500, 7))));
  PrefixMatch m;
  SeqId b = Prefill(*c, Concat(common, Range(900, 7)), "", &m);
  EXPECT_EQ(m.num_reused_tokens, 8);
  EXPECT_EQ(m.num_tail_tokens, 0);
  EXPECT_EQ(c->Stats().tail_copied_tokens, 0);
  EXPECT_TRUE(HoldsPattern(*c, b));
  c->Release(b);
  EXPECT_CHECK_OK(*c);
}

TEST(PagedKvCache, PromptShorterThanCachedEntry) {
  auto c = MakePaged(64);
  auto p = Range(7, 32);
  c->Release(Prefill(*c, p));
  std::vector<int32_t> short13(p.begin(), p.begin() + 13);
  EXPECT_EQ(c->Match(short13, "").num_reused_tokens, 12);
  EXPECT_EQ(c->Match(short13, "").num_tail_tokens, 0);
  std::vector<int32_t> short14(p.begin(), p.begin() + 14);
  PrefixMatch m;
  SeqId s = Prefill(*c, short14, "", &m);
  EXPECT_EQ(m.num_reused_tokens, 13);
  EXPECT_EQ(m.num_shared_blocks, 3);
  EXPECT_EQ(m.num_tail_tokens, 1);
  EXPECT_TRUE(HoldsPattern(*c, s));
  c->Release(s);
  EXPECT_CHECK_OK(*c);
  std::vector<int32_t> one{7};
  EXPECT_EQ(c->Match(one, "").num_reused_tokens, 0);
}

TEST(PagedKvCache, ConcurrentSiblingsAllShareInPlace) {
  auto c = MakePaged(64);
  auto prefix = Range(1, 16);
  SeqId a = Prefill(*c, Concat(prefix, {1000}));
  std::vector<SeqId> sibs;
  for (int i = 0; i < 8; ++i) {
    PrefixMatch m;
    sibs.push_back(Prefill(*c, Concat(prefix, {2000 + i, 3000 + i}), "", &m));
    EXPECT_EQ(m.num_shared_blocks, 4);
    EXPECT_EQ(m.num_reused_tokens, 16);
  }
  for (int b = 0; b < 4; ++b) {
    BlockId id = c->BlockIds(a)[b];
    EXPECT_EQ(c->pool().refcount(id), 9);
    for (SeqId s : sibs) EXPECT_EQ(c->BlockIds(s)[b], id);
  }
  EXPECT_CHECK_OK(*c);
  for (SeqId s : sibs) {
    EXPECT_TRUE(HoldsPattern(*c, s));
    c->Release(s);
    EXPECT_CHECK_OK(*c);
  }
  c->Release(a);
  EXPECT_CHECK_OK(*c);
}

TEST(PagedKvCache, BlockRegisteredWhileOwnerRuns) {
  auto c = MakePaged(64);
  auto p = Range(50, 10);
  PrefixMatch m;
  StatusOr<SeqId> a = c->Admit(p, "", 10, &m);
  ASSERT_TRUE(a.ok());
  // The owner computes its first chunk of 5 tokens: one block fills.
  std::vector<int32_t> chunk(p.begin(), p.begin() + 5);
  testing::FakeForward(*c, *a, p, 0, 5);
  ASSERT_TRUE(c->Append(*a, chunk).ok());
  EXPECT_EQ(c->Match(p, "").num_reused_tokens, 4);
  testing::FakeForward(*c, *a, p, 5, 5);
  ASSERT_TRUE(c->Append(*a, std::vector<int32_t>(p.begin() + 5, p.end())).ok());
  SeqId b = Prefill(*c, Concat(p, {1, 2, 3}), "", &m);
  EXPECT_EQ(m.num_shared_blocks, 2);
  EXPECT_EQ(m.num_reused_tokens, 8);  // a's partial block is private while it runs
  EXPECT_EQ(c->BlockIds(b)[1], c->BlockIds(*a)[1]);
  EXPECT_CHECK_OK(*c);
  c->Release(*a);
  c->Release(b);
  EXPECT_CHECK_OK(*c);
}

TEST(PagedKvCache, MultiturnReusesWholePreviousConversation) {
  auto c = MakePaged(64);
  auto turn1 = Range(10, 9);
  PrefixMatch m;
  SeqId a = Prefill(*c, turn1, "", &m);
  // Decode 4 tokens one by one (the last sampled one is never forwarded).
  std::vector<int32_t> all = turn1;
  for (int i = 0; i < 4; ++i) {
    all.push_back(700 + i);
    ASSERT_TRUE(c->Reserve(a, static_cast<int64_t>(all.size())).ok());
    testing::FakeForward(*c, a, all, static_cast<int64_t>(all.size()) - 1, 1);
    ASSERT_TRUE(c->Append(a, std::vector<int32_t>{all.back()}).ok());
  }
  c->Release(a);  // 13 tokens: 3 full blocks + a partial one registered
  EXPECT_CHECK_OK(*c);
  auto turn2 = Concat(all, {704, 1, 2, 3});
  SeqId b = Prefill(*c, turn2, "", &m);
  EXPECT_EQ(m.num_reused_tokens, 13);
  EXPECT_EQ(m.num_tail_tokens, 1);
  EXPECT_TRUE(HoldsPattern(*c, b));
  c->Release(b);
  EXPECT_CHECK_OK(*c);
}

TEST(PagedKvCache, EvictionTakesLeavesLeastRecentlyUsedFirst) {
  auto c = MakePaged(8);
  // Chain X: 2 full blocks; chain Y shares X's first block and adds one.
  auto x = Range(1, 8);
  auto y = Concat(Range(1, 4), Range(90, 4));
  SeqId sx = Prefill(*c, Concat(x, {0}));
  std::vector<BlockId> xb(c->BlockIds(sx).begin(), c->BlockIds(sx).end());
  c->Release(sx);  // X's blocks: x0 <- x1 (leaf) and a partial leaf
  SeqId sy = Prefill(*c, Concat(y, {0}));
  std::vector<BlockId> yb(c->BlockIds(sy).begin(), c->BlockIds(sy).end());
  c->Release(sy);
  EXPECT_EQ(xb[0], yb[0]);
  EXPECT_CHECK_OK(*c);
  KvCacheStats st = c->Stats();
  EXPECT_EQ(st.blocks_cached, 5);  // x0, x1, x-partial, y1, y-partial
  EXPECT_EQ(st.blocks_free, 3);
  // Needing 5 blocks evicts 2 leaves: X's (older) partial and x1, never x0.
  StatusOr<SeqId> z = c->Admit(Range(5000, 20), "", 20, nullptr);
  ASSERT_TRUE(z.ok()) << z.status().ToString();
  EXPECT_EQ(c->Stats().evictions, 2);
  EXPECT_TRUE(c->index().IsRegistered(xb[0]));
  EXPECT_FALSE(c->index().IsRegistered(xb[1]));
  EXPECT_FALSE(c->index().IsRegistered(xb[2]));
  EXPECT_TRUE(c->index().IsRegistered(yb[1]));
  EXPECT_EQ(c->Match(Concat(y, {0}), "").num_reused_tokens, 8);
  EXPECT_EQ(c->Match(Concat(x, {0}), "").num_reused_tokens, 4);
  EXPECT_CHECK_OK(*c);
  c->Release(*z);
  EXPECT_CHECK_OK(*c);
}

TEST(PagedKvCache, SaltIsolatesPrefixes) {
  auto c = MakePaged(64);
  auto p = Range(1, 20);
  c->Release(Prefill(*c, p, "tenant-a"));
  EXPECT_EQ(c->Match(p, "tenant-b").num_reused_tokens, 0);
  EXPECT_EQ(c->Match(p, "").num_reused_tokens, 0);
  EXPECT_EQ(c->Match(p, "tenant-a").num_reused_tokens, 19);
  PrefixMatch m;
  SeqId b = Prefill(*c, p, "tenant-b", &m);
  EXPECT_EQ(m.num_reused_tokens, 0);
  c->Release(b);
  EXPECT_CHECK_OK(*c);
}

// Every distinct salt used to be interned for good: 100,000 salts cost memory
// forever. Now a salt holds only its root entry, gone with its last block.
TEST(PagedKvCache, DistinctSaltsDoNotAccumulate) {
  auto c = MakePaged(16);
  const auto p = Range(1, 6);
  size_t peak_salts = 0;
  for (int i = 0; i < 100000; ++i) {
    const std::string salt = "tenant-" + std::to_string(i);
    SeqId s = Prefill(*c, p, salt);
    c->Release(s);  // 2 blocks cached under this salt; older salts get evicted
    peak_salts = std::max(peak_salts, static_cast<size_t>(c->index().num_salts()));
    if (i % 9973 == 0) EXPECT_CHECK_OK(*c);
  }
  EXPECT_LE(peak_salts, 16u);  // at most one per cached root block
  EXPECT_EQ(c->Match(p, "tenant-99999").num_reused_tokens, 5);
  EXPECT_EQ(c->Match(p, "tenant-0").num_reused_tokens, 0);  // evicted, not shared
  c->ResetPrefixCache();
  EXPECT_EQ(c->index().num_salts(), 0);
  EXPECT_CHECK_OK(*c);
}

TEST(PagedKvCache, SaltKeysAreStableAndDistinct) {
  EXPECT_EQ(PrefixIndex::SaltKeyOf(""), 0u);
  EXPECT_EQ(PrefixIndex::SaltKeyOf("tenant-a"), PrefixIndex::SaltKeyOf(std::string("tenant-a")));
  std::set<uint64_t> keys;
  for (int i = 0; i < 20000; ++i)
    keys.insert(PrefixIndex::SaltKeyOf(std::string(i % 17, 'x') + std::to_string(i)));
  keys.insert(PrefixIndex::SaltKeyOf(std::string("a")));
  keys.insert(PrefixIndex::SaltKeyOf(std::string("a\0", 2)));  // the length is hashed too
  EXPECT_EQ(keys.size(), 20002u);
  EXPECT_EQ(keys.count(0), 0u);
}

TEST(PagedKvCache, PoolExhaustionIsAllOrNothing) {
  auto c = MakePaged(8);
  SeqId a = Prefill(*c, Range(1, 24));       // 6 blocks, referenced
  SeqId small = Prefill(*c, Range(300, 4));  // 1 block: 1 left free
  KvCacheStats before = c->Stats();
  StatusOr<SeqId> b = c->Admit(Range(100, 12), "", 12, nullptr);  // needs 3
  ASSERT_FALSE(b.ok());
  EXPECT_EQ(b.status().code(), StatusCode::kResourceExhausted);
  EXPECT_NE(b.status().message().find("out of blocks"), std::string::npos);
  KvCacheStats after = c->Stats();
  EXPECT_EQ(after.blocks_free, before.blocks_free);
  EXPECT_EQ(after.num_sequences, 2);
  Status r = c->Reserve(a, 32);  // needs 2 more, 1 free
  EXPECT_EQ(r.code(), StatusCode::kResourceExhausted);
  EXPECT_EQ(c->BlockTableSize(a), 6);
  EXPECT_EQ(c->Stats().blocks_free, 1);
  EXPECT_EQ(c->Reserve(a, 1000).code(), StatusCode::kOutOfRange);
  EXPECT_EQ(c->Append(a, Range(0, 5)).code(), StatusCode::kFailedPrecondition);
  EXPECT_CHECK_OK(*c);
  c->Release(a);
  c->Release(small);
  EXPECT_CHECK_OK(*c);
}

TEST(PagedKvCache, ForkSharesFullBlocksAndCopiesPartial) {
  auto c = MakePaged(64);
  auto p = Range(1, 10);
  SeqId a = Prefill(*c, p);
  StatusOr<SeqId> f = c->Fork(a);
  ASSERT_TRUE(f.ok());
  EXPECT_EQ(c->BlockIds(*f)[0], c->BlockIds(a)[0]);
  EXPECT_EQ(c->BlockIds(*f)[1], c->BlockIds(a)[1]);
  EXPECT_NE(c->BlockIds(*f)[2], c->BlockIds(a)[2]);
  EXPECT_TRUE(HoldsPattern(*c, *f));
  EXPECT_CHECK_OK(*c);
  // Both fill block 2 with different tokens: two different children.
  for (SeqId s : {a, *f}) {
    std::vector<int32_t> all(c->Tokens(s).begin(), c->Tokens(s).end());
    all.push_back(s == a ? 11 : 12);
    all.push_back(13);
    ASSERT_TRUE(c->Reserve(s, 12).ok());
    testing::FakeForward(*c, s, all, 10, 2);
    ASSERT_TRUE(c->Append(s, std::vector<int32_t>(all.begin() + 10, all.end())).ok());
  }
  EXPECT_CHECK_OK(*c);
  c->Release(a);
  c->Release(*f);
  EXPECT_CHECK_OK(*c);
}

TEST(PagedKvCache, IdenticalBlockFilledTwiceIsDeduplicated) {
  auto c = MakePaged(64);
  auto p = Range(1, 9);
  SeqId a = Prefill(*c, p);
  SeqId b;
  {
    // b admitted before a registered anything would compute the same blocks;
    // emulate by a prompt that differs only after the shared blocks.
    PrefixMatch m;
    StatusOr<SeqId> s = c->Admit(Range(1, 3), "", 3, &m);
    ASSERT_TRUE(s.ok());
    b = *s;
    EXPECT_EQ(m.num_reused_tokens, 2);
    ASSERT_TRUE(c->Reserve(b, 9).ok());
    testing::FakeForward(*c, b, p, 2, 7);
    ASSERT_TRUE(c->Append(b, std::vector<int32_t>(p.begin() + 2, p.end())).ok());
  }
  EXPECT_EQ(c->BlockIds(b)[0], c->BlockIds(a)[0]);
  EXPECT_EQ(c->BlockIds(b)[1], c->BlockIds(a)[1]);
  EXPECT_TRUE(HoldsPattern(*c, b));
  EXPECT_CHECK_OK(*c);
  c->Release(a);
  c->Release(b);
  EXPECT_CHECK_OK(*c);
}

TEST(PagedKvCache, NoPrefixCacheReusesNothing) {
  auto c = MakePaged(64, true, /*prefix_cache=*/false);
  auto p = Range(1, 20);
  c->Release(Prefill(*c, p));
  EXPECT_EQ(c->Stats().blocks_cached, 0);
  EXPECT_EQ(c->Stats().blocks_free, 64);
  PrefixMatch m;
  c->Release(Prefill(*c, p, "", &m));
  EXPECT_EQ(m.num_reused_tokens, 0);
  EXPECT_CHECK_OK(*c);
}

TEST(PagedKvCache, ResetPrefixCacheDropsOnlyCached) {
  auto c = MakePaged(64);
  SeqId a = Prefill(*c, Range(1, 20));
  c->Release(Prefill(*c, Range(100, 20)));
  c->ResetPrefixCache();
  EXPECT_EQ(c->Stats().blocks_cached, 0);
  // a still holds its blocks: 4 shared + 3 copied from its (immutable) 5th.
  EXPECT_EQ(c->Match(Range(1, 20), "").num_reused_tokens, 19);
  EXPECT_CHECK_OK(*c);
  c->Release(a);
}

TEST(KvCacheOptions, BadValuesNameTheFlag) {
  EXPECT_NE(ParseKvDType("fp8").status().message().find("--kv-dtype"), std::string::npos);
  EXPECT_EQ(*ParseKvDType("q4"), KvDType::kQ4);
  EXPECT_EQ(*ParseKvDType("q4r"), KvDType::kQ4r);
  // q4 needs head_dim in multiples of 32; the error names the flag and the value.
  KvLayout q4 = TinyLayout(4, KvDType::kQ4);
  const Status bad = ValidateKvLayout(q4);
  EXPECT_NE(bad.message().find("--kv-dtype q4"), std::string::npos) << bad.ToString();
  EXPECT_NE(bad.message().find("got 4"), std::string::npos) << bad.ToString();
  q4.head_dim = 64;
  EXPECT_TRUE(ValidateKvLayout(q4).ok());
  EXPECT_NE(ParseKvBackend("x", 4).status().message().find("--kv-backend"), std::string::npos);
  EXPECT_EQ(*ParseKvBackend("auto", 4), KvBackend::kPaged);
  EXPECT_EQ(*ParseKvBackend("auto", 1), KvBackend::kDense);
  EXPECT_FALSE(ParseOnOff("--prefix-tail-copy", "maybe").ok());
  KvCacheOptions o;
  o.layout = TinyLayout();
  o.cache_mib = -1;
  EXPECT_NE(ResolveNumBlocks(o).status().message().find("--kv-cache-mib"), std::string::npos);
  o.cache_mib = 1;
  EXPECT_EQ(*ResolveNumBlocks(o), (1 << 20) / static_cast<int64_t>(o.layout.BlockBytes()));
  o.layout.num_layers = 0;
  EXPECT_FALSE(PagedKvCache::Create(o).ok());
}

std::unique_ptr<DenseKvCache> MakeDense(int64_t blocks, int64_t max_context) {
  KvCacheOptions o;
  o.layout = TinyLayout();
  o.num_blocks = blocks;
  o.max_context = max_context;
  auto c = DenseKvCache::Create(o);
  KVFORK_CHECK_MSG(c.ok(), c.status().ToString());
  return std::move(c).value();
}

TEST(DenseKvCache, SnapshotPrefixIsCopied) {
  auto c = MakeDense(24, 32);  // 3 slots of 8 blocks
  EXPECT_EQ(c->num_slots(), 3);
  auto common = Range(1, 10);
  c->Release(Prefill(*c, Concat(common, Range(500, 5))));
  PrefixMatch m;
  SeqId b = Prefill(*c, Concat(common, Range(900, 5)), "", &m);
  EXPECT_EQ(m.num_reused_tokens, 10);
  EXPECT_TRUE(HoldsPattern(*c, b));
  EXPECT_EQ(c->Match(Concat(common, Range(500, 5)), "salt").num_reused_tokens, 0);
  EXPECT_CHECK_OK(*c);
  StatusOr<SeqId> f = c->Fork(b);
  ASSERT_TRUE(f.ok());
  EXPECT_TRUE(HoldsPattern(*c, *f));
  // All 3 slots now hold something: a 4th running sequence does not fit.
  StatusOr<SeqId> x = c->Admit(Range(1, 4), "", 4, nullptr);  // takes the snapshot over
  ASSERT_TRUE(x.ok());
  EXPECT_EQ(c->NumReusedTokens(*x), 3);
  EXPECT_EQ(c->Admit(Range(1, 4), "", 4, nullptr).status().code(), StatusCode::kResourceExhausted);
  EXPECT_EQ(c->Reserve(b, 33).code(), StatusCode::kOutOfRange);
  c->Release(b);
  c->Release(*f);
  c->Release(*x);
  EXPECT_CHECK_OK(*c);
  KvCacheStats st = c->Stats();
  EXPECT_EQ(st.blocks_used, 0);
  EXPECT_EQ(st.num_sequences, 0);
}

TEST(DenseKvCache, PoolSmallerThanOneSlotIsAnError) {
  KvCacheOptions o;
  o.layout = TinyLayout();
  o.num_blocks = 4;
  o.max_context = 100;
  auto c = DenseKvCache::Create(o);
  ASSERT_FALSE(c.ok());
  EXPECT_NE(c.status().message().find("--kv-cache-mib"), std::string::npos);
}

// A tail copy of a q4 block moves the token slots' codes and their f16
// scales (which follow the plane's codes) and nothing else.
TEST(CopyBlockTokens, Q4MovesCodesAndScalesOfTheSlots) {
  KvLayout l = TinyLayout(4, KvDType::kQ4r);
  l.head_dim = 64;
  std::vector<uint8_t> src(l.BlockBytes()), dst(l.BlockBytes(), 0);
  for (size_t i = 0; i < src.size(); ++i) src[i] = static_cast<uint8_t>(1 + i % 251);
  CopyBlockTokens(l, src.data(), dst.data(), 1, 2);
  std::vector<uint8_t> want(l.BlockBytes(), 0);
  for (int layer = 0; layer < l.num_layers; ++layer)
    for (int kv = 0; kv < 2; ++kv)
      for (int h = 0; h < l.num_kv_heads; ++h)
        for (int slot = 1; slot < 3; ++slot) {
          const size_t codes = l.PlaneOffset(layer, kv, h) + slot * l.RowBytes();
          const size_t scales = l.Q4ScaleOffset(layer, kv, h) + slot * l.RowScaleBytes();
          std::memcpy(want.data() + codes, src.data() + codes, l.RowBytes());
          std::memcpy(want.data() + scales, src.data() + scales, l.RowScaleBytes());
        }
  EXPECT_EQ(dst, want);
}

// The pool asks for transparent huge pages (BlockPool::Create): the kernel
// marks its mapping eligible wherever THP is not switched off, which
// /proc/self/smaps reports as "THPeligible: 1" for the mapping that holds
// block 0. With THP "never" (or a kernel without the field) there is nothing
// to check.
TEST(BlockPool, MappingIsEligibleForTransparentHugePages) {
  std::ifstream thp("/sys/kernel/mm/transparent_hugepage/enabled");
  std::string mode((std::istreambuf_iterator<char>(thp)), std::istreambuf_iterator<char>());
  if (mode.empty() || mode.find("[never]") != std::string::npos)
    GTEST_SKIP() << "transparent huge pages are off on this kernel";
  KvLayout l = TinyLayout(16);
  l.head_dim = 128;
  auto pool = BlockPool::Create(l, (int64_t{8} << 20) / l.BlockBytes() + 1);
  ASSERT_TRUE(pool.ok()) << pool.status().ToString();
  const uintptr_t base = reinterpret_cast<uintptr_t>((*pool)->Data(0));
  std::ifstream smaps("/proc/self/smaps");
  std::string line;
  bool in_pool = false, eligible_field = false;
  while (std::getline(smaps, line)) {
    uintptr_t lo = 0, hi = 0;
    if (std::sscanf(line.c_str(), "%lx-%lx ", &lo, &hi) == 2) {  // a mapping's header
      in_pool = lo <= base && base < hi;
      continue;
    }
    if (in_pool && line.rfind("THPeligible:", 0) == 0) {
      eligible_field = true;
      EXPECT_NE(line.find('1'), std::string::npos) << line;
    }
  }
  if (!eligible_field) GTEST_SKIP() << "this kernel's smaps has no THPeligible field";
}

}  // namespace
}  // namespace kvfork
