// `kvfork bench swa`: the KV memory of one long generation on a
// sliding-window model (issue 24 section 3): the paged cache keeps a block
// table per layer group and gives back the sliding layers' blocks that no
// future query can see, so the peak is the global layers' blocks of the
// whole sequence plus one window per sliding layer, where one table of
// every layer (the disk tier's layout, or the cache before layer groups)
// keeps every position of every layer.
//
// The sequence: a --prompt-token prompt prefilled in --chunk-token chunks,
// then decoded one token a step (greedy) up to --tokens. With --compute off
// the model is not run: the cache goes through the same calls (admit,
// reserve, append) without K/V being written, which is what its accounting
// sees anyway; that makes the 16k-token run of a gemma-3-1b shape take
// seconds. With --compute on (default) a random-weight model of the shape
// (vocab --vocab, default 4096: the vocabulary does not touch the KV) runs
// every step.
//
// Prints the peak KV bytes held (every group), the bound (global blocks of
// every position + ceil(window / block) + 1 blocks per sliding group; a
// prefill chunk wider than one block adds its blocks), and the one-table
// bytes; writes --json (default bench/results/swa.json).
#include <unistd.h>

#include <algorithm>
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
#include "kernels/ops.h"
#include "kv/kv_cache.h"
#include "model/model.h"
#include "model/random_model.h"

