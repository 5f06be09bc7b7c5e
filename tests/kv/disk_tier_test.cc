// The disk tier of the prefix cache (issue 25): the block file format
// (round trip; every truncation, flipped byte and foreign fingerprint is
// refused), the tier (write, read, restart, corrupt files counted and
// deleted, LRU within capacity, dropped writes, leftover temp files, a
// 100k-file directory indexed by one scan) and the paged cache on top of it
// (evicted blocks come back from disk; a restart on the same directory
// reuses the whole prefix; a corrupt block is recomputed, never served),
// and the tier's KV events (medium DISK: written, evicted, corrupt, found at
// start), whose per-medium sets equal the index and the tier.
#include <gtest/gtest.h>
#include <stdlib.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/resource.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <functional>
#include <fstream>
#include <map>
#include <memory>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "kv/block_hash.h"
#include "kv/disk_block_file.h"
#include "kv/disk_tier.h"
#include "kv/kv_test_util.h"
#include "kv/model_files_fingerprint.h"
#include "kv/paged_kv_cache.h"
#include "temp_dir.h"

namespace kvfork {
namespace {

using testing::Concat;
using testing::HoldsPattern;
using testing::Prefill;
using testing::Range;
using testing::TinyLayout;

std::vector<uint8_t> Bytes(size_t n, uint8_t seed) {
  std::vector<uint8_t> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = static_cast<uint8_t>(seed + i * 31);
  return v;
}

DiskBlockHeader SampleHeader() {
  DiskBlockHeader h;
  h.fingerprint = 0x1234;
  h.block_hash = 0xabcdef;
  h.parent_hash = 0x777;
  h.tokens = {5, 6, 7, 8};
  return h;
}

// Decodes a whole file as the tier does; OK only if every check passes.
Status DecodeWhole(const std::vector<uint8_t>& file, const DiskBlockHeader& want, size_t payload) {
  KVFORK_ASSIGN_OR_RETURN(DiskBlockHeader h, DecodeDiskBlockHeader(file, file.size()));
  KVFORK_RETURN_IF_ERROR(CheckDiskBlockIdentity(h, want.fingerprint, want.block_hash,
                                                want.parent_hash, want.tokens, want.partial,
                                                payload));
  size_t hb = DiskBlockHeaderBytes(h.tokens.size());
  return VerifyDiskPayload(h, std::span<const uint8_t>(file.data() + hb, file.size() - hb));
}

TEST(DiskBlockFile, RoundTrips) {
  DiskBlockHeader h = SampleHeader();
  std::vector<uint8_t> payload = Bytes(256, 3);
  std::vector<uint8_t> file = EncodeDiskBlock(h, payload);
  ASSERT_EQ(file.size(), DiskBlockHeaderBytes(4) + 256);
  EXPECT_TRUE(DecodeWhole(file, h, 256).ok());
  auto d = DecodeDiskBlockHeader(file, file.size());
  ASSERT_TRUE(d.ok());
  EXPECT_EQ(d->tokens, h.tokens);
  EXPECT_EQ(d->parent_hash, h.parent_hash);
  // A first block has no parent, and says so.
  h.parent_hash.reset();
  file = EncodeDiskBlock(h, payload);
  d = DecodeDiskBlockHeader(file, file.size());
  ASSERT_TRUE(d.ok());
  EXPECT_FALSE(d->parent_hash.has_value());
  EXPECT_FALSE(d->partial);
  // A partial block says so (version 3's flags word).
  h = SampleHeader();
  h.partial = true;
  h.block_hash = DiskPartialKey(*h.parent_hash, h.tokens);
  file = EncodeDiskBlock(h, payload);
  EXPECT_TRUE(DecodeWhole(file, h, 256).ok());
  d = DecodeDiskBlockHeader(file, file.size());
  ASSERT_TRUE(d.ok());
  EXPECT_TRUE(d->partial);
  EXPECT_EQ(d->parent_hash, h.parent_hash);
  // Its key is never the hash a full block of the same tokens would have.
  EXPECT_NE(h.block_hash, ChainBlockHash(*h.parent_hash, h.tokens));
}

// A header claiming no tokens is corrupt (no block is written with none),
// and refused before its token ids would be copied (an empty copy into an
// empty vector is undefined behaviour that UBSan reports).
TEST(DiskBlockFile, ZeroTokensAreRefused) {
  DiskBlockHeader h = SampleHeader();
  h.tokens.clear();
  const std::vector<uint8_t> file = EncodeDiskBlock(h, Bytes(64, 1));
  auto d = DecodeDiskBlockHeader(file, file.size());
  ASSERT_FALSE(d.ok());
  EXPECT_NE(d.status().message().find("no tokens"), std::string::npos) << d.status().message();
}

TEST(DiskBlockFile, EveryTruncationIsRefused) {
  DiskBlockHeader h = SampleHeader();
  std::vector<uint8_t> file = EncodeDiskBlock(h, Bytes(128, 9));
  for (size_t n = 0; n < file.size(); ++n) {
    std::vector<uint8_t> cut(file.begin(), file.begin() + n);
    EXPECT_FALSE(DecodeWhole(cut, h, 128).ok()) << "truncated to " << n << " bytes";
  }
}

TEST(DiskBlockFile, EveryFlippedByteIsRefused) {
  DiskBlockHeader h = SampleHeader();
  std::vector<uint8_t> file = EncodeDiskBlock(h, Bytes(128, 1));
  for (size_t i = 0; i < file.size(); ++i) {
    std::vector<uint8_t> bad = file;
    bad[i] ^= 0x40;
    EXPECT_FALSE(DecodeWhole(bad, h, 128).ok()) << "byte " << i << " flipped";
  }
}

TEST(DiskBlockFile, AnotherFingerprintOrIdentityIsRefused) {
  DiskBlockHeader h = SampleHeader();
  std::vector<uint8_t> file = EncodeDiskBlock(h, Bytes(64, 2));
  DiskBlockHeader other = h;
  other.fingerprint = 0x9999;
  EXPECT_FALSE(DecodeWhole(file, other, 64).ok());
  other = h;
  other.parent_hash = 1;
  EXPECT_FALSE(DecodeWhole(file, other, 64).ok());
  other = h;
  other.tokens[3] = 9;
  EXPECT_FALSE(DecodeWhole(file, other, 64).ok());
  EXPECT_FALSE(DecodeWhole(file, h, 128).ok());  // the pool's blocks are another size
  other = h;
  other.partial = true;  // a full block is never read as a partial one
  EXPECT_FALSE(DecodeWhole(file, other, 64).ok());
  std::vector<uint8_t> partial_file = EncodeDiskBlock(other, Bytes(64, 2));
  EXPECT_FALSE(DecodeWhole(partial_file, h, 64).ok());  // nor the other way round
}

TEST(DiskBlockFile, FingerprintCoversLayoutModelAndIsa) {
  KvLayout l = TinyLayout();
  uint64_t base = DiskFingerprint(1, l, "avx2");
  EXPECT_NE(base, DiskFingerprint(2, l, "avx2"));
  EXPECT_NE(base, DiskFingerprint(1, l, "avx512"));
  for (int field = 0; field < 5; ++field) {
    KvLayout m = l;
    if (field == 0) m.dtype = KvDType::kBf16;
    if (field == 1) m.block_size = 8;
    if (field == 2) m.num_layers = 3;
    if (field == 3) m.num_kv_heads = 1;
    if (field == 4) m.head_dim = 8;
    EXPECT_NE(base, DiskFingerprint(1, m, "avx2")) << "layout field " << field;
  }
  EXPECT_EQ(base, DiskFingerprint(1, l, "avx2"));
  // The 4-bit formats: the same bytes per block, other meanings.
  KvLayout q4 = l, q4r = l, i8 = l;
  q4.head_dim = q4r.head_dim = i8.head_dim = 32;
  q4.dtype = KvDType::kQ4;
  q4r.dtype = KvDType::kQ4r;
  i8.dtype = KvDType::kInt8;
  EXPECT_NE(DiskFingerprint(1, q4, "avx2"), DiskFingerprint(1, q4r, "avx2"));
  EXPECT_NE(DiskFingerprint(1, q4, "avx2"), DiskFingerprint(1, i8, "avx2"));
}

void WriteFile(const std::string& path, const std::vector<uint8_t>& bytes) {
  std::ofstream(path, std::ios::binary | std::ios::trunc)
      .write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
}

// Two checkpoints of one shape (same headers and sizes, other weights) must
// not share a fingerprint; a byte-identical copy must.
TEST(ModelFilesFingerprint, TellsCheckpointsOfOneShapeApart) {
  testing::TempDir dir;
  const std::string a = dir.path() + "/a", b = dir.path() + "/b", c = dir.path() + "/c";
  for (const std::string& d : {a, b, c}) std::filesystem::create_directory(d);
  std::vector<uint8_t> weights = Bytes(3 << 20, 1);  // header MiB + 2 MiB of "weights"
  std::vector<uint8_t> other = weights;
  for (size_t i = 1 << 20; i < other.size(); ++i) other[i] ^= 0x11;  // other weights, same header
  for (const std::string& d : {a, b, c}) WriteFile(d + "/config.json", {'{', '}'});
  WriteFile(a + "/model.safetensors", weights);
  WriteFile(b + "/model.safetensors", weights);
  WriteFile(c + "/model.safetensors", other);
  auto fa = ModelFilesFingerprint(a), fb = ModelFilesFingerprint(b), fc = ModelFilesFingerprint(c);
  ASSERT_TRUE(fa.ok() && fb.ok() && fc.ok()) << fa.status().ToString();
  EXPECT_EQ(*fa, *fb);
  EXPECT_NE(*fa, *fc);
  // A single .gguf file, and a split one: every part counts.
  WriteFile(dir.path() + "/m.gguf", weights);
  WriteFile(dir.path() + "/s-00001-of-00002.gguf", weights);
  WriteFile(dir.path() + "/s-00002-of-00002.gguf", weights);
  auto single = ModelFilesFingerprint(dir.path() + "/m.gguf");
  auto split = ModelFilesFingerprint(dir.path() + "/s-00001-of-00002.gguf");
  ASSERT_TRUE(single.ok() && split.ok());
  WriteFile(dir.path() + "/s-00002-of-00002.gguf", other);
  auto split2 = ModelFilesFingerprint(dir.path() + "/s-00001-of-00002.gguf");
  ASSERT_TRUE(split2.ok());
  EXPECT_NE(*split, *split2) << "the second part changed";
  EXPECT_NE(*single, *split);
  EXPECT_EQ(ModelFilesFingerprint(dir.path() + "/missing").status().code(), StatusCode::kNotFound);
}

DiskTierOptions TierOptions(const std::string& dir, int64_t capacity = int64_t{1} << 30) {
  DiskTierOptions o;
  o.dir = dir;
  o.capacity_bytes = capacity;
  o.fingerprint = 0x5eed;
  o.fsync = false;  // tests: rename is what makes a file appear whole
  return o;
}

DiskBlockWrite Block(uint64_t hash, size_t bytes, uint8_t seed) {
  DiskBlockWrite w;
  w.hash = hash;
  w.parent_hash = hash - 1;
  w.tokens = {static_cast<int32_t>(hash), 2, 3, 4};
  w.payload = Bytes(bytes, seed);
  return w;
}

std::unique_ptr<DiskTier> OpenTier(const DiskTierOptions& o) {
  auto t = DiskTier::Open(o);
  KVFORK_CHECK_MSG(t.ok(), t.status().ToString());
  return std::move(t).value();
}

Status ReadBack(DiskTier& t, const DiskBlockWrite& w, std::vector<uint8_t>* out) {
  out->assign(w.payload.size(), 0);
  return t.Read(w.hash, w.parent_hash, w.tokens, out->data(), out->size());
}

TEST(DiskTier, WritesReadsAndSurvivesReopen) {
  testing::TempDir dir;
  DiskBlockWrite a = Block(100, 512, 1);
  {
    auto t = OpenTier(TierOptions(dir.path()));
    EXPECT_FALSE(t->Contains(100));
    ASSERT_TRUE(t->Enqueue(a));
    t->Drain();
    EXPECT_TRUE(t->Contains(100));
    std::vector<uint8_t> got;
    ASSERT_TRUE(ReadBack(*t, a, &got).ok());
    EXPECT_EQ(got, a.payload);
    EXPECT_EQ(t->Stats().hits_blocks, 1);
    EXPECT_EQ(t->Stats().blocks_written, 1);
  }
  auto t = OpenTier(TierOptions(dir.path()));
  EXPECT_EQ(t->Stats().scanned_files, 1);
  std::vector<uint8_t> got;
  ASSERT_TRUE(ReadBack(*t, a, &got).ok());
  EXPECT_EQ(got, a.payload);
  // Another fingerprint lives in another subdirectory: it sees nothing.
  DiskTierOptions other = TierOptions(dir.path());
  other.fingerprint = 0x07e5;
  EXPECT_FALSE(OpenTier(other)->Contains(100));
}

// A damaged file is counted, deleted and reported as a miss.
void ExpectDropped(const std::string& dir, const DiskBlockWrite& w,
                   const std::function<void(const std::string& path)>& damage) {
  auto t = OpenTier(TierOptions(dir));
  ASSERT_TRUE(t->WriteNow(w).ok());
  std::string path = t->PathOf(w.hash);
  damage(path);
  std::vector<uint8_t> got;
  Status s = ReadBack(*t, w, &got);
  EXPECT_EQ(s.code(), StatusCode::kNotFound) << s.ToString();
  EXPECT_EQ(t->Stats().corrupt_blocks, 1);
  EXPECT_FALSE(t->Contains(w.hash));
  EXPECT_FALSE(std::filesystem::exists(path));
}

TEST(DiskTier, CorruptTruncatedAndForeignFilesAreDeletedNotServed) {
  testing::TempDir dir;
  DiskBlockWrite w = Block(7, 300, 4);
  ExpectDropped(dir.path(), w, [](const std::string& p) {  // a flipped payload byte
    std::fstream f(p, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(-5, std::ios::end);
    f.put('\x55');
  });
  ExpectDropped(dir.path(), w, [](const std::string& p) {  // torn: half the file
    std::filesystem::resize_file(p, std::filesystem::file_size(p) / 2);
  });
  ExpectDropped(dir.path(), w, [](const std::string& p) {  // empty
    std::filesystem::resize_file(p, 0);
  });
  ExpectDropped(dir.path(), w, [&](const std::string& p) {  // another fingerprint's file
    DiskBlockHeader h;
    h.fingerprint = 0xbad;
    h.block_hash = w.hash;
    h.parent_hash = w.parent_hash;
    h.tokens = w.tokens;
    std::vector<uint8_t> bytes = EncodeDiskBlock(h, w.payload);
    std::ofstream(p, std::ios::binary | std::ios::trunc)
        .write(reinterpret_cast<const char*>(bytes.data()), bytes.size());
  });
}

// A block file that cannot be read at all (here a directory took its name,
// so pread fails with EISDIR) is an error counted as corrupt, never a header
// decoded from a failed read's length.
TEST(DiskTier, UnreadableBlockFileIsAnErrorNotServed) {
  testing::TempDir dir;
  DiskBlockWrite w = Block(9, 300, 4);
  auto t = OpenTier(TierOptions(dir.path()));
  ASSERT_TRUE(t->WriteNow(w).ok());
  const std::string path = t->PathOf(w.hash);
  std::filesystem::remove(path);
  std::filesystem::create_directory(path);
  std::vector<uint8_t> got;
  Status s = ReadBack(*t, w, &got);
  EXPECT_FALSE(s.ok());
  EXPECT_EQ(t->Stats().corrupt_blocks, 1);
  EXPECT_FALSE(t->Contains(w.hash));
}

TEST(DiskTier, LruWithinCapacity) {
  testing::TempDir dir;
  const size_t file_bytes = DiskBlockHeaderBytes(4) + 1000;
  auto t = OpenTier(TierOptions(dir.path(), 3 * file_bytes));
  for (uint64_t h = 1; h <= 3; ++h) ASSERT_TRUE(t->WriteNow(Block(h, 1000, 0)).ok());
  std::vector<uint8_t> got;
  ASSERT_TRUE(ReadBack(*t, Block(1, 1000, 0), &got).ok());  // 1 is now the newest
  ASSERT_TRUE(t->WriteNow(Block(4, 1000, 0)).ok());          // evicts 2, the oldest
  EXPECT_TRUE(t->Contains(1));
  EXPECT_FALSE(t->Contains(2));
  EXPECT_FALSE(std::filesystem::exists(t->PathOf(2)));
  EXPECT_TRUE(t->Contains(3));
  EXPECT_TRUE(t->Contains(4));
  EXPECT_EQ(t->Stats().evicted_blocks, 1);
  EXPECT_EQ(t->Stats().bytes, static_cast<int64_t>(3 * file_bytes));
}

TEST(DiskTier, FullQueueDropsAndCountsNeverBlocks) {
  testing::TempDir dir;
  DiskTierOptions o = TierOptions(dir.path());
  o.queue_blocks = 1;
  auto t = OpenTier(o);
  int accepted = 0;
  int accepted_lazy = 0;
  int copies = 0;
  for (uint64_t h = 1; h <= 200; ++h) {
    if (h % 2 == 0) {
      accepted += t->Enqueue(Block(h, 4096, 0)) ? 1 : 0;
    } else {
      bool ok = t->Enqueue(h, [&] { ++copies; return Block(h, 4096, 0); });
      accepted += ok ? 1 : 0;
      accepted_lazy += ok ? 1 : 0;
    }
  }
  EXPECT_EQ(copies, accepted_lazy) << "a dropped write never copies the block";
  t->Drain();
  DiskTierStats s = t->Stats();
  EXPECT_EQ(accepted + s.writes_dropped, 200);
  EXPECT_EQ(s.blocks_written, accepted);
  EXPECT_EQ(s.blocks, accepted);
}

// A full disk (RLIMIT_FSIZE makes every write past 64 bytes fail with
// EFBIG): the write is counted and logged, no file or temp file is left, and
// the queued path does the same without blocking.
TEST(DiskTier, FullDiskCountsWriteErrorsAndLeavesNoFiles) {
  testing::TempDir dir;
  auto t = OpenTier(TierOptions(dir.path()));
  struct sigaction ignore = {}, old = {};
  ignore.sa_handler = SIG_IGN;
  ASSERT_EQ(sigaction(SIGXFSZ, &ignore, &old), 0);
  struct rlimit saved;
  ASSERT_EQ(getrlimit(RLIMIT_FSIZE, &saved), 0);
  struct rlimit tiny = saved;
  tiny.rlim_cur = 64;
  ASSERT_EQ(setrlimit(RLIMIT_FSIZE, &tiny), 0);
  Status s = t->WriteNow(Block(1, 4096, 0));
  ASSERT_TRUE(t->Enqueue(Block(2, 4096, 0)));
  t->Drain();
  ASSERT_EQ(setrlimit(RLIMIT_FSIZE, &saved), 0);
  ASSERT_EQ(sigaction(SIGXFSZ, &old, nullptr), 0);
  EXPECT_EQ(s.code(), StatusCode::kUnavailable) << s.ToString();
  EXPECT_NE(s.message().find("write"), std::string::npos) << s.message();
  EXPECT_EQ(t->Stats().write_errors, 2);
  EXPECT_EQ(t->Stats().blocks, 0);
  EXPECT_TRUE(std::filesystem::is_empty(t->block_dir()));
  // Room again: writes succeed.
  EXPECT_TRUE(t->WriteNow(Block(3, 4096, 0)).ok());
  EXPECT_TRUE(t->Contains(3));
}

TEST(DiskTier, StartRemovesTempFilesOfDeadWriters) {
  testing::TempDir dir;
  std::string sub;
  {
    auto t = OpenTier(TierOptions(dir.path()));
    sub = t->block_dir();
  }
  // pid 2^22 + 1 is above Linux's pid_max: no such process.
  std::string stale = sub + "/0000000000000001.kvb.tmp.4194305.1";
  std::ofstream(stale) << "half a block";
  std::string live = sub + "/0000000000000002.kvb.tmp." + std::to_string(getpid()) + ".1";
  std::ofstream(live) << "being written";
  auto t = OpenTier(TierOptions(dir.path()));
  EXPECT_FALSE(std::filesystem::exists(stale));
  EXPECT_TRUE(std::filesystem::exists(live));
  EXPECT_EQ(t->Stats().scanned_files, 0);
}

// Issue 25: 100k blocks must index in seconds. The scan is one readdir and
// one stat per file (no file is opened), so a generous bound catches an
// accidental per-file read or a quadratic index.
// n empty files named as blocks 1..n (the scan reads names, not contents).
void MakeEmptyBlockFiles(const std::string& block_dir, int n) {
  for (int i = 0; i < n; ++i) {
    char name[64];
    std::snprintf(name, sizeof(name), "/%016llx.kvb", static_cast<unsigned long long>(i + 1));
    int fd = ::open((block_dir + name).c_str(), O_WRONLY | O_CREAT, 0644);
    ASSERT_GE(fd, 0);
    ::close(fd);
  }
}

TEST(DiskTier, HundredThousandFilesIndexInSeconds) {
  testing::TempDir dir;
  std::string sub;
  {
    auto t = OpenTier(TierOptions(dir.path()));
    sub = t->block_dir();
  }
  const int n = 100000;
  ASSERT_NO_FATAL_FAILURE(MakeEmptyBlockFiles(sub, n));
  auto start = std::chrono::steady_clock::now();
  auto t = OpenTier(TierOptions(dir.path()));
  double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_EQ(t->Stats().scanned_files, n);
  EXPECT_TRUE(t->Contains(n));
  EXPECT_LT(s, 20.0) << "indexing " << n << " files took " << s << " s";
  std::printf("indexed %d block files in %.3f s\n", n, s);
}

std::unique_ptr<PagedKvCache> MakeDiskPaged(const std::string& dir, int64_t blocks,
                                            uint64_t model = 42) {
  KvCacheOptions o = testing::DiskCacheOptions(dir, 4, blocks);
  o.model_fingerprint = model;
  auto c = PagedKvCache::Create(o);
  KVFORK_CHECK_MSG(c.ok(), c.status().ToString());
  return std::move(c).value();
}

// The prefix index holds the tier's files as hash-only nodes from the start
// (no header read): a cache over 100,000 files starts in seconds too, and
// its first request can find any of them by the hash its walk computes.
TEST(PagedKvCacheDisk, HundredThousandFilesBecomeIndexNodesInSeconds) {
  testing::TempDir dir;
  std::string sub;
  {
    auto c = MakeDiskPaged(dir.path(), 8);
    sub = c->disk()->block_dir();
  }
  const int n = 100000;
  ASSERT_NO_FATAL_FAILURE(MakeEmptyBlockFiles(sub, n));
  auto start = std::chrono::steady_clock::now();
  auto c = MakeDiskPaged(dir.path(), 8);
  double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_EQ(c->index().num_hash_only(), n);
  EXPECT_EQ(c->index().num_on_disk(), n);
  EXPECT_LT(s, 20.0) << "a cache over " << n << " files took " << s << " s to start";
  std::printf("a cache over %d block files started (scan + index nodes) in %.3f s\n", n, s);
  EXPECT_CHECK_OK(*c);
}

TEST(PagedKvCacheDisk, EvictedBlocksComeBackFromDisk) {
  testing::TempDir dir;
  auto c = MakeDiskPaged(dir.path(), 8);
  std::vector<int32_t> prompt = Range(100, 4 * 3 + 1);  // 3 full blocks + 1
  c->Release(Prefill(*c, prompt));
  // Push every cached block out of the pool with unrelated prompts.
  for (int i = 0; i < 3; ++i) c->Release(Prefill(*c, Range(1000 * (i + 2), 4 * 7)));
  c->disk()->Drain();
  ASSERT_EQ(c->Match(prompt, "").num_reused_tokens, 12) << "the chain continues on disk";
  PrefixMatch m;
  SeqId s = Prefill(*c, prompt, "", &m);
  EXPECT_EQ(m.num_reused_tokens, 12);
  EXPECT_TRUE(HoldsPattern(*c, s));
  EXPECT_EQ(c->Stats().disk_hit_blocks, 3);
  EXPECT_CHECK_OK(*c);
  // Another salt never reads them.
  PrefixMatch other;
  c->Release(Prefill(*c, prompt, "tenant", &other));
  EXPECT_EQ(other.num_reused_tokens, 0);
  c->Release(s);
  EXPECT_CHECK_OK(*c);
}

TEST(PagedKvCacheDisk, RestartReusesThePrefixAndCorruptBlocksAreRecomputed) {
  testing::TempDir dir;
  std::vector<int32_t> prompt = Range(7, 4 * 4 + 2);  // 4 full blocks + 2
  {
    auto c = MakeDiskPaged(dir.path(), 16);
    c->Release(Prefill(*c, prompt));
  }  // clean shutdown writes every cached block, the partial tail too
  {
    auto c = MakeDiskPaged(dir.path(), 16);
    EXPECT_EQ(c->disk()->Stats().scanned_files, 5);
    EXPECT_EQ(c->disk()->Stats().partial_blocks, 1);
    PrefixMatch m;
    SeqId s = Prefill(*c, prompt, "", &m);
    EXPECT_EQ(m.num_reused_tokens, 17) << "4 blocks and 1 token of the partial one (len - 1)";
    EXPECT_TRUE(HoldsPattern(*c, s));
    EXPECT_CHECK_OK(*c);
    c->Release(s);
  }
  // Damage the third block's file: blocks 0-1 still come from disk, the rest
  // are recomputed, and the bad file is gone.
  {
    auto c = MakeDiskPaged(dir.path(), 16);
    uint64_t h = RootBlockHashSeed(0);
    for (int b = 0; b < 3; ++b)
      h = ChainBlockHash(h, std::span<const int32_t>(prompt.data() + 4 * b, 4));
    std::string path = c->disk()->PathOf(h);
    ASSERT_TRUE(std::filesystem::exists(path));
    std::filesystem::resize_file(path, std::filesystem::file_size(path) - 1);
    PrefixMatch m;
    SeqId s = Prefill(*c, prompt, "", &m);
    EXPECT_EQ(m.num_reused_tokens, 8);
    EXPECT_TRUE(HoldsPattern(*c, s));
    EXPECT_EQ(c->Stats().disk.corrupt_blocks, 1);
    EXPECT_FALSE(std::filesystem::exists(path));
    EXPECT_CHECK_OK(*c);
    c->Release(s);
  }
  // Another model's fingerprint finds nothing.
  auto c = MakeDiskPaged(dir.path(), 16, /*model=*/43);
  EXPECT_EQ(c->Match(prompt, "").num_reused_tokens, 0);
}

// A clean shutdown writes the partial tail block too, so the next turn of a
// conversation reuses after a restart exactly what the warm cache reuses
// (its tail read into the sequence's own block, like the pool's tail copy),
// with the same K/V. A damaged partial file is never served: a flipped
// payload byte fails on read, a truncated file already at start; both are
// counted and deleted and those tokens recomputed. A conversation shorter
// than one block writes no partial block (it has no parent to be found by).
TEST(PagedKvCacheDisk, PartialTailComesBackAfterARestartAsInTheWarmPool) {
  testing::TempDir dir;
  const std::vector<int32_t> turn = Range(7, 4 * 4 + 3);  // 4 full blocks + 3
  // Next turns: the same 19 tokens, then 6 others (block 4 differs in each).
  const std::vector<int32_t> next = Concat(turn, Range(500, 6));
  int64_t warm_reused = 0;
  {
    auto c = MakeDiskPaged(dir.path(), 16);
    c->Release(Prefill(*c, turn));
    c->Release(Prefill(*c, Range(900, 2)));  // under one block: not written
    warm_reused = c->Match(next, "").num_reused_tokens;
    EXPECT_EQ(warm_reused, 19);
  }
  uint64_t parent = RootBlockHashSeed(0);
  for (int b = 0; b < 4; ++b)
    parent = ChainBlockHash(parent, std::span<const int32_t>(turn.data() + 4 * b, 4));
  const uint64_t key = DiskPartialKey(parent, std::span<const int32_t>(turn.data() + 16, 3));
  std::string path;
  // want_match: what Match previews (no file is read before Admit).
  auto restart = [&](const std::vector<int32_t>& prompt, int64_t want_reused,
                     int64_t want_match) {
    auto c = MakeDiskPaged(dir.path(), 16);
    path = c->disk()->PathOf(key, /*partial=*/true);
    EXPECT_EQ(c->Match(prompt, "").num_reused_tokens, want_match);
    PrefixMatch m;
    SeqId s = Prefill(*c, prompt, "", &m);
    EXPECT_EQ(m.num_reused_tokens, want_reused);
    EXPECT_TRUE(HoldsPattern(*c, s)) << "the K/V of every position, the tail's too";
    EXPECT_CHECK_OK(*c);
    c->Release(s);
    return c;
  };
  {
    auto c = restart(next, warm_reused, warm_reused);
    EXPECT_EQ(c->disk()->Stats().scanned_files, 5);
    EXPECT_EQ(c->disk()->Stats().partial_blocks, 1);
    EXPECT_EQ(c->Stats().disk_hit_blocks, 5) << "4 full blocks and the partial one";
    EXPECT_EQ(c->Stats().tail_copied_tokens, 3);
    EXPECT_TRUE(std::filesystem::exists(path));
    // KV events and the DISK set name full blocks only.
    EXPECT_EQ(c->disk()->Hashes().size(), 4u);
  }
  // The same turn again: 2 of the partial block's 3 tokens (len - 1).
  restart(turn, 18, 18);
  // next's own last block (1 token after 6 full ones) was written too.
  EXPECT_EQ(MakeDiskPaged(dir.path(), 16)->disk()->Stats().partial_blocks, 2);
  // A flipped payload byte: found on read, deleted, the 3 tokens computed.
  {
    std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
    ASSERT_TRUE(f.good());
    f.seekg(-5, std::ios::end);
    char byte = 0;
    f.read(&byte, 1);
    byte = static_cast<char>(byte ^ 0x10);
    f.seekp(-5, std::ios::end);
    f.write(&byte, 1);
  }
  {
    auto c = restart(Concat(turn, Range(700, 6)), 16, 19);
    EXPECT_EQ(c->disk()->Stats().corrupt_blocks, 1);
    EXPECT_EQ(c->disk()->Stats().partial_blocks, 1) << "of 2 indexed, the deleted one is gone";
    EXPECT_FALSE(std::filesystem::exists(path));
  }
  // Written again by a turn that ends there; then truncated: refused when
  // the directory is indexed, before any request reads it.
  {
    auto c = MakeDiskPaged(dir.path(), 16);
    c->Release(Prefill(*c, turn));
  }
  ASSERT_TRUE(std::filesystem::exists(path));
  std::filesystem::resize_file(path, std::filesystem::file_size(path) - 3);
  {
    auto c = MakeDiskPaged(dir.path(), 16);
    EXPECT_EQ(c->disk()->Stats().corrupt_blocks, 1);
    EXPECT_FALSE(std::filesystem::exists(path));
  }
  restart(Concat(turn, Range(800, 6)), 16, 16);
}

TEST(PagedKvCacheDisk, ResetDoesNotSpillAndDenseRefusesTheDisk) {
  testing::TempDir dir;
  auto c = MakeDiskPaged(dir.path(), 8);
  c->Release(Prefill(*c, Range(1, 9)));
  c->ResetPrefixCache();
  c->disk()->Drain();
  EXPECT_EQ(c->disk()->Stats().blocks_written, 0);
  KvCacheOptions o;
  o.layout = TinyLayout();
  o.num_blocks = 8;
  o.max_context = 16;
  o.disk_dir = dir.path();
  o.disk_capacity_bytes = 1 << 20;
  o.model_fingerprint = 1;
  auto dense = KvCache::Create(KvBackend::kDense, o);
  EXPECT_EQ(dense.status().code(), StatusCode::kInvalidArgument);
}

std::vector<uint64_t> ChangeHashes(const std::vector<DiskTierChange>& changes, bool stored) {
  std::vector<uint64_t> out;
  for (const DiskTierChange& c : changes)
    if (c.stored == stored) out.push_back(c.hash);
  return out;
}

TEST(DiskTierChangeLog, AnnouncesWritesEvictionsAndCorruptBlocks) {
  testing::TempDir dir;
  const size_t file_bytes = DiskBlockHeaderBytes(4) + 100;
  auto t = OpenTier(TierOptions(dir.path(), 2 * file_bytes));
  ASSERT_TRUE(t->WriteNow(Block(1, 100, 0)).ok());
  EXPECT_TRUE(t->TakeChanges().empty()) << "nothing is logged before EnableChangeLog";
  t->EnableChangeLog();
  t->Drain();  // block 1, indexed before, is announced from its header
  std::vector<DiskTierChange> c = t->TakeChanges();
  ASSERT_EQ(c.size(), 1u);
  EXPECT_TRUE(c[0].stored);
  EXPECT_EQ(c[0].hash, 1u);
  EXPECT_EQ(c[0].parent_hash, std::optional<uint64_t>(0));
  EXPECT_EQ(c[0].tokens, Block(1, 100, 0).tokens);

  ASSERT_TRUE(t->Enqueue(Block(2, 100, 0)));
  t->Drain();
  ASSERT_TRUE(t->WriteNow(Block(3, 100, 0)).ok());  // over capacity: 1 goes
  c = t->TakeChanges();
  EXPECT_EQ(ChangeHashes(c, true), (std::vector<uint64_t>{2, 3}));
  EXPECT_EQ(ChangeHashes(c, false), (std::vector<uint64_t>{1}));
  ASSERT_EQ(c.size(), 3u);
  EXPECT_EQ(c[0].tokens, Block(2, 100, 0).tokens);
  EXPECT_FALSE(c[2].stored) << "the eviction follows the write that caused it";

  std::filesystem::resize_file(t->PathOf(2), 10);  // torn: dropped on read
  std::vector<uint8_t> got;
  EXPECT_FALSE(ReadBack(*t, Block(2, 100, 0), &got).ok());
  std::filesystem::remove(t->PathOf(3));  // another process evicted it
  EXPECT_FALSE(ReadBack(*t, Block(3, 100, 0), &got).ok());
  c = t->TakeChanges();
  EXPECT_EQ(ChangeHashes(c, false), (std::vector<uint64_t>{2, 3}));
  EXPECT_TRUE(ChangeHashes(c, true).empty());
  EXPECT_TRUE(t->Hashes().empty());
}

TEST(DiskTierChangeLog, FilesFoundAtStartAreAnnouncedFromTheirHeaders) {
  testing::TempDir dir;
  {
    auto t = OpenTier(TierOptions(dir.path()));
    for (uint64_t h = 10; h < 14; ++h) ASSERT_TRUE(t->WriteNow(Block(h, 64, 1)).ok());
  }
  auto t = OpenTier(TierOptions(dir.path()));
  ASSERT_EQ(t->Stats().scanned_files, 4);
  // A flipped token id fails the header checksum; an empty file is torn.
  {
    std::fstream f(t->PathOf(11), std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(kDiskBlockFixedHeaderBytes + 1);
    f.put('\x7f');
  }
  std::filesystem::resize_file(t->PathOf(12), 0);
  int wakes = 0;
  t->SetWake([&] { ++wakes; });
  t->EnableChangeLog();
  t->Drain();
  t->SetWake(nullptr);
  std::vector<DiskTierChange> c = t->TakeChanges();
  std::vector<uint64_t> stored = ChangeHashes(c, true);
  std::sort(stored.begin(), stored.end());
  EXPECT_EQ(stored, (std::vector<uint64_t>{10, 13}));
  EXPECT_TRUE(ChangeHashes(c, false).empty()) << "never announced, so never removed";
  for (const DiskTierChange& x : c) {
    EXPECT_EQ(x.parent_hash, std::optional<uint64_t>(x.hash - 1));
    EXPECT_EQ(x.tokens, Block(x.hash, 64, 1).tokens);
  }
  EXPECT_EQ(wakes, 1) << "one wake per batch of files found at start";
  EXPECT_EQ(t->Stats().corrupt_blocks, 2);
  EXPECT_EQ(t->Hashes(), (std::vector<uint64_t>{10, 13}));
}

// Rebuilds one set per medium from the events, as llm-d's index does, and
// checks each event against what it has seen.
class MediumSink final : public KvEventSink {
 public:
  void Emit(KvEvent e) override {
    std::set<uint64_t>& set = blocks[e.medium];
    switch (e.kind) {
      case KvEvent::Kind::kBlockStored:
        EXPECT_EQ(set.count(e.block_hash), 0u) << KvMediumName(e.medium) << ": stored twice";
        EXPECT_EQ(ChainBlockHash(e.parent_hash ? *e.parent_hash : RootBlockHashSeed(0),
                                 e.token_ids),
                  e.block_hash);
        set.insert(e.block_hash);
        ++stored[e.medium];
        break;
      case KvEvent::Kind::kBlockRemoved:
        EXPECT_EQ(set.erase(e.block_hash), 1u) << KvMediumName(e.medium) << ": unknown block";
        ++removed[e.medium];
        break;
      case KvEvent::Kind::kAllBlocksCleared:
        blocks.clear();
        ++cleared;
        break;
    }
  }
  void Flush() override {}

  std::map<KvMedium, std::set<uint64_t>> blocks;
  std::map<KvMedium, int> stored, removed;
  int cleared = 0;
};

void ExpectSinkMatches(PagedKvCache& c, MediumSink& sink, const std::string& when) {
  c.disk()->Drain();
  c.EmitDiskEvents();
  std::vector<uint64_t> cpu = c.BlockHashes(), disk = c.DiskBlockHashes();
  EXPECT_EQ(sink.blocks[KvMedium::kCpu], std::set<uint64_t>(cpu.begin(), cpu.end())) << when;
  EXPECT_EQ(sink.blocks[KvMedium::kDisk], std::set<uint64_t>(disk.begin(), disk.end())) << when;
}

TEST(PagedKvCacheDisk, EventsPerMediumEqualTheIndexAndTheTier) {
  testing::TempDir dir;
  {
    auto c = MakeDiskPaged(dir.path(), 12);
    MediumSink sink;
    ASSERT_TRUE(c->SetEventSink(&sink).ok());
    std::mt19937 rng(3);
    for (int op = 0; op < 300; ++op) {
      // A few shared prefixes on a 12-block pool: blocks spill to disk and
      // come back from it.
      std::vector<int32_t> prompt = Range(1000 * static_cast<int32_t>(rng() % 5), 8);
      const int extra = 1 + static_cast<int>(rng() % 14);
      for (int i = 0; i < extra; ++i) prompt.push_back(static_cast<int32_t>(rng() % 3));
      c->Release(Prefill(*c, prompt));
      if (op % 50 == 49) ExpectSinkMatches(*c, sink, "after op " + std::to_string(op));
    }
    EXPECT_GT(sink.stored[KvMedium::kDisk], 10);
    EXPECT_GT(c->Stats().disk_hit_blocks, 0);
    c->ResetPrefixCache();  // the disk keeps its blocks: no AllBlocksCleared
    EXPECT_EQ(sink.cleared, 0);
    ExpectSinkMatches(*c, sink, "after a reset");
    EXPECT_TRUE(sink.blocks[KvMedium::kCpu].empty());
    EXPECT_FALSE(sink.blocks[KvMedium::kDisk].empty());
  }
  // A new process announces the blocks it finds on disk.
  auto c = MakeDiskPaged(dir.path(), 12);
  MediumSink sink;
  ASSERT_TRUE(c->SetEventSink(&sink).ok());
  ExpectSinkMatches(*c, sink, "after a restart");
  EXPECT_GT(sink.blocks[KvMedium::kDisk].size(), 5u);
  EXPECT_CHECK_OK(*c);
}

}  // namespace
}  // namespace kvfork
