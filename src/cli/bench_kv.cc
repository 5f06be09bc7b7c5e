// `kvfork bench kv`: prefix reuse of the KV backends on one workload.
//
// Workload: a shared prefix of --shared tokens (default 2000) and --siblings
// requests (default 8) with distinct --suffix-token tails (default 100).
// Sibling 0 runs alone first (cold) and finishes; siblings 1..N-1 then arrive
// one after another and all stay running until the last has its first token,
// so they hold KV at the same time. For each configuration (paged with tail
// copy on, off; dense; no prefix cache) it reports the prompt tokens reused,
// KV bytes at peak (blocks holding data of running or cached sequences) next
// to the ideal for the backend, and time to first token (admit + prefill of
// the non-reused tokens), on a random model in --shape (default tiny, so the
// scalar/AVX2 kernels finish in seconds; default-50m or qwen3-0.6b for a
// realistic cost ratio).
//
// Flags: --shape NAME, --arch qwen3|llama, --shared N, --suffix N, --siblings N,
// --kv-dtype bf16|f32|int8|q4|q4r, --kv-block-size N, --threads N,
// --json PATH (default bench/results/kv.json).
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "cli/command.h"
#include "cli/flags.h"
#include "cli/json_file.h"
#include "core/thread_pool.h"
#include "core/timer.h"
#include "kv/kv_cache.h"
#include "model/model.h"
#include "model/random_model.h"

