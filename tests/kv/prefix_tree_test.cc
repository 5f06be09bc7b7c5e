// The prefix tree snapshot behind GET /v1/cache/tree: shared prefixes appear
// once with one child per divergence, counts agree with the cache, the cap
// truncates breadth-first and says so, salts are only counted.
#include <gtest/gtest.h>

#include <map>
#include <memory>
#include <set>

#include "kv/dense_kv_cache.h"
#include "kv/kv_test_util.h"
#include "kv/paged_kv_cache.h"

namespace kvfork {
namespace {

using testing::Concat;
using testing::Prefill;
using testing::Range;
using testing::TinyLayout;

std::unique_ptr<PagedKvCache> MakePaged(int64_t blocks) {
  KvCacheOptions o;
  o.layout = TinyLayout();  // 4 tokens a block
  o.num_blocks = blocks;
  auto c = PagedKvCache::Create(o);
  KVFORK_CHECK_MSG(c.ok(), c.status().ToString());
  return std::move(c).value();
}

// Children of each node (-1 = the roots).
std::map<int32_t, std::vector<int32_t>> ChildrenOf(const PrefixTreeSnapshot& t) {
  std::map<int32_t, std::vector<int32_t>> kids;
  for (const PrefixTreeNode& n : t.nodes) kids[n.parent].push_back(n.id);
  return kids;
}

TEST(PrefixTreeSnapshot, EmptyCacheHasNoNodes) {
  auto c = MakePaged(16);
  PrefixTreeSnapshot t = c->SnapshotPrefixTree(100);
  EXPECT_TRUE(t.has_tree);
  EXPECT_EQ(t.block_size, 4);
  EXPECT_EQ(t.blocks_total, 16);
  EXPECT_EQ(t.blocks_free, 16);
  EXPECT_EQ(t.num_registered, 0);
  EXPECT_FALSE(t.truncated);
  EXPECT_TRUE(t.nodes.empty());
}

TEST(PrefixTreeSnapshot, SharedPrefixIsOneChainThatForks) {
  auto c = MakePaged(64);
  const auto shared = Range(100, 8);                     // 2 full blocks
  SeqId a = Prefill(*c, Concat(shared, Range(200, 6)));  // + 1 full + partial(2)
  SeqId b = Prefill(*c, Concat(shared, Range(300, 4)));  // + 1 full
  c->Release(a);                                         // a stays cached; b still runs
  PrefixTreeSnapshot t = c->SnapshotPrefixTree(100);
  ASSERT_TRUE(c->Check().ok());
  // shared: 2 nodes; a: 1 full + 1 partial tail; b: 1 full.
  ASSERT_EQ(t.nodes.size(), 5u);
  EXPECT_EQ(t.num_registered, 5);
  EXPECT_FALSE(t.truncated);
  auto kids = ChildrenOf(t);
  ASSERT_EQ(kids[-1].size(), 1u) << "one root: both prompts start alike";
  const int32_t root = kids[-1][0];
  ASSERT_EQ(kids[root].size(), 1u);
  const int32_t fork = kids[root][0];
  EXPECT_EQ(kids[fork].size(), 2u) << "the prompts diverge after the shared blocks";
  // Parents come before children (breadth-first).
  std::set<int32_t> seen{-1};
  for (const PrefixTreeNode& n : t.nodes) {
    EXPECT_TRUE(seen.count(n.parent)) << "block " << n.id << " before its parent";
    seen.insert(n.id);
    EXPECT_LE(n.last_use, t.clock);
  }
  // b holds the shared chain and its own block; a's blocks are cached.
  std::map<int32_t, PrefixTreeNode> by_id;
  for (const PrefixTreeNode& n : t.nodes) by_id[n.id] = n;
  EXPECT_EQ(by_id[root].refcount, 1);
  EXPECT_EQ(by_id[fork].refcount, 1);
  int partial = 0;
  for (const PrefixTreeNode& n : t.nodes)
    if (n.num_tokens < 4) {
      ++partial;
      EXPECT_EQ(n.num_tokens, 2);
      EXPECT_EQ(n.refcount, 0);
    }
  EXPECT_EQ(partial, 1);
  const KvCacheStats st = c->Stats();
  EXPECT_EQ(t.blocks_used, st.blocks_used);
  EXPECT_EQ(t.blocks_cached, st.blocks_cached);
  EXPECT_EQ(t.blocks_free, st.blocks_free);
  c->Release(b);
  PrefixTreeSnapshot after = c->SnapshotPrefixTree(100);
  for (const PrefixTreeNode& n : after.nodes) EXPECT_EQ(n.refcount, 0);
}

TEST(PrefixTreeSnapshot, CapTruncatesBreadthFirstAndSaysSo) {
  auto c = MakePaged(64);
  c->Release(Prefill(*c, Range(100, 40)));  // a chain of 10 full blocks
  c->Release(Prefill(*c, Range(500, 8)));   // another root, 2 blocks
  PrefixTreeSnapshot t = c->SnapshotPrefixTree(3);
  EXPECT_TRUE(t.truncated);
  EXPECT_EQ(t.num_registered, 12);
  ASSERT_EQ(t.nodes.size(), 3u);
  // Both roots first, then the first level below them.
  EXPECT_EQ(t.nodes[0].parent, -1);
  EXPECT_EQ(t.nodes[1].parent, -1);
  EXPECT_NE(t.nodes[2].parent, -1);
  EXPECT_FALSE(c->SnapshotPrefixTree(12).truncated);
  EXPECT_TRUE(c->SnapshotPrefixTree(0).nodes.empty());
}

TEST(PrefixTreeSnapshot, SaltsAreCountedApart) {
  auto c = MakePaged(64);
  const auto p = Range(100, 8);
  c->Release(Prefill(*c, p));
  c->Release(Prefill(*c, p, "tenant-a"));
  c->Release(Prefill(*c, p, "tenant-b"));
  PrefixTreeSnapshot t = c->SnapshotPrefixTree(100);
  EXPECT_EQ(t.num_salts, 2) << "the unsalted root is not a salt";
  EXPECT_EQ(ChildrenOf(t)[-1].size(), 3u) << "the same tokens under 3 salts are 3 trees";
  c->ResetPrefixCache();
  PrefixTreeSnapshot empty = c->SnapshotPrefixTree(100);
  EXPECT_EQ(empty.num_salts, 0);
  EXPECT_EQ(empty.num_registered, 0);
  EXPECT_TRUE(c->Check().ok());
}

TEST(PrefixTreeSnapshot, DenseBackendHasNoTree) {
  KvCacheOptions o;
  o.layout = TinyLayout();
  o.num_blocks = 16;
  o.max_context = 16;
  auto c = DenseKvCache::Create(o);
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  PrefixTreeSnapshot t = (*c)->SnapshotPrefixTree(100);
  EXPECT_FALSE(t.has_tree);
  EXPECT_EQ(t.blocks_total, 16);
  EXPECT_TRUE(t.nodes.empty());
}

}  // namespace
}  // namespace kvfork
