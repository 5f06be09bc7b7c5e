// Profile of the disk tier's read path at the qwen3-0.6b shape (28 layers, 8
// KV heads, head_dim 128, bf16, 16-token blocks of 1,835,008 bytes): writes N
// blocks through a PagedKvCache, then (in a new process, as after a restart:
// fresh pool pages) loads them and prints the wall time and the tier's
// per-phase read times. `checksum` times the version-1 checksum (splitmix64
// per word, through the out-of-line BlockHashMix) against version 2's CRC32C
// lanes and a memcpy of one block. Built by hand against a release build:
//
//   g++ -O2 -std=c++20 -Isrc bench/disk/disk_read_profile.cc build/release/src/kv/libkvfork_kv.a \
//     build/release/src/kernels/libkvfork_kernels.a build/release/src/core/libkvfork_core.a \
//     -lzmq -lpthread -o /tmp/disk_read_profile
//   /tmp/disk_read_profile write DIR 300 [int8|q4]; /tmp/disk_read_profile read DIR 300 [int8|q4]
//   KVFORK_DISK_PREFAULT=0 /tmp/disk_read_profile read DIR 300   # without the prefault
//   KVFORK_DISK_READ_THREADS=1 ...   # I/O threads; PROFILE_NOHUGEPAGE=1: the pool on 4 KiB pages;
//   PROFILE_PRETOUCH=1: the pool's pages backed before the load
// (this program reads those variables into KvCacheOptions::disk_prefault and
// disk_read_threads; the server reads neither).
// `read` also prints the load's CPU time a block (user: checksums; sys: the
// kernel's page zeroing and page-cache copies), which does not depend on
// the machine's load the way wall time does.
//
// -DOLD builds the `write` and `read` modes against a checkout before the
// async loads (sync Admit, version-1 files) for a same-minute comparison.
#include <sys/mman.h>
#include <sys/resource.h>

