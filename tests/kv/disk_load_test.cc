// Reading the disk tier back (issue 25, the read path): the checksum's SSE4.2
// lanes equal the portable ones and change with every flipped bit; an
// older version's file is refused and counted; a payload read in several
// pieces is checked in each; the paged cache's async loads fill
// a sequence's blocks on I/O threads while the caller goes on, and are
// cancelled cleanly; the read-or-recompute rule computes a run a slow disk
// would deliver later than the prefill, reads it where the disk is faster,
// and still reads one run in kProbeEvery it would compute.
#include <gtest/gtest.h>
#include <stdlib.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <set>
#include <thread>
#include <vector>

#include "kv/disk_block_file.h"
#include "kv/disk_checksum.h"
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

std::vector<uint8_t> RandomBytes(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<uint8_t> v(n);
  for (auto& b : v) b = static_cast<uint8_t>(rng());
  return v;
}

TEST(DiskChecksum, Sse42MatchesPortableAndStreamingMatchesOneShot) {
  std::printf("DiskChecksum on SSE4.2 here: %s\n", DiskChecksumUsesSse42() ? "yes" : "no");
  std::mt19937 rng(3);
  for (size_t n : {0, 1, 7, 8, 31, 32, 33, 63, 64, 65, 100, 1000, 4101, (1 << 20) + 3}) {
    std::vector<uint8_t> v = RandomBytes(n + 1, static_cast<uint32_t>(n));
    // Unaligned too: the words are read with memcpy.
    for (size_t off : {size_t{0}, size_t{1}}) {
      const uint8_t* p = v.data() + off;
      const uint64_t one = DiskChecksum(p, n);
      EXPECT_EQ(one, DiskChecksumPortable(p, n)) << "n " << n;
      DiskChecksummer c;
      for (size_t at = 0; at < n;) {
        const size_t piece = std::min<size_t>(n - at, rng() % 70);  // 0 too
        c.Update(p + at, piece);
        at += piece;
      }
      EXPECT_EQ(c.Finish(), one) << "streamed, n " << n;
    }
  }
}

TEST(DiskChecksum, EveryFlippedBitSwappedWordAndLengthChangesIt) {
  std::vector<uint8_t> v = RandomBytes(4096 + 13, 9);
  const uint64_t base = DiskChecksum(v.data(), v.size());
  for (size_t bit = 0; bit < v.size() * 8; ++bit) {
    v[bit / 8] ^= static_cast<uint8_t>(1u << (bit % 8));
    ASSERT_NE(DiskChecksum(v.data(), v.size()), base) << "bit " << bit;
    v[bit / 8] ^= static_cast<uint8_t>(1u << (bit % 8));
  }
  // Two words swapped, in one lane (0 and 4) and across lanes (0 and 1).
  for (size_t other : {size_t{32}, size_t{8}}) {
    std::vector<uint8_t> w = v;
    std::swap_ranges(w.begin(), w.begin() + 8, w.begin() + other);
    EXPECT_NE(DiskChecksum(w.data(), w.size()), base) << "swap with byte " << other;
  }
  std::vector<uint8_t> zeros(64, 0);
  EXPECT_NE(DiskChecksum(zeros.data(), 32), DiskChecksum(zeros.data(), 64));
  EXPECT_NE(DiskChecksum(zeros.data(), 0), DiskChecksum(zeros.data(), 1));
}

DiskTierOptions TierOptions(const std::string& dir) {
  DiskTierOptions o;
  o.dir = dir;
  o.capacity_bytes = int64_t{1} << 30;
  o.fingerprint = 0x5eed;
  o.fsync = false;
  return o;
}

// Files of older versions in this version's directory (1: the splitmix64
// checksum; 2: no partial flag) fail the version check: counted corrupt,
// deleted, never served.
TEST(DiskBlockFile, OlderVersionFilesAreRefusedAndCounted) {
  testing::TempDir dir;
  auto t = DiskTier::Open(TierOptions(dir.path()));
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  for (uint32_t old : {1u, 2u}) {
    DiskBlockWrite w;
    w.hash = 70 + old;
    w.parent_hash = 69;
    w.tokens = {1, 2, 3, 4};
    w.payload = RandomBytes(1000, old);
    ASSERT_TRUE((*t)->WriteNow(w).ok());
    const std::string path = (*t)->PathOf(w.hash);
    {
      std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
      f.seekp(8);
      f.write(reinterpret_cast<const char*>(&old), 4);
    }
    std::vector<uint8_t> got(w.payload.size());
    Status s = (*t)->Read(w.hash, w.parent_hash, w.tokens, got.data(), got.size());
    EXPECT_EQ(s.code(), StatusCode::kNotFound) << s.ToString();
    EXPECT_NE(s.message().find("version " + std::to_string(old) + ", expected 3"),
              std::string::npos)
        << s.ToString();
    EXPECT_EQ((*t)->Stats().corrupt_blocks, old);
    EXPECT_FALSE(std::filesystem::exists(path));
  }
}

