// PagedAttention's outputs hashed, to prove an attention kernel change keeps
// every bit (issue 26, session 27's avx2 register and softmax changes): FNV-1a
// of the output over random KV for 5 shapes (GQA groups 1, 2, 7, 8, 16;
// head_dim 64, 96, 128; blocks of 16, 32, 48 keys), f32 / bf16 / int8 / q4
// KV, no window and a window of 37, each sequence run whole and in chunks of
// 22 and 1 tokens: 120 lines and a total, on the best ISA level the CPU has
// (KVFORK_CPU_ISA picks another). The lines of two builds must be equal.
// Built by hand against a release build:
//
//   g++ -O2 -std=c++20 -Isrc bench/kernels/attention_hash_probe.cc \
//     build/release/src/kernels/libkvfork_kernels.a build/release/src/core/libkvfork_core.a \
//     -lpthread -o /tmp/attention_hash_probe
//   /tmp/attention_hash_probe > /tmp/hash_new.txt
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <vector>
#include "core/thread_pool.h"
#include "kernels/kv_layout.h"
#include "kernels/ops.h"
using namespace kvfork;
static uint64_t Fnv(const float* p, size_t n, uint64_t h) {
  const uint8_t* b = reinterpret_cast<const uint8_t*>(p);
  for (size_t i = 0; i < n * 4; ++i) { h ^= b[i]; h *= 1099511628211ull; }
  return h;
}
int main() {
  ThreadPool pool(2);
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> dist(-2.0f, 2.0f);
  struct Shape { int heads, kv_heads, hd, bs; };
  const Shape shapes[] = {{16, 8, 128, 16}, {16, 2, 64, 32}, {12, 12, 96, 16}, {32, 2, 128, 48}, {14, 2, 64, 16}};
  const KvDType dts[] = {KvDType::kBf16, KvDType::kF32, KvDType::kInt8, KvDType::kQ4};
  uint64_t total = 1469598103934665603ull;
  for (const Shape& sh : shapes)
    for (KvDType dt : dts)
      for (int64_t window : {0, 37}) {
        KvLayout l;
        l.num_layers = 1; l.num_kv_heads = sh.kv_heads; l.head_dim = sh.hd; l.block_size = sh.bs; l.dtype = dt;
        const int64_t ctx = 301;
        const int64_t nblocks = (ctx + sh.bs - 1) / sh.bs;
        std::vector<uint8_t*> blocks;
        std::vector<void*> mem;
        for (int64_t i = 0; i < nblocks; ++i) {
          void* p = aligned_alloc(64, (l.BlockBytes() + 63) / 64 * 64);
          memset(p, 0, l.BlockBytes());
          mem.push_back(p); blocks.push_back(static_cast<uint8_t*>(p));
        }
        const int64_t row = int64_t{sh.kv_heads} * sh.hd;
        std::vector<float> k(ctx * row), v(ctx * row);
        for (auto& x : k) x = dist(rng);
        for (auto& x : v) x = dist(rng);
        WriteKv(l, 0, blocks.data(), 0, ctx, k.data(), v.data());
        std::vector<float> q(ctx * sh.heads * sh.hd), out(q.size());
        for (auto& x : q) x = dist(rng);
        for (int64_t chunk : {ctx, int64_t{22}, int64_t{1}}) {
          std::fill(out.begin(), out.end(), 0.0f);
          for (int64_t t0 = 0; t0 < ctx; t0 += chunk) {
            const int64_t nt = std::min(chunk, ctx - t0);
            AttentionSeq s{q.data() + t0 * sh.heads * sh.hd, out.data() + t0 * sh.heads * sh.hd, nt, t0, blocks.data(), window};
            PagedAttention(l, 0, sh.heads, 0.125f, std::span<const AttentionSeq>(&s, 1), pool);
          }
          const uint64_t h = Fnv(out.data(), out.size(), 1469598103934665603ull);
          printf("heads %d/%d hd %d bs %d dt %d win %ld chunk %ld: %016lx\n", sh.heads, sh.kv_heads, sh.hd, sh.bs, int(dt), long(window), long(chunk), (unsigned long)h);
          total = Fnv(out.data(), out.size(), total);
        }
        for (void* p : mem) free(p);
      }
  printf("total %016lx\n", (unsigned long)total);
}
