// The preload at start (issue 25; docs/kv_cache.md, "Preload at start"): a
// restarted cache reads the blocks the last shutdown wrote into its pool in
// the background and registers them as cached, so the next turn reuses
// what the warm cache would, without a read; it takes whole chains newest
// first up to its bound and the pool's free blocks, evicting nothing; a
// corrupt file it meets is counted, deleted and its block later computed;
// a request arriving mid-preload reads what it needs itself and ends up
// with the same blocks (the preload's copies of them freed).
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "core/cpu_features.h"
#include "kv/block_hash.h"
#include "kv/disk_block_file.h"
#include "kv/disk_preload.h"
#include "kv/disk_tier.h"
#include "kv/kv_test_util.h"
#include "kv/paged_kv_cache.h"
#include "kv/read_gate.h"
#include "temp_dir.h"

namespace kvfork {
namespace {

using testing::Concat;
using testing::HoldsPattern;
using testing::Prefill;
using testing::Range;
using testing::ReadGate;
using testing::TinyLayout;

constexpr int kBlock = 4;

std::unique_ptr<PagedKvCache> MakeCache(const std::string& dir, int64_t preload_bytes,
                                        int64_t num_blocks = 128, bool async = false,
                                        std::function<void(uint64_t)> hook = nullptr) {
  KvCacheOptions o = testing::DiskCacheOptions(dir, kBlock, num_blocks);
  o.disk_async_reads = async;
  o.disk_read_hook = std::move(hook);
  o.disk_preload_bytes = preload_bytes;
  auto c = PagedKvCache::Create(o);
  KVFORK_CHECK_MSG(c.ok(), c.status().ToString());
  return std::move(c).value();
}

int64_t BlockBytes() { return static_cast<int64_t>(TinyLayout(kBlock).BlockBytes()); }

// Runs the preload to its end, as the engine thread would between steps.
void FinishPreload(PagedKvCache& c) {
  for (int i = 0; c.PreloadRunning() && i < 20000; ++i) {
    c.StepBackground();
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  ASSERT_FALSE(c.PreloadRunning());
}

// Each prompt prefilled and released by a first cache, which writes every
// block (full and partial) at its shutdown; returns what that warm cache
// would reuse of each `next` prompt.
std::vector<int64_t> WriteToDisk(const std::string& dir,
                                 const std::vector<std::vector<int32_t>>& prompts,
                                 const std::vector<std::vector<int32_t>>& next = {},
                                 const std::string& salt = "") {
  auto c = MakeCache(dir, 0);
  for (const auto& p : prompts) c->Release(Prefill(*c, p, salt));
  std::vector<int64_t> warm;
  for (const auto& n : next) warm.push_back(c->Match(n, salt).num_reused_tokens);
  return warm;
}

std::string SubDir(const std::string& dir) {
  std::string sub;
  for (const auto& d : std::filesystem::directory_iterator(dir)) sub = d.path().string();
  return sub;
}

uint64_t HashOfBlock(const std::vector<int32_t>& prompt, int block) {
  uint64_t h = RootBlockHashSeed(0);
  for (int b = 0; b <= block; ++b)
    h = ChainBlockHash(h, std::span<const int32_t>(prompt.data() + kBlock * b, kBlock));
  return h;
}

// The rest of a turn admitted with `reused` tokens from the cache: its new
// tokens computed and appended, every block's pattern checked, released.
// The end of every turn here: the sequence's K/V is the pattern its tokens
// give, and releasing it leaves a consistent cache.
void ReleaseChecked(PagedKvCache& c, SeqId s) {
  EXPECT_TRUE(HoldsPattern(c, s));
  c.Release(s);
  EXPECT_CHECK_OK(c);
}

void FinishTurn(PagedKvCache& c, SeqId s, const std::vector<int32_t>& prompt, int64_t reused) {
  const int64_t n = static_cast<int64_t>(prompt.size());
  testing::FakeForward(c, s, prompt, reused, n - reused);
  std::vector<int32_t> rest(prompt.begin() + reused, prompt.end());
  ASSERT_TRUE(c.Append(s, rest).ok());
  ReleaseChecked(c, s);
}

TEST(DiskPreload, ARestartedCacheReusesWhatTheWarmOneDoesWithoutARead) {
  testing::TempDir dir;
  // 10 full blocks and a partial one of 2 tokens; the next turn adds 5.
  const std::vector<int32_t> first = Range(100, kBlock * 10 + 2);
  const std::vector<int32_t> next = Concat(first, Range(900, 5));
  const int64_t warm = WriteToDisk(dir.path(), {first}, {next})[0];
  EXPECT_EQ(warm, kBlock * 10 + 2);
  auto c = MakeCache(dir.path(), /*preload_bytes=*/-1);  // half the pool: 64 blocks
  EXPECT_TRUE(c->PreloadRunning());
  FinishPreload(*c);
  KvCacheStats st = c->Stats();
  EXPECT_EQ(st.disk_preload_planned_blocks, 11);
  EXPECT_EQ(st.disk_preloaded_blocks, 11) << "10 full blocks and the partial one";
  EXPECT_EQ(st.disk_preloaded_bytes, 11 * BlockBytes());
  EXPECT_EQ(st.blocks_cached, 11) << "registered as cached: refcount 0, in the LRU";
  EXPECT_EQ(st.blocks_used, 0);
  EXPECT_GT(st.disk_preload_ms, 0);
  EXPECT_EQ(st.disk.hits_blocks, 11);
  EXPECT_CHECK_OK(*c);
  // The next turn: the warm cache's reuse, from the pool (no load).
  PrefixMatch m;
  StatusOr<SeqId> s = c->Admit(next, "", static_cast<int64_t>(next.size()), &m);
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  EXPECT_FALSE(c->Loading(*s));
  EXPECT_EQ(m.num_reused_tokens, warm);
  EXPECT_EQ(m.num_loading_tokens, 0);
  EXPECT_EQ(c->Stats().disk_hit_blocks, 0) << "no block read for the request";
  EXPECT_EQ(c->Stats().disk.hits_blocks, 11) << "no read after the preload's";
  EXPECT_TRUE(HoldsPattern(*c, *s)) << "the preloaded bytes are the computed ones";
  FinishTurn(*c, *s, next, m.num_reused_tokens);
}

TEST(DiskPreload, OffByDefaultAndSaltedChainsLoadOnRequest) {
  testing::TempDir dir;
  const std::vector<int32_t> p = Range(100, kBlock * 6 + 1);
  WriteToDisk(dir.path(), {p});
  {
    auto c = MakeCache(dir.path(), /*preload_bytes=*/0);
    EXPECT_FALSE(c->PreloadRunning());
    EXPECT_EQ(c->Stats().disk_preloaded_blocks, 0);
  }
  testing::TempDir salted;
  const std::vector<int32_t> next = Concat(p, Range(900, 3));
  const int64_t warm = WriteToDisk(salted.path(), {p}, {next}, "tenant")[0];
  auto c = MakeCache(salted.path(), -1);
  FinishPreload(*c);
  // The files do not hold the salt: the root's hash cannot be checked.
  EXPECT_EQ(c->Stats().disk_preload_planned_blocks, 0);
  EXPECT_EQ(c->Stats().disk_preloaded_blocks, 0);
  PrefixMatch m;
  SeqId s = Prefill(*c, next, "tenant", &m);
  EXPECT_EQ(m.num_reused_tokens, warm) << "read on request, as without the preload";
  EXPECT_EQ(c->Stats().disk_hit_blocks, 7) << "6 full blocks and the partial tail block";
  ReleaseChecked(*c, s);
}

TEST(DiskPreload, StopsAtItsBoundWithWholeChainsOnly) {
  testing::TempDir dir;
  // Two conversations of 5 full blocks and a partial one each (6 files).
  const std::vector<int32_t> a = Range(100, kBlock * 5 + 1);
  const std::vector<int32_t> b = Range(5000, kBlock * 5 + 1);
  WriteToDisk(dir.path(), {a, b});
  for (int64_t bound : {5, 6, 11, 12, 100}) {
    auto c = MakeCache(dir.path(), bound * BlockBytes());
    FinishPreload(*c);
    const int64_t expect = bound >= 12 ? 12 : bound >= 6 ? 6 : 0;
    EXPECT_EQ(c->Stats().disk_preloaded_blocks, expect) << "bound " << bound << " blocks";
    EXPECT_EQ(c->Stats().blocks_cached, expect);
    EXPECT_CHECK_OK(*c);
    if (expect == 6) {
      // One whole conversation: its every block, from the root.
      auto in_pool = [&](const std::vector<int32_t>& p) {
        BlockId parent = kNoBlock;
        for (int k = 0; k < 5; ++k) {
          parent = c->index().FindFull(parent, 0, p.data() + kBlock * k);
          if (parent == kNoBlock) return false;
        }
        return true;
      };
      EXPECT_TRUE(in_pool(a) != in_pool(b));
    }
  }
}

TEST(DiskPreload, StopsAtThePoolsFreeBlocksAndEvictsNothing) {
  testing::TempDir dir;
  const std::vector<int32_t> a = Range(100, kBlock * 12);
  WriteToDisk(dir.path(), {a});
  // A 24-block pool, 16 of them held by a running sequence before the
  // preload's first batch: 8 are free.
  auto c = MakeCache(dir.path(), int64_t{1} << 30, /*num_blocks=*/24);
  const std::vector<int32_t> other = Range(7000, kBlock * 16);
  SeqId held = Prefill(*c, other);
  FinishPreload(*c);
  KvCacheStats st = c->Stats();
  EXPECT_EQ(st.disk_preloaded_blocks, 8);
  EXPECT_EQ(st.blocks_free, 0);
  EXPECT_EQ(st.evictions, 0);
  EXPECT_TRUE(HoldsPattern(*c, held));
  EXPECT_CHECK_OK(*c);
  // The preloaded part of the chain serves; the rest is read on request.
  c->Release(held);
  PrefixMatch m;
  SeqId s = Prefill(*c, Concat(a, {1}), "", &m);
  EXPECT_EQ(m.num_reused_tokens, kBlock * 12);
  EXPECT_EQ(c->Stats().disk_hit_blocks, 4);
  ReleaseChecked(*c, s);
}

TEST(DiskPreload, ACorruptFileIsCountedDeletedAndItsBlockComputed) {
  testing::TempDir dir;
  const std::vector<int32_t> p = Range(100, kBlock * 8 + 2);
  const std::vector<int32_t> next = Concat(p, Range(900, 3));
  WriteToDisk(dir.path(), {p});
  const std::string sub = SubDir(dir.path());
  // Block 3's payload has a flipped byte; block 6's header is torn.
  char name[32];
  std::snprintf(name, sizeof(name), "/%016llx.kvb",
                static_cast<unsigned long long>(HashOfBlock(p, 3)));
  const std::string b3 = sub + name;
  {
    std::fstream f(b3, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(-5, std::ios::end);
    f.put('\x7f');
  }
  std::snprintf(name, sizeof(name), "/%016llx.kvb",
                static_cast<unsigned long long>(HashOfBlock(p, 6)));
  const std::string b6 = sub + name;
  std::filesystem::resize_file(b6, 20);
  auto c = MakeCache(dir.path(), -1);
  FinishPreload(*c);
  KvCacheStats st = c->Stats();
  // The torn header is met while planning: the chains through block 6 (the
  // partial block's, block 7's) are not whole. Blocks 0-5 are planned;
  // block 3 fails its read, so only blocks 0-2 are registered.
  EXPECT_EQ(st.disk.corrupt_blocks, 2) << "the torn header and the flipped payload byte";
  EXPECT_FALSE(std::filesystem::exists(b6));
  EXPECT_FALSE(std::filesystem::exists(b3));
  EXPECT_EQ(st.disk_preload_planned_blocks, 6);
  EXPECT_EQ(st.disk_preloaded_blocks, 3);
  EXPECT_EQ(st.blocks_cached, 3) << "the blocks after the failed one were freed";
  EXPECT_CHECK_OK(*c);
  // Never served: the request reuses the 3 blocks and computes the rest.
  PrefixMatch m;
  SeqId s = Prefill(*c, next, "", &m);
  EXPECT_EQ(m.num_reused_tokens, kBlock * 3);
  ReleaseChecked(*c, s);
}

TEST(DiskPreload, ARequestMidPreloadGetsTheSameBlocks) {
  testing::TempDir dir;
  // 80 full blocks (3 batches) and a partial one.
  const std::vector<int32_t> p = Range(100, kBlock * 80 + 3);
  const std::vector<int32_t> next = Concat(p, Range(900, 2));
  const int64_t warm = WriteToDisk(dir.path(), {p}, {next})[0];
  ReadGate gate;
  auto c = MakeCache(dir.path(), -1, /*num_blocks=*/256, /*async=*/true,
                     [&](uint64_t) { gate.Wait(); });
  // The first batch's reads start and wait at the gate.
  while (gate.reads.load() == 0) {
    c->StepBackground();
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  EXPECT_TRUE(c->PreloadRunning());
  PrefixMatch m;
  StatusOr<SeqId> s = c->Admit(next, "", static_cast<int64_t>(next.size()), &m);
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  EXPECT_TRUE(c->Loading(*s)) << "nothing registered yet: the request reads its own";
  EXPECT_CHECK_OK(*c);
  gate.Open();
  while (!c->FinishLoad(*s, &m)) {
    c->StepBackground();
    c->WaitForLoads(10);
  }
  FinishPreload(*c);
  EXPECT_EQ(m.num_reused_tokens, warm);
  EXPECT_TRUE(HoldsPattern(*c, *s));
  KvCacheStats st = c->Stats();
  // Every block once in the index: the preload's duplicates were freed.
  EXPECT_EQ(c->index().num_registered_full(), 80);
  EXPECT_EQ(st.blocks_used, 82) << "the request's 80 full blocks and 2 of its own";
  // Read twice: at most the batches in flight when the request came (the
  // partial block, which the request keeps private, is preloaded too).
  const int64_t in_flight =
      static_cast<int64_t>(PagedKvCache::kPreloadBatch * PagedKvCache::kPreloadBatchesInFlight);
  EXPECT_LE(st.disk.hits_blocks, 81 + in_flight + 1);
  EXPECT_LE(st.disk_preloaded_blocks, in_flight + 1);
  EXPECT_CHECK_OK(*c);
  FinishTurn(*c, *s, next, m.num_reused_tokens);
}

// A reset ends the preload (its batch in flight cancelled, its blocks
// freed), and a cache destroyed mid-preload stops it cleanly.
TEST(DiskPreload, AResetOrShutdownMidPreloadStopsIt) {
  testing::TempDir dir;
  const std::vector<int32_t> p = Range(100, kBlock * 60);
  WriteToDisk(dir.path(), {p});
  std::atomic<int> reads{0};
  auto slow = [&](uint64_t) {
    ++reads;
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  };
  for (bool reset : {true, false}) {
    reads = 0;
    auto c = MakeCache(dir.path(), -1, /*num_blocks=*/128, /*async=*/true, slow);
    while (reads.load() == 0) {
      c->StepBackground();
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    if (!reset) continue;  // destroyed with a batch in flight
    c->ResetPrefixCache();
    EXPECT_FALSE(c->PreloadRunning());
    EXPECT_LT(c->Stats().disk_preloaded_blocks, 60);
    EXPECT_EQ(c->Stats().blocks_free, 128) << "the batch's blocks were freed, nothing cached";
    EXPECT_CHECK_OK(*c);
    c->StepBackground();  // ended: nothing more
    EXPECT_EQ(c->Stats().blocks_free, 128);
  }
}

// The preload's batches are background loads: with one I/O thread, a
// request's load started while a background job runs is read before the
// background load's other jobs; on_done is called once, when the last ends.
TEST(DiskPreload, ABackgroundLoadYieldsToOthers) {
  testing::TempDir dir;
  std::mutex mu;
  std::vector<uint64_t> order;
  ReadGate gate;
  DiskTierOptions o;
  o.dir = dir.path();
  o.capacity_bytes = int64_t{1} << 30;
  o.fingerprint = 0x5eed;
  o.fsync = false;
  o.read_hook = [&](uint64_t hash) {
    {
      std::lock_guard<std::mutex> lock(mu);
      order.push_back(hash);
    }
    if (hash == 1) gate.Wait();
  };
  auto t = DiskTier::Open(o);
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  constexpr size_t kBytes = 256;
  std::vector<std::vector<uint8_t>> dst(5, std::vector<uint8_t>(kBytes));
  auto job = [&](uint64_t hash, size_t i) {
    DiskBlockWrite w;
    w.hash = hash;
    w.tokens = {static_cast<int32_t>(hash)};
    w.payload.assign(kBytes, static_cast<uint8_t>(hash));
    EXPECT_TRUE((*t)->WriteNow(w).ok());
    DiskReadJob j;
    j.hash = hash;
    j.tokens = w.tokens;
    j.dst = dst[i].data();
    return j;
  };
  std::vector<DiskReadJob> background = {job(1, 0), job(2, 1), job(3, 2)};
  std::vector<DiskReadJob> request = {job(10, 3), job(11, 4)};
  DiskLoader loader(t->get(), kBytes, /*threads=*/1);
  std::atomic<int> done_calls{0};
  DiskLoadOptions bg_options;
  bg_options.background = true;
  bg_options.independent = true;
  bg_options.on_done = [&] { ++done_calls; };
  auto bg = loader.Start(std::move(background), std::move(bg_options));
  while (gate.reads.load() == 0) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  auto fg = loader.Start(std::move(request));
  gate.Open();
  loader.Wait(*fg);
  loader.Wait(*bg);
  EXPECT_EQ(order, (std::vector<uint64_t>{1, 10, 11, 2, 3}));
  EXPECT_EQ(bg->LeadingOk(), 3u);
  EXPECT_EQ(fg->LeadingOk(), 2u);
  EXPECT_EQ(dst[4], std::vector<uint8_t>(kBytes, 11));
  loader.Forget(fg);
  loader.Forget(bg);
  // on_done runs on the worker after the load is done, without the lock.
  for (int i = 0; i < 5000 && done_calls.load() == 0; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  EXPECT_EQ(done_calls.load(), 1);
}

TEST(DiskPreload, PlanTakesWholeChainsNewestFirst) {
  testing::TempDir dir;
  const std::vector<int32_t> a = Range(100, kBlock * 3 + 1);
  WriteToDisk(dir.path(), {a});
  DiskTierOptions o;
  o.dir = dir.path();
  o.capacity_bytes = int64_t{1} << 30;
  o.fingerprint = DiskFingerprint(42, TinyLayout(kBlock), IsaName(ActiveIsa()));
  o.fsync = false;
  auto t = DiskTier::Open(o);
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  std::atomic<bool> stop{false};
  std::vector<PreloadBlock> plan = PlanDiskPreload(**t, kBlock, 100, stop);
  ASSERT_EQ(plan.size(), 4u);
  // Chain order: every block after its parent, the partial one last.
  EXPECT_FALSE(plan[0].parent_hash.has_value());
  for (size_t i = 1; i < plan.size(); ++i) EXPECT_EQ(plan[i].parent_hash, plan[i - 1].hash);
  EXPECT_TRUE(plan[3].partial);
  EXPECT_EQ(plan[2].hash, HashOfBlock(a, 2));
  EXPECT_EQ(PlanDiskPreload(**t, kBlock, 3, stop).size(), 0u) << "the chain needs 4";
}

}  // namespace
}  // namespace kvfork