// The payload is read and checksummed in pieces (DiskTier::kReadChunkBytes):
// a block of several pieces and a ragged end comes back byte for byte, and
// a flipped byte in its first, a middle or its last piece fails the
// checksum (counted, deleted, never served); with the pages prefaulted
// before each piece (the default) or not (DiskTierOptions::prefault).
class DiskTierPrefault : public ::testing::TestWithParam<bool> {};

TEST_P(DiskTierPrefault, MultiPieceReadsComeBackWholeAndEveryPieceIsChecked) {
  testing::TempDir dir;
  DiskTierOptions o = TierOptions(dir.path());
  o.prefault = GetParam();
  auto t = DiskTier::Open(o);
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  const size_t bytes = 4 * DiskTier::kReadChunkBytes + 13;
  int corrupt = 0;
  for (size_t flip : {SIZE_MAX, size_t{5}, 2 * DiskTier::kReadChunkBytes + 1, bytes - 1}) {
    DiskBlockWrite w;
    w.hash = 500 + flip % 1000;
    w.tokens = {9, 8, 7};
    w.payload = RandomBytes(bytes, static_cast<uint32_t>(flip));
    ASSERT_TRUE((*t)->WriteNow(w).ok());
    const std::string path = (*t)->PathOf(w.hash);
    if (flip != SIZE_MAX) {
      std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
      f.seekg(static_cast<std::streamoff>(DiskBlockHeaderBytes(3) + flip));
      char byte = 0;
      f.read(&byte, 1);
      byte = static_cast<char>(byte ^ 0x04);
      f.seekp(static_cast<std::streamoff>(DiskBlockHeaderBytes(3) + flip));
      f.write(&byte, 1);
    }
    std::vector<uint8_t> got(bytes);
    Status s = (*t)->Read(w.hash, std::nullopt, w.tokens, got.data(), got.size());
    if (flip == SIZE_MAX) {
      ASSERT_TRUE(s.ok()) << s.ToString();
      EXPECT_EQ(got, w.payload);
    } else {
      ++corrupt;
      EXPECT_EQ(s.code(), StatusCode::kNotFound) << "byte " << flip;
      EXPECT_NE(s.message().find("payload checksum"), std::string::npos) << s.ToString();
      EXPECT_FALSE(std::filesystem::exists(path));
    }
    EXPECT_EQ((*t)->Stats().corrupt_blocks, corrupt);
  }
}

INSTANTIATE_TEST_SUITE_P(OnAndOff, DiskTierPrefault, ::testing::Bool());

KvCacheOptions CacheOptions(const std::string& dir, bool async,
                            std::function<void(uint64_t)> hook = nullptr) {
  KvCacheOptions o;
  o.layout = TinyLayout();
  o.num_blocks = 128;
  o.disk_dir = dir;
  o.disk_capacity_bytes = int64_t{1} << 30;
  o.disk_queue_blocks = 1024;
  o.model_fingerprint = 42;
  o.disk_async_reads = async;
  o.disk_read_hook = std::move(hook);
  return o;
}

std::unique_ptr<PagedKvCache> MakeCache(const KvCacheOptions& o) {
  auto c = PagedKvCache::Create(o);
  KVFORK_CHECK_MSG(c.ok(), c.status().ToString());
  return std::move(c).value();
}

std::unique_ptr<PagedKvCache> MakeCache(const std::string& dir, bool async,
                                        std::function<void(uint64_t)> hook = nullptr) {
  return MakeCache(CacheOptions(dir, async, std::move(hook)));
}

// Writes prompts' full blocks to dir (a clean shutdown of a first cache).
void WriteToDisk(const std::string& dir, const std::vector<std::vector<int32_t>>& prompts) {
  auto c = MakeCache(dir, false);
  for (const auto& p : prompts) c->Release(Prefill(*c, p));
}