namespace kvfork::cli {
namespace {

int64_t CeilDiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

int Fail(const Status& s) {
  std::fprintf(stderr, "bench swa: %s\n", s.ToString().c_str());
  return 1;
}

struct Setup {
  int64_t tokens = 0, prompt = 0, chunk = 0, block_size = 0;
  bool compute = true;
};

// Runs the sequence; returns the cache's stats at the end (before release).
StatusOr<KvCacheStats> RunSequence(const Setup& s, Model* model, KvCache& kv, ThreadPool& pool,
                                   int64_t vocab) {
  std::vector<int32_t> tokens;
  for (int64_t i = 0; i < s.prompt; ++i) tokens.push_back(static_cast<int32_t>((i * 7919) % vocab));
  PrefixMatch m;
  KVFORK_ASSIGN_OR_RETURN(SeqId seq, kv.Admit(tokens, "", std::min(s.prompt, s.chunk), &m));
  std::vector<float> logits;
  // Feeds tokens[from, to) in one step, and (computing) appends the greedy
  // next token when the step reaches the end of what is known.
  auto step = [&](int64_t from, int64_t to) -> Status {
    KVFORK_RETURN_IF_ERROR(kv.Reserve(seq, to));
    if (model != nullptr) {
      ForwardBatch batch;
      batch.tokens.assign(tokens.begin() + from, tokens.begin() + to);
      ForwardSeq fs;
      fs.num_tokens = to - from;
      fs.start_pos = from;
      fs.blocks = kv.BlockTable(seq);
      for (size_t g = 0; g < kv.kv_groups().size(); ++g)
        fs.group_blocks[g] = kv.GroupBlockTable(seq, static_cast<int>(g));
      batch.seqs.push_back(fs);
      batch.kv_groups = kv.kv_groups();
      KVFORK_RETURN_IF_ERROR(model->Forward(batch, kv.layout(), pool, &logits));
    }
    KVFORK_RETURN_IF_ERROR(
        kv.Append(seq, std::span<const int32_t>(tokens.data() + from, to - from)));
    if (to == static_cast<int64_t>(tokens.size()) && to < s.tokens) {
      tokens.push_back(model != nullptr ? static_cast<int32_t>(Argmax(logits.data(), vocab))
                                        : static_cast<int32_t>((to * 7919) % vocab));
    }
    return OkStatus();
  };
  for (int64_t done = m.num_reused_tokens; done < s.prompt;) {
    const int64_t to = std::min(s.prompt, done + s.chunk);
    KVFORK_RETURN_IF_ERROR(step(done, to));
    done = to;
  }
  for (int64_t n = s.prompt; n < s.tokens; ++n) KVFORK_RETURN_IF_ERROR(step(n, n + 1));
  KVFORK_RETURN_IF_ERROR(kv.Check());
  KvCacheStats st = kv.Stats();
  kv.Release(seq);
  KVFORK_RETURN_IF_ERROR(kv.Check());
  return st;
}

int RunBenchSwa(int argc, char** argv) {
  Flags flags = Flags::Parse(argc, argv, {});
  const std::string shape = flags.GetString("shape", "gemma-3-1b", "random-weight model shape");
  const std::string arch_name = flags.GetString("arch", "gemma3", "gemma3 or mistral");
  Setup s;
  s.tokens = flags.GetInt("tokens", 16384, "positions of the sequence (prompt + generated)");
  s.prompt = flags.GetInt("prompt", 256, "prompt tokens, prefilled in chunks");
  s.chunk = flags.GetInt("chunk", 256, "prefill chunk tokens");
  const std::string compute =
      flags.GetString("compute", "on", "on: run the model; off: the cache's calls only");
  const int64_t vocab = flags.GetInt("vocab", 4096, "vocabulary of the random model");
  const std::string dtype_name =
      flags.GetString("kv-dtype", "bf16", "KV element type: bf16, f32 or int8");
  s.block_size = flags.GetInt("kv-block-size", 16, "tokens per KV block");
  const int64_t threads = flags.GetInt("threads", ThreadPool::DefaultThreads(),
                                       "compute threads, one per usable core unless set");
  const std::string json_path =
      flags.GetString("json", "bench/results/swa.json", "where the JSON result goes");
  if (Status st = flags.Finish(); !st.ok()) return Fail(st);
  auto on = ParseOnOff("--compute", compute);
  if (!on.ok()) return Fail(on.status());
  s.compute = *on;
  if (s.prompt < 1 || s.tokens < s.prompt || s.chunk < 1 || threads < 1 || vocab < 2 ||
      s.block_size < 1 || s.block_size > kMaxAttentionBlockSize)
    return Fail(InvalidArgumentError(
        "need 1 <= --prompt <= --tokens, --chunk >= 1, --threads >= 1, --vocab >= 2 and a "
        "--kv-block-size in [1, " +
        std::to_string(kMaxAttentionBlockSize) + "]"));
  if (arch_name != "gemma3" && arch_name != "mistral")
    return Fail(
        InvalidArgumentError("--arch: expected gemma3 or mistral, got '" + arch_name + "'"));
  auto dtype = ParseKvDType(dtype_name);
  if (!dtype.ok()) return Fail(dtype.status());

  RandomModelOptions mo;
  mo.arch = arch_name == "gemma3" ? Architecture::kGemma3 : Architecture::kMistral;
  mo.shape = shape;
  mo.dtype = DType::kBf16;
  mo.vocab_size = vocab;
  mo.seed = 5;
  auto config = RandomModelConfig(mo);
  if (!config.ok()) return Fail(config.status());
  const KvGroupMap map = MapKvGroups(*config, *dtype, static_cast<int>(s.block_size));
  if (map.groups.size() < 2)
    return Fail(InvalidArgumentError("shape " + shape + " has no sliding-window layers"));
  const std::string dir = "/tmp/kvfork-bench-swa-" + std::to_string(getpid());
  std::unique_ptr<Model> model;
  if (s.compute) {
    if (Status w = WriteRandomModel(mo, dir); !w.ok()) return Fail(w);
    ModelLoadOptions lo;
    lo.show_progress = false;
    auto m = Model::Load(dir, lo);
    if (!m.ok()) return Fail(m.status());
    model = std::move(m).value();
  }
  ThreadPool pool(static_cast<int>(threads));

  KvCacheOptions o;
  o.layout.num_layers = static_cast<int>(config->num_layers);
  o.layout.num_kv_heads = static_cast<int>(config->num_kv_heads);
  o.layout.head_dim = static_cast<int>(config->head_dim);
  o.layout.block_size = static_cast<int>(s.block_size);
  o.layout.dtype = *dtype;
  o.groups = map.groups;
  o.max_step_tokens = s.chunk;
  // Room for the whole sequence in every group (no eviction pressure).
  o.num_blocks = CeilDiv(s.tokens, s.block_size) + 4;
  o.sliding_blocks = o.num_blocks;
  auto kv = KvCache::Create(KvBackend::kPaged, o);
  if (!kv.ok()) return Fail(kv.status());

  Timer t;
  auto st = RunSequence(s, model.get(), **kv, pool, vocab);
  const double seconds = t.Seconds();
  std::error_code ec;
  if (s.compute) std::filesystem::remove_all(dir, ec);
  if (!st.ok()) return Fail(st.status());

  // The bound: every position's block in the global group; in each sliding
  // group one window (ceil(window / block) + 1 blocks), or the window and
  // a prefill chunk where a chunk is wider.
  const int64_t global_bytes = static_cast<int64_t>(map.groups[0].layout.BlockBytes());
  int64_t bound = CeilDiv(s.tokens, s.block_size) * global_bytes;
  nlohmann::json groups = nlohmann::json::array();
  const std::string mode = s.compute ? "computed, " + std::to_string(threads) + " threads"
                                     : "cache calls only (--compute off)";
  std::printf(
      "bench swa: %s/%s (%lld layers), kv %s, block %lld, %s; %lld tokens (prompt %lld in "
      "chunks of %lld, then decode)\n",
      arch_name.c_str(), shape.c_str(), static_cast<long long>(config->num_layers),
      KvDTypeName(*dtype), static_cast<long long>(s.block_size), mode.c_str(),
      static_cast<long long>(s.tokens), static_cast<long long>(s.prompt),
      static_cast<long long>(s.chunk));
  std::printf("\n%-22s %7s %7s %14s %14s\n", "group", "layers", "window", "peak blocks",
              "bound blocks");
  std::printf("%-22s %7d %7s %14lld %14lld\n", "global", map.groups[0].layout.num_layers, "-",
              static_cast<long long>(st->peak_used_blocks),
              static_cast<long long>(CeilDiv(s.tokens, s.block_size)));
  for (size_t g = 0; g < st->sliding.size(); ++g) {
    const KvGroupStats& gs = st->sliding[g];
    const int64_t window_blocks =
        std::max(CeilDiv(gs.window, s.block_size) + 1,
                 s.prompt > gs.window ? CeilDiv(gs.window + s.chunk, s.block_size) + 1 : 0);
    bound += window_blocks * gs.block_bytes;
    std::printf("%-22s %7d %7lld %14lld %14lld\n", ("sliding " + std::to_string(g)).c_str(),
                map.groups[g + 1].layout.num_layers, static_cast<long long>(gs.window),
                static_cast<long long>(gs.peak_used_blocks), static_cast<long long>(window_blocks));
    groups.push_back({{"window", gs.window},
                      {"layers", map.groups[g + 1].layout.num_layers},
                      {"block_bytes", gs.block_bytes},
                      {"peak_used_blocks", gs.peak_used_blocks},
                      {"bound_blocks", window_blocks}});
  }
  const int64_t one_table =
      CeilDiv(s.tokens, s.block_size) * static_cast<int64_t>(o.layout.BlockBytes());
  const double mib = 1.0 / (1 << 20);
  std::printf(
      "\npeak KV held %.2f MiB, bound %.2f MiB (%s), one table of every layer %.2f MiB "
      "(%.1fx the peak); %.1f s\n",
      static_cast<double>(st->peak_used_kv_bytes) * mib, static_cast<double>(bound) * mib,
      st->peak_used_kv_bytes <= bound ? "within" : "EXCEEDED", static_cast<double>(one_table) * mib,
      static_cast<double>(one_table) / static_cast<double>(st->peak_used_kv_bytes), seconds);
  nlohmann::json out = {{"arch", arch_name},
                        {"shape", shape},
                        {"layers", config->num_layers},
                        {"kv_dtype", KvDTypeName(*dtype)},
                        {"block_size", s.block_size},
                        {"tokens", s.tokens},
                        {"prompt_tokens", s.prompt},
                        {"chunk_tokens", s.chunk},
                        {"computed", s.compute},
                        {"threads", threads},
                        {"global_layers", map.groups[0].layout.num_layers},
                        {"global_block_bytes", global_bytes},
                        {"global_peak_used_blocks", st->peak_used_blocks},
                        {"sliding_groups", groups},
                        {"peak_used_kv_bytes", st->peak_used_kv_bytes},
                        {"bound_kv_bytes", bound},
                        {"within_bound", st->peak_used_kv_bytes <= bound},
                        {"one_table_kv_bytes", one_table},
                        {"seconds", seconds}};
  if (Status s = WriteJsonFile(json_path, out); !s.ok()) return Fail(s);
  std::printf("wrote %s\n", json_path.c_str());
  return st->peak_used_kv_bytes <= bound ? 0 : 1;
}

}  // namespace

KVFORK_REGISTER_BENCHMARK(swa, "swa",
                          "sliding windows: peak KV bytes of a long generation vs the bound",
                          RunBenchSwa);

}  // namespace kvfork::cli