#include <chrono>
#include <cstdlib>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>
#include "kv/block_hash.h"
#ifndef OLD
#include "kv/disk_checksum.h"
#endif
#include "kv/paged_kv_cache.h"
using namespace kvfork;
static double Ms(std::chrono::steady_clock::time_point a) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - a).count();
}
uint64_t OldChecksum(const uint8_t* data, size_t n) {
  uint64_t lane[4] = {0x6b766631, 0x6b766632, 0x6b766633, 0x6b766634};
  size_t i = 0;
  for (; i + 32 <= n; i += 32)
    for (int l = 0; l < 4; ++l) { uint64_t w; std::memcpy(&w, data + i + 8 * l, 8); lane[l] = BlockHashMix(lane[l] ^ w); }
  uint64_t h = BlockHashMix(lane[0] ^ BlockHashMix(lane[1] ^ BlockHashMix(lane[2] ^ lane[3])));
  for (; i < n; ++i) h = BlockHashMix(h ^ data[i]);
  return BlockHashMix(h ^ n);
}
int main(int argc, char** argv) {
  std::string mode = argv[1], dir = argv[2];
  int64_t n = std::stoll(argv[3]);
  KvCacheOptions o;
  o.layout.num_layers = 28; o.layout.num_kv_heads = 8; o.layout.head_dim = 128; o.layout.block_size = 16;
  o.layout.dtype = KvDType::kBf16;  // argv[4]: bf16 (default), int8, q4
  if (argc > 4 && std::string(argv[4]) == "int8") o.layout.dtype = KvDType::kInt8;
  if (argc > 4 && std::string(argv[4]) == "q4") o.layout.dtype = KvDType::kQ4;
  o.num_blocks = n + 4; o.disk_dir = dir; o.disk_capacity_bytes = int64_t{8} << 30;
  o.model_fingerprint = 7;
#ifndef OLD
  o.disk_async_reads = true;
  // The knobs to measure with (KvCacheOptions), from the environment here.
  if (const char* v = std::getenv("KVFORK_DISK_PREFAULT")) o.disk_prefault = std::string(v) != "0";
  if (const char* v = std::getenv("KVFORK_DISK_READ_THREADS")) o.disk_read_threads = std::atoi(v);
#endif
  std::vector<int32_t> prompt(n * 16 + 1);
  for (size_t i = 0; i < prompt.size(); ++i) prompt[i] = 100 + static_cast<int32_t>(i % 5000);
  auto c = PagedKvCache::Create(o);
  if (!c.ok()) { std::printf("%s\n", c.status().ToString().c_str()); return 1; }
  const size_t bytes = (*c)->pool().block_bytes();
#ifndef OLD
  if (mode == "checksum") {
    std::vector<uint8_t> v(bytes, 3);
    for (size_t i = 0; i < bytes; ++i) v[i] = static_cast<uint8_t>(i * 131);
    uint64_t x = 0; auto t = std::chrono::steady_clock::now();
    for (int r = 0; r < 200; ++r) x ^= OldChecksum(v.data(), v.size());
    double old_ms = Ms(t) / 200; t = std::chrono::steady_clock::now();
    for (int r = 0; r < 200; ++r) x ^= DiskChecksum(v.data(), v.size());
    double new_ms = Ms(t) / 200; t = std::chrono::steady_clock::now();
    std::vector<uint8_t> w(bytes);
    for (int r = 0; r < 200; ++r) { std::memcpy(w.data(), v.data(), bytes); x ^= w[r]; }
    double cp = Ms(t) / 200;
    std::printf("block %zu bytes: v1 checksum %.3f ms (%.1f GB/s), v2 CRC32C lanes %.3f ms (%.1f GB/s, sse4.2 %d), memcpy %.3f ms (%.1f GB/s) [%llx]\n",
      bytes, old_ms, bytes / old_ms / 1e6, new_ms, bytes / new_ms / 1e6, DiskChecksumUsesSse42(), cp, bytes / cp / 1e6, (unsigned long long)x);
    return 0;
  }
#endif
  if (mode == "write") {
    auto s = (*c)->Admit(prompt, "", prompt.size(), nullptr);
    for (int64_t b = 0; b < n; ++b) std::memset((*c)->BlockTable(*s)[b], static_cast<int>(b), bytes);
    (void)(*c)->Append(*s, prompt);
    (*c)->Release(*s);
    auto t = std::chrono::steady_clock::now();
    c->reset();
    std::printf("wrote %lld blocks in %.0f ms\n", (long long)n, Ms(t));
    return 0;
  }
#ifdef OLD
  { auto t = std::chrono::steady_clock::now(); PrefixMatch m; auto s = (*c)->Admit(prompt, "", prompt.size(), &m); (void)s;
    std::printf("OLD loaded %lld tokens in %.0f ms: %.3f ms a block wall\n", (long long)m.num_reused_tokens, Ms(t), Ms(t) / n); return 0; }
#else
  if (const char* hp = std::getenv("PROFILE_NOHUGEPAGE"); hp != nullptr && std::string(hp) == "1") {
    // The pool on 4 KiB pages, as before BlockPool asked for transparent
    // huge pages (session 21): the baseline for that change.
    const uintptr_t base = reinterpret_cast<uintptr_t>((*c)->pool().Data(0)) & ~uintptr_t{4095};
    const size_t len = static_cast<size_t>((*c)->pool().num_blocks()) * bytes;
    if (::madvise(reinterpret_cast<void*>(base), len, MADV_NOHUGEPAGE) != 0) std::perror("madvise");
  }
  if (const char* pt = std::getenv("PROFILE_PRETOUCH"); pt != nullptr && std::string(pt) == "1") {
    // The pool's pages backed before the load (as a pool touched at start,
    // or a warm server's reused blocks): the read is then a copy alone.
    std::memset((*c)->pool().Data(0), 0, static_cast<size_t>((*c)->pool().num_blocks()) * bytes);
  }
  struct rusage ru0;
  getrusage(RUSAGE_SELF, &ru0);
  auto t = std::chrono::steady_clock::now();
  PrefixMatch m;
  auto s = (*c)->Admit(prompt, "", prompt.size(), &m);
  const double admit_ms = Ms(t);
  while (!(*c)->FinishLoad(*s, &m)) (*c)->WaitForLoads(50);
  const double ms = Ms(t);
  struct rusage ru1;
  getrusage(RUSAGE_SELF, &ru1);
  auto cpu_ms = [](const timeval& a, const timeval& b) {
    return (b.tv_sec - a.tv_sec) * 1e3 + (b.tv_usec - a.tv_usec) * 1e-3;
  };
  std::printf("load CPU: user %.3f ms, sys %.3f ms a block\n",
              cpu_ms(ru0.ru_utime, ru1.ru_utime) / n, cpu_ms(ru0.ru_stime, ru1.ru_stime) / n);
  DiskTierStats d = (*c)->disk()->Stats();
  double k = d.hits_blocks * 1e6;
  std::printf("loaded %lld tokens (%lld blocks) in %.0f ms (Admit returned after %.2f ms): %.3f ms a block wall; per read: %.3f ms (open %.3f, readv %.3f, checks+checksum %.3f)\n",
    (long long)m.num_reused_tokens, (long long)d.hits_blocks, ms, admit_ms, ms / n, d.read_ns / k, d.read_open_ns / k, d.read_io_ns / k, d.read_check_ns / k);
  return 0;
#endif
}
