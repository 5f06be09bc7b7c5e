#include "cli/bench_attention.h"

#include <cmath>
#include <cstdio>
#include <ctime>
#include <random>
#include <vector>

#include "cli/bench_limits.h"
#include "cli/kv_blocks.h"
#include "kernels/kv_layout.h"
#include "kernels/ops.h"

namespace kvfork::cli {
namespace {

constexpr int kHeads = 16, kKvHeads = 8, kHeadDim = 128, kLayers = 28;

struct Case {
  const char* name;
  int64_t tokens;   // query tokens
  int64_t context;  // keys each of the last token sees
  int layers;       // attention calls timed together
  KvDType dtype = KvDType::kBf16;
};

// qwen3-0.6b's KV layout for `layers` layers.
KvLayout Layout(int layers, KvDType dtype) {
  KvLayout l;
  l.num_layers = layers;
  l.num_kv_heads = kKvHeads;
  l.head_dim = kHeadDim;
  l.block_size = 16;
  l.dtype = dtype;
  return l;
}

// A sequence's blocks for `positions` positions of every layer of `layout`,
// filled by WriteKv with random K and V.
StatusOr<BlockTable> RandomBlocks(const KvLayout& layout, int64_t positions, std::mt19937& rng) {
  KVFORK_ASSIGN_OR_RETURN(BlockTable b, AllocateBlocks(layout, positions));
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  std::vector<float> k(static_cast<size_t>(positions * kKvHeads * kHeadDim)), v(k.size());
  for (float& x : k) x = dist(rng);
  for (float& x : v) x = dist(rng);
  for (int l = 0; l < layout.num_layers; ++l)
    WriteKv(layout, l, b.blocks.data(), 0, positions, k.data(), v.data());
  return b;
}

// CPU seconds of the whole process so far: a loaded machine descheduling our
// threads stretches wall time, not this (spin waits of the pool count).
double ProcessCpuSeconds() {
  timespec ts;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
}

}  // namespace

StatusOr<nlohmann::json> BenchAttention(ThreadPool& pool, double min_seconds, double peak_flops,
                                        double bandwidth) {
  // "22 after 3400": the serving benchmark's seqshare request, a few new
  // tokens behind a long cached prefix; i8, q4, q4r rows: the same work on
  // int8, q4 and q4r KV (decode's GB/s count each format's own bytes).
  const Case cases[] = {{"prefill 512", 512, 512, 1},
                        {"prefill 2048", 2048, 2048, 1},
                        {"22 after 3400", 22, 3422, 1},
                        {"prefill 2048 i8", 2048, 2048, 1, KvDType::kInt8},
                        {"22 after 3400 i8", 22, 3422, 1, KvDType::kInt8},
                        {"prefill 2048 q4", 2048, 2048, 1, KvDType::kQ4},
                        {"22 after 3400 q4", 22, 3422, 1, KvDType::kQ4},
                        {"decode at 512", 1, 512, kLayers},
                        {"decode at 2048", 1, 2048, kLayers},
                        {"decode 2048 i8", 1, 2048, kLayers, KvDType::kInt8},
                        {"decode 2048 q4", 1, 2048, kLayers, KvDType::kQ4},
                        {"decode 2048 q4r", 1, 2048, kLayers, KvDType::kQ4r}};
  const float scale = 1.0f / std::sqrt(static_cast<float>(kHeadDim));
  // cpu ms: process CPU time per call over the threads, beside the wall
  // time: on a shared machine the two part when our threads wait for a core.
  std::printf("\n%-16s %8s %8s %8s %12s %16s %9s\n", "attention", "layers", "ms", "cpu ms", "rate",
              "", "of limit");
  nlohmann::json rows = nlohmann::json::array();
  std::mt19937 rng(2);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  for (const Case& c : cases) {
    const bool decode = c.tokens == 1;
    const KvLayout layout = Layout(c.layers, c.dtype);
    const double kv_bytes = static_cast<double>(layout.BytesPerToken()) * c.context;
    // A decode step reads its KV from DRAM (the weights stream through the
    // caches between steps), so decode rotates over copies of the sequence's
    // blocks totalling more than 256 MiB.
    const double rotate_bytes = static_cast<double>(size_t{256} << 20);
    const int copies = decode ? static_cast<int>(rotate_bytes / kv_bytes) + 1 : 1;
    std::vector<BlockTable> tables;
    for (int i = 0; i < copies; ++i) {
      KVFORK_ASSIGN_OR_RETURN(BlockTable t, RandomBlocks(layout, c.context, rng));
      tables.push_back(std::move(t));
    }
    std::vector<float> q(static_cast<size_t>(c.tokens * kHeads * kHeadDim)), out(q.size());
    for (float& x : q) x = dist(rng);
    int next = 0;
    int64_t calls = 0;
    const double cpu0 = ProcessCpuSeconds();
    const double seconds = TimeIt(
        [&] {
          ++calls;
          const AttentionSeq seq{q.data(), out.data(), c.tokens, c.context - c.tokens,
                                 tables[next].blocks.data()};
          for (int l = 0; l < c.layers; ++l)
            PagedAttention(layout, l, kHeads, scale, std::span<const AttentionSeq>(&seq, 1), pool);
          next = (next + 1) % copies;
        },
        min_seconds);
    const double cpu_ms = (ProcessCpuSeconds() - cpu0) * 1e3 / static_cast<double>(calls) /
                          static_cast<double>(pool.num_threads());
    // Prefill: QK^T and PV over causal positions (query i of n sees
    // context - n + i + 1 keys); decode: the K and V bytes read.
    const double n = static_cast<double>(c.tokens);
    const double pairs = n * static_cast<double>(c.context - c.tokens) + n * (n + 1) / 2;
    const double work = decode ? kv_bytes : 4.0 * kHeads * kHeadDim * pairs * c.layers;
    const double rate = work / seconds;
    const double limit = decode ? bandwidth : peak_flops;
    const char* unit = decode ? "GB/s of KV" : "GFLOP/s";
    std::printf("%-16s %8d %8.3f %8.3f %12.1f %-16s %8.1f%%\n", c.name, c.layers, seconds * 1e3,
                cpu_ms, rate * 1e-9, unit, 100.0 * rate / limit);
    rows.push_back({{"case", c.name},
                    {"kv_dtype", KvDTypeName(c.dtype)},
                    {"query_tokens", c.tokens},
                    {"context", c.context},
                    {"layers", c.layers},
                    {"ms", seconds * 1e3},
                    {"cpu_ms_per_thread", cpu_ms},
                    {"rate", rate * 1e-9},
                    {"rate_unit", unit},
                    {"fraction_of_limit", rate / limit}});
  }
  return rows;
}

}  // namespace kvfork::cli