namespace kvfork::cli {
namespace {

struct Config {
  const char* name;
  KvBackend backend;
  bool prefix_cache;
  bool tail_copy;
};

struct Outcome {
  int64_t reused_tokens = 0;
  int64_t prompt_tokens = 0;
  int64_t peak_bytes = 0;
  double ttft_cold_ms = 0;  // sibling 0
  double ttft_warm_ms = 0;  // mean over siblings 1..N-1
  double total_ms = 0;
  int64_t tail_copied = 0;
};

std::vector<int32_t> RandomTokens(uint64_t seed, int64_t n, int64_t vocab) {
  std::vector<int32_t> v(n);
  uint64_t x = seed * 0x9e3779b97f4a7c15ull + 1;
  for (int64_t i = 0; i < n; ++i) {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    v[i] = static_cast<int32_t>(x % static_cast<uint64_t>(vocab));
  }
  return v;
}

// Admits prompt and prefills what the cache does not hold; returns the
// sequence, its reuse and the elapsed milliseconds to the first logits.
StatusOr<SeqId> Prefill(Model& model, KvCache& kv, ThreadPool& pool,
                        const std::vector<int32_t>& prompt, int64_t* reused, double* ms) {
  Timer t;
  PrefixMatch m;
  KVFORK_ASSIGN_OR_RETURN(SeqId seq, kv.Admit(prompt, "", static_cast<int64_t>(prompt.size()), &m));
  ForwardBatch batch;
  batch.tokens.assign(prompt.begin() + m.num_reused_tokens, prompt.end());
  ForwardSeq fs;
  fs.num_tokens = static_cast<int64_t>(batch.tokens.size());
  fs.start_pos = m.num_reused_tokens;
  fs.blocks = kv.BlockTable(seq);
  batch.seqs.push_back(fs);
  std::vector<float> logits;
  KVFORK_RETURN_IF_ERROR(model.Forward(batch, kv.layout(), pool, &logits));
  KVFORK_RETURN_IF_ERROR(kv.Append(seq, batch.tokens));
  *ms = t.Millis();
  *reused = m.num_reused_tokens;
  return seq;
}

StatusOr<Outcome> RunConfig(const Config& cfg, Model& model, const KvLayout& layout,
                            ThreadPool& pool, const std::vector<std::vector<int32_t>>& prompts) {
  int64_t longest = 0;
  for (const auto& p : prompts) longest = std::max<int64_t>(longest, p.size());
  KvCacheOptions o;
  o.layout = layout;
  o.prefix_cache = cfg.prefix_cache;
  o.tail_copy = cfg.tail_copy;
  o.max_context = longest + layout.block_size;
  const int64_t per_seq = (o.max_context + layout.block_size - 1) / layout.block_size;
  o.num_blocks = per_seq * static_cast<int64_t>(prompts.size() + 1);
  KVFORK_ASSIGN_OR_RETURN(std::unique_ptr<KvCache> kv, KvCache::Create(cfg.backend, o));
  Outcome out;
  Timer total;
  int64_t reused = 0;
  double ms = 0;
  KVFORK_ASSIGN_OR_RETURN(SeqId first, Prefill(model, *kv, pool, prompts[0], &reused, &ms));
  out.ttft_cold_ms = ms;
  out.reused_tokens += reused;
  kv->Release(first);
  std::vector<SeqId> running;
  for (size_t i = 1; i < prompts.size(); ++i) {
    KVFORK_ASSIGN_OR_RETURN(SeqId s, Prefill(model, *kv, pool, prompts[i], &reused, &ms));
    running.push_back(s);
    out.ttft_warm_ms += ms;
    out.reused_tokens += reused;
  }
  KVFORK_RETURN_IF_ERROR(kv->Check());
  for (SeqId s : running) kv->Release(s);
  KVFORK_RETURN_IF_ERROR(kv->Check());
  out.total_ms = total.Millis();
  if (prompts.size() > 1) out.ttft_warm_ms /= static_cast<double>(prompts.size() - 1);
  for (const auto& p : prompts) out.prompt_tokens += static_cast<int64_t>(p.size());
  KvCacheStats st = kv->Stats();
  out.peak_bytes = st.peak_resident_bytes();
  out.tail_copied = st.tail_copied_tokens;
  return out;
}

int Fail(const Status& s) {
  std::fprintf(stderr, "bench kv: %s\n", s.ToString().c_str());
  return 1;
}

int RunBenchKv(int argc, char** argv) {
  Flags flags = Flags::Parse(argc, argv, {});
  const std::string shape = flags.GetString("shape", "tiny", "random-weight model shape");
  const std::string arch_name = flags.GetString("arch", "qwen3", "qwen3 or llama");
  const int64_t shared = flags.GetInt("shared", 2000, "tokens of the shared prefix");
  const int64_t suffix = flags.GetInt("suffix", 100, "tokens of each sibling's own tail");
  const int64_t siblings = flags.GetInt("siblings", 8, "requests sharing the prefix");
  const std::string dtype_name =
      flags.GetString("kv-dtype", "bf16", "KV element type: bf16, f32, int8, q4 or q4r");
  const int64_t block_size = flags.GetInt("kv-block-size", 16, "tokens per KV block");
  const int64_t threads = flags.GetInt("threads", ThreadPool::DefaultThreads(),
                                       "compute threads, one per usable core unless set");
  const std::string json_path =
      flags.GetString("json", "bench/results/kv.json", "where the JSON result goes");
  if (Status s = flags.Finish(); !s.ok()) return Fail(s);
  if (shared < 1 || suffix < 1 || siblings < 1 || threads < 1)
    return Fail(InvalidArgumentError("--shared, --suffix, --siblings and --threads must be >= 1"));
  if (arch_name != "qwen3" && arch_name != "llama")
    return Fail(InvalidArgumentError("--arch: expected qwen3 or llama, got '" + arch_name + "'"));
  auto dtype = ParseKvDType(dtype_name);
  if (!dtype.ok()) return Fail(dtype.status());

  const int64_t vocab = 4096;
  RandomModelOptions mo;
  mo.arch = arch_name == "llama" ? Architecture::kLlama : Architecture::kQwen3;
  mo.shape = shape;
  mo.dtype = DType::kBf16;
  mo.vocab_size = vocab;
  mo.seed = 3;
  const std::string dir = "/tmp/kvfork-bench-kv-" + std::to_string(getpid());
  Status w = WriteRandomModel(mo, dir);
  if (!w.ok()) return Fail(w);
  ModelLoadOptions lo;
  lo.show_progress = false;
  auto model = Model::Load(dir, lo);
  if (!model.ok()) return Fail(model.status());
  const KvLayout layout = (*model)->MakeKvLayout(*dtype, static_cast<int>(block_size));
  ThreadPool pool(static_cast<int>(threads));

  const std::vector<int32_t> prefix = RandomTokens(1, shared, vocab);
  std::vector<std::vector<int32_t>> prompts;
  for (int64_t i = 0; i < siblings; ++i) {
    std::vector<int32_t> p = prefix;
    std::vector<int32_t> tail = RandomTokens(100 + i, suffix, vocab);
    p.insert(p.end(), tail.begin(), tail.end());
    prompts.push_back(std::move(p));
  }
  const Config configs[] = {{"paged tail-copy on", KvBackend::kPaged, true, true},
                            {"paged tail-copy off", KvBackend::kPaged, true, false},
                            {"dense", KvBackend::kDense, true, true},
                            {"no prefix cache", KvBackend::kPaged, false, true}};
  const double bpt = static_cast<double>(layout.BytesPerToken());
  const double n = static_cast<double>(siblings);
  // The peaks each backend should reach on this workload.
  const double ideal_paged = (static_cast<double>(shared) + n * suffix) * bpt;
  const double ideal_dense = n * static_cast<double>(shared + suffix) * bpt;
  const double ideal_none = (n - 1) * static_cast<double>(shared + suffix) * bpt;

  std::printf(
      "bench kv: model %s/%s, kv %s, block %lld, %lld threads; prefix %lld + %lld x %lld "
      "suffix tokens; %.0f KV bytes/token\n",
      arch_name.c_str(), shape.c_str(), KvDTypeName(*dtype), static_cast<long long>(block_size),
      static_cast<long long>(threads), static_cast<long long>(shared),
      static_cast<long long>(siblings), static_cast<long long>(suffix), bpt);
  std::printf("\n%-20s %10s %8s %12s %12s %11s %11s %10s\n", "config", "reused", "of prompt",
              "peak KV MiB", "ideal MiB", "TTFT cold", "TTFT warm", "total s");
  nlohmann::json rows = nlohmann::json::array();
  for (const Config& c : configs) {
    auto r = RunConfig(c, **model, layout, pool, prompts);
    if (!r.ok()) return Fail(r.status().WithContext(c.name));
    double ideal = !c.prefix_cache                  ? ideal_none
                   : c.backend == KvBackend::kDense ? ideal_dense
                                                    : ideal_paged;
    std::printf(
        "%-20s %10lld %7.1f%% %12.2f %12.2f %9.1fms %9.1fms %10.2f\n", c.name,
        static_cast<long long>(r->reused_tokens),
        100.0 * static_cast<double>(r->reused_tokens) / static_cast<double>(r->prompt_tokens),
        static_cast<double>(r->peak_bytes) / (1 << 20), ideal / (1 << 20), r->ttft_cold_ms,
        r->ttft_warm_ms, r->total_ms * 1e-3);
    rows.push_back({{"config", c.name},
                    {"backend", KvBackendName(c.backend)},
                    {"prefix_cache", c.prefix_cache},
                    {"tail_copy", c.tail_copy},
                    {"reused_tokens", r->reused_tokens},
                    {"prompt_tokens", r->prompt_tokens},
                    {"tail_copied_tokens", r->tail_copied},
                    {"peak_kv_bytes", r->peak_bytes},
                    {"ideal_peak_kv_bytes", ideal},
                    {"ttft_cold_ms", r->ttft_cold_ms},
                    {"ttft_warm_mean_ms", r->ttft_warm_ms},
                    {"total_ms", r->total_ms}});
  }
  std::error_code ec;
  std::filesystem::remove_all(dir, ec);
  nlohmann::json out = {{"arch", arch_name},
                        {"shape", shape},
                        {"kv_dtype", KvDTypeName(*dtype)},
                        {"block_size", block_size},
                        {"threads", threads},
                        {"shared_tokens", shared},
                        {"suffix_tokens", suffix},
                        {"siblings", siblings},
                        {"kv_bytes_per_token", bpt},
                        {"results", rows}};
  if (Status s = WriteJsonFile(json_path, out); !s.ok()) return Fail(s);
  std::printf("\nwrote %s\n", json_path.c_str());
  return 0;
}

}  // namespace

KVFORK_REGISTER_BENCHMARK(kv, "kv", "prefix reuse: tokens reused, peak KV bytes, TTFT per backend",
                          RunBenchKv);

}  // namespace kvfork::cli
