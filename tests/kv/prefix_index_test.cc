// The prefix index's nodes (issue 25): keyed by the stable hash, each with
// an optional pool block and an optional disk location. First the index on
// its own (the tier's changes fed by hand), then through the paged cache on
// a real disk tier.
#include <gtest/gtest.h>

#include <algorithm>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "kv/block_hash.h"
#include "kv/block_pool.h"
#include "kv/disk_tier.h"
#include "kv/kv_test_util.h"
#include "kv/paged_kv_cache.h"
#include "kv/prefix_index.h"
#include "temp_dir.h"

namespace kvfork {
namespace {

using testing::HoldsPattern;
using testing::Prefill;
using testing::Range;
using testing::TinyLayout;

#define EXPECT_INDEX_OK(index)            \
  do {                                    \
    Status st_ = (index).Check();         \
    EXPECT_TRUE(st_.ok()) << st_.ToString(); \
  } while (0)

constexpr int kBs = 4;

struct Fixture {
  std::unique_ptr<BlockPool> pool;
  std::unique_ptr<PrefixIndex> index;
  explicit Fixture(int64_t blocks = 8) {
    auto p = BlockPool::Create(TinyLayout(kBs), blocks);
    KVFORK_CHECK(p.ok());
    pool = std::move(p).value();
    index = std::make_unique<PrefixIndex>(pool.get());
  }
  // A cached (refcount 0) block registered under parent.
  BlockId AddCached(BlockId parent, uint64_t salt, const std::vector<int32_t>& tokens) {
    const BlockId b = pool->Allocate();
    index->Register(b, parent, salt, tokens);
    pool->DecRef(b);
    pool->Touch(b);
    index->OnCached(b);
    return b;
  }
  // PopLru and give the block back, as the cache does.
  BlockId Evict() {
    const BlockId b = index->PopLru();
    if (b != kNoBlock) pool->Free(b);
    return b;
  }
};

uint64_t HashOf(std::optional<uint64_t> parent, uint64_t salt, const std::vector<int32_t>& t) {
  return ChainBlockHash(parent ? *parent : RootBlockHashSeed(salt), t);
}

const std::vector<int32_t> kA{1, 2, 3, 4}, kB{5, 6, 7, 8}, kC{9, 10, 11, 12};

// pool -> pool + disk -> disk only -> read back: pool + disk, the same node.
TEST(PrefixIndexNodes, PoolThenDiskThenBackIsOneNode) {
  Fixture f;
  const BlockId a = f.AddCached(kNoBlock, 0, kA);
  const NodeId node = f.index->node_of_block(a);
  const uint64_t ha = HashOf(std::nullopt, 0, kA);
  EXPECT_FALSE(f.index->OnDisk(a));
  f.index->OnDiskStored(ha, std::nullopt, kA);  // the write finished
  EXPECT_TRUE(f.index->OnDisk(a));
  EXPECT_INDEX_OK(*f.index);
  EXPECT_EQ(f.Evict(), a);
  // The pool let go; the node stays, on disk only.
  EXPECT_EQ(f.index->num_registered(), 0);
  EXPECT_EQ(f.index->num_nodes(), 1);
  EXPECT_EQ(f.index->Follow(kNoNode, 0, ha, kA.data()), node);
  EXPECT_EQ(f.index->node_block(node), kNoBlock);
  EXPECT_TRUE(f.index->node_on_disk(node));
  EXPECT_EQ(f.index->FindFull(kNoBlock, 0, kA.data()), kNoBlock) << "not in the pool";
  EXPECT_INDEX_OK(*f.index);
  // Read back into another block: the same node gets it.
  const BlockId a2 = f.AddCached(kNoBlock, 0, kA);
  EXPECT_EQ(f.index->node_of_block(a2), node);
  EXPECT_TRUE(f.index->OnDisk(a2));
  EXPECT_EQ(f.index->FindFull(kNoBlock, 0, kA.data()), a2);
  EXPECT_INDEX_OK(*f.index);
  // The tier's LRU drops the file: pool only; then the pool drops it: gone.
  f.index->OnDiskRemoved(ha);
  EXPECT_FALSE(f.index->OnDisk(a2));
  EXPECT_EQ(f.index->num_nodes(), 1);
  EXPECT_EQ(f.Evict(), a2);
  EXPECT_EQ(f.index->num_nodes(), 0);
  EXPECT_EQ(f.index->Follow(kNoNode, 0, ha, kA.data()), kNoNode);
  EXPECT_INDEX_OK(*f.index);
}

// A block evicted before its write finished is placed again when the write
// lands, under its parent if the index holds that one; a disk-only parent
// does not keep a pool child from being evicted.
TEST(PrefixIndexNodes, AWriteThatLandsLaterFindsItsParent) {
  Fixture f;
  const BlockId a = f.AddCached(kNoBlock, 0, kA);
  const BlockId b = f.AddCached(a, 0, kB);
  const uint64_t ha = HashOf(std::nullopt, 0, kA), hb = HashOf(ha, 0, kB);
  EXPECT_EQ(f.Evict(), b);  // not on disk yet: its node goes
  EXPECT_EQ(f.index->num_nodes(), 1);
  f.index->OnDiskStored(hb, ha, kB);  // the write lands
  const NodeId nb = f.index->Follow(f.index->node_of_block(a), 0, hb, kB.data());
  ASSERT_NE(nb, kNoNode);
  EXPECT_TRUE(f.index->node_on_disk(nb));
  PrefixTreeSnapshot t;
  f.index->SnapshotTree(10, &t);
  ASSERT_EQ(t.nodes.size(), 2u);
  EXPECT_EQ(t.nodes[1].parent, t.nodes[0].id) << "placed under its parent";
  EXPECT_TRUE(t.nodes[0].in_pool && !t.nodes[0].on_disk);
  EXPECT_TRUE(!t.nodes[1].in_pool && t.nodes[1].on_disk);
  EXPECT_EQ(t.num_hash_only, 0);
  EXPECT_EQ(f.index->num_evictable_leaves(), 1) << "a disk child keeps no pool block";
  EXPECT_INDEX_OK(*f.index);
}

// The parent loses both locations: its disk-only children keep their files
// and become hash-only (with their subtree); the walk still reaches them by
// hash once the parent is back, and registering one places it.
TEST(PrefixIndexNodes, ChildrenOfALostParentAreKeptByHash) {
  Fixture f;
  const BlockId a = f.AddCached(kNoBlock, 0, kA);
  const uint64_t ha = HashOf(std::nullopt, 0, kA), hb = HashOf(ha, 0, kB),
                 hc = HashOf(hb, 0, kC);
  f.index->OnDiskStored(hb, ha, kB);
  f.index->OnDiskStored(hc, hb, kC);
  EXPECT_EQ(f.index->num_hash_only(), 0) << "B under A, C under B";
  EXPECT_EQ(f.Evict(), a);  // A was never on disk: it goes
  EXPECT_EQ(f.index->num_nodes(), 2);
  EXPECT_EQ(f.index->num_hash_only(), 2);
  EXPECT_INDEX_OK(*f.index);
  // A computed again; the walk finds B and C by the hashes it computes.
  const BlockId a2 = f.AddCached(kNoBlock, 0, kA);
  const NodeId nb = f.index->Follow(f.index->node_of_block(a2), 0, hb, kB.data());
  ASSERT_NE(nb, kNoNode);
  const NodeId nc = f.index->Follow(nb, 0, hc, kC.data());
  ASSERT_NE(nc, kNoNode);
  // B read back: placed under A, with its pool block and its file.
  const BlockId b2 = f.AddCached(a2, 0, kB);
  EXPECT_EQ(f.index->node_of_block(b2), nb);
  EXPECT_TRUE(f.index->OnDisk(b2));
  EXPECT_EQ(f.index->num_hash_only(), 1);
  EXPECT_INDEX_OK(*f.index);
  // The tier loses C: it goes.
  f.index->OnDiskRemoved(hc);
  EXPECT_EQ(f.index->num_nodes(), 2);
  EXPECT_EQ(f.index->num_hash_only(), 0);
  EXPECT_INDEX_OK(*f.index);
}

// A restart: the scan gives hashes only; the first request's blocks are found
// by the hash its walk computes, and reading one places it.
TEST(PrefixIndexNodes, ScannedFilesAreFoundByHashAndPlacedOnRead) {
  Fixture f;
  const uint64_t ha = HashOf(std::nullopt, 0, kA), hb = HashOf(ha, 0, kB);
  f.index->OnDiskFound(hb);
  f.index->OnDiskFound(ha);
  f.index->OnDiskFound(ha);  // once
  EXPECT_EQ(f.index->num_nodes(), 2);
  EXPECT_EQ(f.index->num_hash_only(), 2);
  const NodeId na = f.index->Follow(kNoNode, 0, ha, kA.data());
  ASSERT_NE(na, kNoNode);
  const NodeId nb = f.index->Follow(na, 0, hb, kB.data());
  ASSERT_NE(nb, kNoNode);
  EXPECT_EQ(f.index->Follow(kNoNode, 0, HashOf(std::nullopt, 0, kC), kC.data()), kNoNode);
  const BlockId a = f.AddCached(kNoBlock, 0, kA);
  EXPECT_EQ(f.index->node_of_block(a), na);
  const BlockId b = f.AddCached(a, 0, kB);
  EXPECT_EQ(f.index->node_of_block(b), nb);
  EXPECT_EQ(f.index->num_hash_only(), 0);
  EXPECT_EQ(f.index->num_on_disk(), 2);
  std::vector<uint64_t> pool_hashes = f.index->FullBlockHashes();
  std::sort(pool_hashes.begin(), pool_hashes.end());
  std::vector<uint64_t> want{ha, hb};
  std::sort(want.begin(), want.end());
  EXPECT_EQ(pool_hashes, want);
  // A header announced later changes nothing (one file per hash).
  f.index->OnDiskStored(ha, std::nullopt, kA);
  EXPECT_EQ(f.index->num_nodes(), 2);
  EXPECT_INDEX_OK(*f.index);
}

// Salts: a disk child takes its parent's salt; another salt's walk computes
// other hashes and finds neither the placed nor the hash-only nodes.
TEST(PrefixIndexNodes, SaltsKeepDiskNodesApart) {
  Fixture f;
  const uint64_t salt = PrefixIndex::SaltKeyOf("tenant");
  const BlockId a = f.AddCached(kNoBlock, salt, kA);
  const uint64_t ha = HashOf(std::nullopt, salt, kA), hb = HashOf(ha, salt, kB);
  f.index->OnDiskStored(hb, ha, kB);
  const NodeId na = f.index->node_of_block(a);
  EXPECT_NE(f.index->Follow(na, salt, hb, kB.data()), kNoNode);
  EXPECT_EQ(f.index->Follow(na, 0, hb, kB.data()), kNoNode) << "placed under salt 'tenant'";
  // Unsalted: other hashes from the first block on.
  const uint64_t ha0 = HashOf(std::nullopt, 0, kA);
  EXPECT_NE(ha0, ha);
  EXPECT_EQ(f.index->Follow(kNoNode, 0, ha0, kA.data()), kNoNode);
  f.index->OnDiskFound(HashOf(std::nullopt, salt, kC));  // a salted root known by hash
  EXPECT_EQ(f.index->Follow(kNoNode, 0, HashOf(std::nullopt, 0, kC), kC.data()), kNoNode);
  EXPECT_NE(f.index->Follow(kNoNode, salt, HashOf(std::nullopt, salt, kC), kC.data()), kNoNode);
  EXPECT_INDEX_OK(*f.index);
}

// Check names a broken invariant.
TEST(PrefixIndexNodes, CheckSeesARegisteredBlockFreed) {
  Fixture f;
  const BlockId a = f.AddCached(kNoBlock, 0, kA);
  f.AddCached(a, 0, kB);
  EXPECT_INDEX_OK(*f.index);
  // A pool block given back behind the index's back: registered and free.
  f.pool->Free(a);
  EXPECT_FALSE(f.index->Check().ok());
}

std::unique_ptr<PagedKvCache> DiskCache(const std::string& dir, int64_t blocks) {
  KvCacheOptions o = testing::DiskCacheOptions(dir, kBs, blocks);
  o.disk_preload_bytes = 0;
  auto c = PagedKvCache::Create(o);
  KVFORK_CHECK_MSG(c.ok(), c.status().ToString());
  return std::move(c).value();
}

// Through the cache and a real tier: written blocks become pool + disk,
// eviction leaves disk-only nodes, a request reads them back into the same
// nodes; /v1/cache/tree's snapshot shows each location.
TEST(PagedKvCacheNodes, EvictedBlocksKeepTheirNodesAndComeBack) {
  testing::TempDir dir;
  auto c = DiskCache(dir.path(), 8);
  const std::vector<int32_t> prompt = Range(100, kBs * 3 + 1);
  c->Release(Prefill(*c, prompt));
  EXPECT_EQ(c->WriteAllToDisk(), 4) << "the three full blocks and the partial tail";
  c->Match(prompt, "");  // applies the tier's log
  std::vector<NodeId> nodes;
  for (BlockId b = 0; b < c->pool().num_blocks(); ++b) {
    if (!c->index().IsRegistered(b) || !c->index().IsFull(b)) continue;
    EXPECT_TRUE(c->index().OnDisk(b)) << "block " << b;
    nodes.push_back(c->index().node_of_block(b));
  }
  ASSERT_EQ(nodes.size(), 3u);
  for (int i = 0; i < 3; ++i) c->Release(Prefill(*c, Range(1000 * (i + 2), kBs * 7)));
  c->disk()->Drain();
  EXPECT_EQ(c->Match(prompt, "").num_reused_tokens, kBs * 3) << "the walk reaches the disk nodes";
  PrefixTreeSnapshot t = c->SnapshotPrefixTree(1000);
  int disk_only = 0;
  for (const PrefixTreeNode& n : t.nodes) disk_only += n.on_disk && !n.in_pool;
  EXPECT_GE(disk_only, 3);
  EXPECT_EQ(t.num_nodes, static_cast<int64_t>(t.nodes.size()));
  EXPECT_CHECK_OK(*c);
  PrefixMatch m;
  const SeqId s = Prefill(*c, prompt, "", &m);
  EXPECT_EQ(m.num_reused_tokens, kBs * 3);
  EXPECT_TRUE(HoldsPattern(*c, s));
  const std::span<const BlockId> blocks = c->BlockIds(s);
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(c->index().node_of_block(blocks[i]), nodes[i]) << "block " << i << ": same node";
    EXPECT_TRUE(c->index().OnDisk(blocks[i]));
  }
  EXPECT_CHECK_OK(*c);
  c->Release(s);
}

// A restart's first request reads every block on disk (nodes known by hash
// from the scan, no header read first), and reading places them.
TEST(PagedKvCacheNodes, RestartNodesAreKnownByHashAndPlacedByTheFirstRead) {
  testing::TempDir dir;
  const std::vector<int32_t> prompt = Range(7, kBs * 5 + 2);
  {
    auto c = DiskCache(dir.path(), 16);
    c->Release(Prefill(*c, prompt));
  }
  auto c = DiskCache(dir.path(), 16);
  EXPECT_EQ(c->index().num_hash_only(), 5);
  EXPECT_EQ(c->index().num_registered(), 0);
  // The cache view: no place in the tree yet, so counted, not listed.
  PrefixTreeSnapshot before = c->SnapshotPrefixTree(100);
  EXPECT_EQ(before.num_hash_only, 5);
  EXPECT_EQ(before.num_nodes, 0);
  EXPECT_TRUE(before.nodes.empty());
  EXPECT_FALSE(before.truncated);
  PrefixMatch m;
  const SeqId s = Prefill(*c, prompt, "", &m);
  EXPECT_EQ(m.num_reused_tokens, kBs * 5 + 1);
  EXPECT_TRUE(HoldsPattern(*c, s));
  EXPECT_EQ(c->index().num_hash_only(), 0);
  EXPECT_EQ(c->index().num_on_disk(), 5);
  PrefixTreeSnapshot after = c->SnapshotPrefixTree(100);
  EXPECT_EQ(after.num_hash_only, 0);
  ASSERT_EQ(after.num_nodes, 5) << "the 5 full blocks, in the pool and on disk";
  ASSERT_EQ(after.nodes.size(), 5u);
  for (int i = 0; i < 5; ++i) {
    EXPECT_TRUE(after.nodes[i].in_pool && after.nodes[i].on_disk) << "node " << i;
    EXPECT_EQ(after.nodes[i].parent, i == 0 ? -1 : after.nodes[i - 1].id) << "node " << i;
  }
  EXPECT_CHECK_OK(*c);
  c->Release(s);
}

}  // namespace
}  // namespace kvfork