TEST(DiskLoad, AsyncAdmitLoadsWhileTheCallerGoesOn) {
  testing::TempDir dir;
  // 40 full blocks + 2: the shutdown writes 40 full and 1 partial block, and
  // the load reads 40 blocks and 1 token of the partial one (len - 1).
  const std::vector<int32_t> prompt = Range(100, 4 * 40 + 2);
  WriteToDisk(dir.path(), {prompt});
  ReadGate gate;
  auto c = MakeCache(dir.path(), /*async=*/true, [&](uint64_t) { gate.Wait(); });
  PrefixMatch m;
  StatusOr<SeqId> s = c->Admit(prompt, "", static_cast<int64_t>(prompt.size()), &m);
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  EXPECT_TRUE(c->Loading(*s));
  EXPECT_EQ(m.num_reused_tokens, 0);
  EXPECT_EQ(m.num_loading_tokens, 161);
  EXPECT_EQ(c->NumTokens(*s), 0);
  EXPECT_FALSE(c->FinishLoad(*s, &m));
  const std::vector<int32_t> one = {1};
  EXPECT_EQ(c->Append(*s, one).code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(c->Fork(*s).status().code(), StatusCode::kFailedPrecondition);
  EXPECT_CHECK_OK(*c);
  // The caller goes on: another prompt prefills while the reads wait.
  SeqId other = Prefill(*c, Range(5000, 4 * 6));
  EXPECT_TRUE(HoldsPattern(*c, other));
  EXPECT_CHECK_OK(*c);
  gate.Open();
  while (!c->FinishLoad(*s, &m)) c->WaitForLoads(100);
  EXPECT_FALSE(c->Loading(*s));
  EXPECT_EQ(m.num_reused_tokens, 161);
  EXPECT_EQ(m.num_tail_tokens, 1);
  EXPECT_EQ(c->NumTokens(*s), 161);
  EXPECT_TRUE(HoldsPattern(*c, *s));
  EXPECT_EQ(c->Stats().disk_hit_blocks, 41) << "40 full blocks and the partial one";
  EXPECT_GT(c->Stats().disk_read_ns_per_block, 0);
  EXPECT_EQ(gate.reads.load(), 41);
  EXPECT_CHECK_OK(*c);
  // The rest computes as usual and the blocks are in the index.
  std::vector<int32_t> rest(prompt.begin() + 161, prompt.end());
  testing::FakeForward(*c, *s, prompt, 161, 1);
  ASSERT_TRUE(c->Append(*s, rest).ok());
  c->Release(*s);
  c->Release(other);
  EXPECT_EQ(c->Match(prompt, "").num_reused_tokens, 160 + 1);
  EXPECT_CHECK_OK(*c);
}

// KvCacheOptions::disk_read_threads: 1 reads a run on one thread; 3 has
// three reads of one run in flight at once (each waits in the hook until
// the third arrives, or 10 s; fewer threads could never get there).
TEST(DiskLoad, ReadThreadsOptionSetsTheIoThreads) {
  testing::TempDir dir;
  const std::vector<int32_t> prompt = Range(100, 4 * 12 + 1);
  WriteToDisk(dir.path(), {prompt});
  {
    std::mutex mu;
    std::set<std::thread::id> readers;
    KvCacheOptions o = CacheOptions(dir.path(), /*async=*/false, [&](uint64_t) {
      std::lock_guard<std::mutex> lock(mu);
      readers.insert(std::this_thread::get_id());
    });
    o.disk_read_threads = 1;
    auto c = MakeCache(o);
    PrefixMatch m;
    c->Release(Prefill(*c, prompt, "", &m));
    EXPECT_EQ(m.num_reused_tokens, 48);
    EXPECT_EQ(readers.size(), 1u);
  }
  std::mutex mu;
  std::condition_variable cv;
  int in_flight = 0, most = 0;
  KvCacheOptions o = CacheOptions(dir.path(), /*async=*/false, [&](uint64_t) {
    std::unique_lock<std::mutex> lock(mu);
    most = std::max(most, ++in_flight);
    cv.notify_all();
    cv.wait_for(lock, std::chrono::seconds(10), [&] { return most >= 3; });
    --in_flight;
  });
  o.disk_read_threads = 3;
  auto c = MakeCache(o);
  PrefixMatch m;
  c->Release(Prefill(*c, prompt, "", &m));
  EXPECT_EQ(m.num_reused_tokens, 48);
  EXPECT_EQ(most, 3);
}

TEST(DiskLoad, ReleaseWhileLoadingCancelsTheReads) {
  testing::TempDir dir;
  const std::vector<int32_t> prompt = Range(100, 4 * 40 + 2);
  WriteToDisk(dir.path(), {prompt});
  std::atomic<int> reads{0};
  auto c = MakeCache(dir.path(), /*async=*/true, [&](uint64_t) {
    ++reads;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  });
  StatusOr<SeqId> s = c->Admit(prompt, "", static_cast<int64_t>(prompt.size()), nullptr);
  ASSERT_TRUE(s.ok());
  ASSERT_TRUE(c->Loading(*s));
  c->Release(*s);  // waits only for the reads in flight
  const int read_before = reads.load();
  EXPECT_LT(read_before, 41);
  std::this_thread::sleep_for(std::chrono::milliseconds(30));
  EXPECT_EQ(reads.load(), read_before) << "no read after the release";
  EXPECT_EQ(c->Stats().blocks_used, 0);
  EXPECT_EQ(c->Stats().disk_hit_blocks, 0);
  EXPECT_CHECK_OK(*c);
  // The files are intact: a new admission reads them all.
  s = c->Admit(prompt, "", static_cast<int64_t>(prompt.size()), nullptr);
  ASSERT_TRUE(s.ok());
  PrefixMatch m;
  while (!c->FinishLoad(*s, &m)) c->WaitForLoads(100);
  EXPECT_EQ(m.num_reused_tokens, 161);
  EXPECT_TRUE(HoldsPattern(*c, *s));
  c->Release(*s);
  EXPECT_CHECK_OK(*c);
}

TEST(DiskLoad, ReadOrRecomputeFollowsTheMeasuredCosts) {
  testing::TempDir dir;
  const std::vector<int32_t> a = Range(100, 4 * 20 + 1);
  const std::vector<int32_t> b = Range(1000, 4 * 20 + 1);
  const std::vector<int32_t> d = Range(3000, 4 * 20 + 1);
  WriteToDisk(dir.path(), {a, b, d});
  // A slow disk: 3 ms a block.
  auto c = MakeCache(dir.path(), /*async=*/false, [](uint64_t) {
    std::this_thread::sleep_for(std::chrono::milliseconds(3));
  });
  // Nothing measured yet: read.
  PrefixMatch m;
  c->Release(Prefill(*c, a, "", &m));
  EXPECT_EQ(m.num_reused_tokens, 80);
  const double read_ns = c->Stats().disk_read_ns_per_block;
  EXPECT_GT(read_ns, 3e5) << "at least 3 ms over at most 4 threads, and some";
  // A prefill that computes a block (4 tokens) in 4 us: computing wins.
  c->SetPrefillCost(1000);
  EXPECT_EQ(c->Match(b, "").num_reused_tokens, 0);
  SeqId s = Prefill(*c, b, "", &m);
  EXPECT_EQ(m.num_reused_tokens, 0);
  EXPECT_TRUE(HoldsPattern(*c, s));
  EXPECT_EQ(c->Stats().disk_recomputed_blocks, 20);
  EXPECT_EQ(c->Stats().disk_hit_blocks, 20);
  c->Release(s);
  EXPECT_CHECK_OK(*c);
  // A prefill of 1 s a token: reading wins.
  c->SetPrefillCost(1e9);
  EXPECT_EQ(c->Match(d, "").num_reused_tokens, 80);
  c->Release(Prefill(*c, d, "", &m));
  EXPECT_EQ(m.num_reused_tokens, 80);
  // Cheap compute again: b is computed, but one run in kProbeEvery is read
  // (the estimate has to learn that a disk got faster). ResetPrefixCache
  // drops b's pool blocks (without writing them) so the chain is on disk.
  c->SetPrefillCost(1000);
  int reads = 0;
  for (int i = 0; i < 16; ++i) {
    c->ResetPrefixCache();
    c->Release(Prefill(*c, b, "", &m));
    EXPECT_TRUE(m.num_reused_tokens == 0 || m.num_reused_tokens == 80) << m.num_reused_tokens;
    reads += m.num_reused_tokens == 80;
  }
  EXPECT_EQ(reads, 1);
  EXPECT_CHECK_OK(*c);
}

// A disk run the rule computes leaves the plan at the pool's chain end: the
// pool's tail is looked for at that offset. (It used to be looked for at the
// offset after the skipped disk run, under the pool chain's last block, so a
// partial child there whose tokens happened to equal the prompt's later ones
// had its K/V copied to the wrong positions.)
TEST(DiskLoad, AComputedDiskRunLeavesNoTailFromAnotherOffset) {
  testing::TempDir dir;
  const std::vector<int32_t> a = Range(100, 4), b = Range(200, 4), x = Range(300, 2);
  WriteToDisk(dir.path(), {Concat(Concat(a, b), Range(900, 1)), Range(5000, 9)});
  auto c = MakeCache(dir.path(), /*async=*/false, [](uint64_t) {
    std::this_thread::sleep_for(std::chrono::milliseconds(3));
  });
  PrefixMatch m;
  c->Release(Prefill(*c, Range(5000, 9), "", &m));  // measures the slow disk
  ASSERT_EQ(m.num_reused_tokens, 8);
  c->SetPrefillCost(1000);  // computing a block (4 us) beats reading it
  // The pool: block a (computed) and its partial child x.
  c->Release(Prefill(*c, Concat(a, x), "", &m));
  ASSERT_EQ(m.num_reused_tokens, 0);
  // a (pool), b (disk, computed), then x's tokens: only a is reused.
  const std::vector<int32_t> prompt = Concat(Concat(Concat(a, b), x), Range(400, 3));
  EXPECT_EQ(c->Match(prompt, "").num_reused_tokens, 4);
  SeqId s = Prefill(*c, prompt, "", &m);
  EXPECT_EQ(m.num_reused_tokens, 4);
  EXPECT_EQ(m.num_tail_tokens, 0);
  EXPECT_TRUE(HoldsPattern(*c, s));
  c->Release(s);
  EXPECT_CHECK_OK(*c);
}

// Every KV format round-trips through the disk tier (the fingerprint names
// the format; the tier moves the pool block's bytes, scales included): the
// bytes read back into a new process's pool equal the ones written.
TEST(DiskLoad, EveryKvFormatComesBackByteForByte) {
  for (KvDType dtype :
       {KvDType::kF32, KvDType::kBf16, KvDType::kInt8, KvDType::kQ4, KvDType::kQ4r}) {
    testing::TempDir dir;
    KvCacheOptions o;
    o.layout = TinyLayout(4, dtype);
    o.layout.head_dim = 32;  // q4's group
    o.num_blocks = 32;
    o.disk_dir = dir.path();
    o.disk_capacity_bytes = int64_t{1} << 30;
    o.model_fingerprint = 42;
    o.disk_async_reads = true;
    const std::vector<int32_t> prompt = Range(10, 4 * 5 + 1);
    std::vector<std::vector<uint8_t>> written;
    {
      auto c = PagedKvCache::Create(o);
      ASSERT_TRUE(c.ok()) << c.status().ToString();
      StatusOr<SeqId> s = (*c)->Admit(prompt, "", static_cast<int64_t>(prompt.size()), nullptr);
      ASSERT_TRUE(s.ok());
      const size_t bytes = (*c)->pool().block_bytes();
      for (int b = 0; b < 5; ++b) {
        std::vector<uint8_t> v = RandomBytes(bytes, static_cast<uint32_t>(b + 7));
        std::memcpy((*c)->BlockTable(*s)[b], v.data(), bytes);
        written.push_back(std::move(v));
      }
      ASSERT_TRUE((*c)->Append(*s, prompt).ok());
      (*c)->Release(*s);
    }  // writes the 5 full blocks
    auto c = PagedKvCache::Create(o);
    ASSERT_TRUE(c.ok());
    PrefixMatch m;
    StatusOr<SeqId> s = (*c)->Admit(prompt, "", static_cast<int64_t>(prompt.size()), &m);
    ASSERT_TRUE(s.ok());
    while (!(*c)->FinishLoad(*s, &m)) (*c)->WaitForLoads(100);
    EXPECT_EQ(m.num_reused_tokens, 20) << KvDTypeName(dtype);
    for (int b = 0; b < 5; ++b)
      EXPECT_EQ(std::memcmp((*c)->BlockTable(*s)[b], written[b].data(), written[b].size()), 0)
          << KvDTypeName(dtype) << " block " << b;
    (*c)->Release(*s);
    EXPECT_CHECK_OK(**c);
  }
}

}  // namespace
}  // namespace kvfork
