// `kvfork bench model`: one sequence's prefill and decode through the whole
// model, against the machine's limits measured in the same run.
//
//   prefill   --prompt-tokens tokens in one Forward call, after one untimed
//             call of the same size (as a server's decoder has its buffers
//             sized after its first request; that first call's time, with its
//             page faults, is printed too), --prefill-runs timed calls, the
//             median reported; achieved FLOP/s =
//             (2 * matmul params * tokens (a mixture of experts' router
//             and active experts) + the lm head for the last token +
//             causal attention 2 * layers * heads * head_dim * T * (T + 1))
//             / seconds, against the machine's best bf16 FLOP rate
//             (bench_limits.h: AMX where present, else vdpbf16ps, else f32 FMA)
//   decode    --decode-tokens greedy steps of one token each; tok/s against
//             bandwidth / weight bytes one step reads (every matrix once and
//             one embedding row; the KV cache read is reported, not counted)
//   limits    peak: measured before the model loads and after the decode,
//             each the fastest of its repetitions, the better kept; read
//             bandwidth: the best pattern chosen before the model loads, then
//             one read before each of up to 4 decode rounds and after the
//             last, their median the decode's limit (the VM's share of the
//             memory bus moves within seconds, and one read the host stalls
//             must not lower the limit: it did to 9.6 GB/s among 21-32, and
//             the bytes-over-time mean then put decode at 131% of it); all
//             printed and in the JSON
//   compute   the decode's matrices at their kernels' in-L2 rates
//             (bench_decode_compute.h), after the decode: the step's compute
//             alone, and the decode's bounds if reading and computing do not
//             overlap at all (1 / (read + compute)) or overlap perfectly
//             (1 / max(read, compute)), as fractions of the limit
//
// Without --model, writes random bf16 weights of --shape (model/random_model.h)
// to a temporary directory and removes it afterwards.
//
// Flags: --shape qwen3-0.6b|llama-3.2-1b, --model DIR|FILE.gguf, --threads N (default all
//        cores), --prompt-tokens N (512), --decode-tokens N (32),
//        --prefill-runs N (3), --kv-dtype bf16|f32|int8|q4|q4r (bf16),
//        --json PATH (bench/results/model.json).
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <vector>

#include "cli/bench_decode_compute.h"
#include "cli/bench_limits.h"
#include "cli/command.h"
#include "cli/flags.h"
#include "cli/json_file.h"
#include "cli/kv_blocks.h"
#include "core/cpu_features.h"
#include "core/progress.h"
#include "core/thread_pool.h"
#include "core/timer.h"
#include "kv/kv_cache.h"
#include "model/decoder.h"
#include "model/model.h"
#include "model/random_model.h"

namespace kvfork::cli {
namespace {

struct Options {
  std::string shape;
  std::string model_dir;  // empty: random weights
  std::string tokenizer_dir;
  int threads = 1;
  int64_t prompt_tokens = 512;
  int64_t decode_tokens = 32;
  int64_t prefill_runs = 3;
  KvDType kv_dtype = KvDType::kBf16;
  std::string json_path;
};

StatusOr<Options> ParseOptions(int argc, char** argv) {
  Flags flags = Flags::Parse(argc, argv, {});
  Options o;
  o.shape = flags.GetString("shape", "qwen3-0.6b",
                            "random-weight model shape: qwen3-0.6b or llama-3.2-1b");
  o.model_dir =
      flags.GetString("model", "", "a real model directory or .gguf (none: random weights)");
  o.tokenizer_dir = flags.GetString(
      "tokenizer", "", "tokenizer copied into the random model (none: the cached one)");
  const int64_t threads = flags.GetInt("threads", ThreadPool::DefaultThreads(),
                                       "compute threads, one per usable core unless set");
  o.prompt_tokens = flags.GetInt("prompt-tokens", 512, "tokens in the timed prefill");
  o.decode_tokens = flags.GetInt("decode-tokens", 32, "greedy decode steps timed");
  o.prefill_runs = flags.GetInt("prefill-runs", 3, "timed prefill calls; the median is reported");
  const std::string kv_dtype =
      flags.GetString("kv-dtype", "bf16", "KV element type: bf16, f32, int8, q4 or q4r");
  o.json_path = flags.GetString("json", "bench/results/model.json", "where the JSON result goes");
  KVFORK_RETURN_IF_ERROR(flags.Finish());
  KVFORK_ASSIGN_OR_RETURN(o.kv_dtype, ParseKvDType(kv_dtype));
  if (o.shape != "qwen3-0.6b" && o.shape != "llama-3.2-1b")
    return InvalidArgumentError("--shape must be qwen3-0.6b or llama-3.2-1b, got \"" + o.shape +
                                "\"");
  if (threads < 1 || threads > 1024)
    return InvalidArgumentError("--threads must be in [1, 1024], got " + std::to_string(threads));
  o.threads = static_cast<int>(threads);
  if (o.prompt_tokens < 1 || o.prompt_tokens > 1 << 20)
    return InvalidArgumentError("--prompt-tokens must be in [1, 1048576], got " +
                                std::to_string(o.prompt_tokens));
  if (o.decode_tokens < 1 || o.decode_tokens > 1 << 20)
    return InvalidArgumentError("--decode-tokens must be in [1, 1048576], got " +
                                std::to_string(o.decode_tokens));
  if (o.prefill_runs < 1 || o.prefill_runs > 100)
    return InvalidArgumentError("--prefill-runs must be in [1, 100], got " +
                                std::to_string(o.prefill_runs));
  return o;
}

// Removes the random model's directory when the benchmark ends.
struct TempDir {
  std::filesystem::path path;
  ~TempDir() {
    if (path.empty()) return;
    std::error_code ec;
    std::filesystem::remove_all(path, ec);
  }
};

// Writes random bf16 weights of the shape into a fresh temporary directory.
Status MakeRandomModel(const Options& o, TempDir* dir) {
  RandomModelOptions r;
  r.arch = o.shape == "qwen3-0.6b" ? Architecture::kQwen3 : Architecture::kLlama;
  r.shape = o.shape;
  r.dtype = DType::kBf16;
  r.seed = 1;
  // The tokenizer is not used here; it is copied only so the directory is a
  // complete model, when the repository's copy is found from the cwd.
  std::string tok = o.tokenizer_dir;
  if (tok.empty()) {
    tok = r.arch == Architecture::kQwen3 ? ".cache/npm/tokenizer-qwen3/package/models"
                                         : ".cache/npm/tokenizer-llama3/package/models";
    if (!std::filesystem::exists(std::filesystem::path(tok) / "tokenizer.json")) tok.clear();
  }
  r.tokenizer_dir = tok;
  dir->path =
      std::filesystem::temp_directory_path() / ("kvfork-bench-model-" + std::to_string(getpid()));
  Timer t;
  KVFORK_RETURN_IF_ERROR(WriteRandomModel(r, dir->path.string()));
  std::fprintf(stderr, "wrote random %s weights to %s (%.1f s)\n", o.shape.c_str(),
               dir->path.c_str(), t.Seconds());
  return OkStatus();
}

int32_t Argmax(const std::vector<float>& logits) {
  return static_cast<int32_t>(std::max_element(logits.begin(), logits.end()) - logits.begin());
}

struct Row {
  std::string metric, unit;
  double value = 0, limit = 0;  // limit 0: none
};

// The middle value (the mean of the two middle ones for an even count); v non-empty.
double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t mid = v.size() / 2;
  return v.size() % 2 == 1 ? v[mid] : (v[mid - 1] + v[mid]) / 2;
}

Status BenchModel(int argc, char** argv) {
  KVFORK_ASSIGN_OR_RETURN(Options o, ParseOptions(argc, argv));
  ThreadPool pool(o.threads);
  const Isa isa = ActiveIsa();

  // Limits first, before the model's pages compete for the cache, and again
  // after the decode: each is the better of the two samples, so a host that
  // slowed one of them (a vCPU taken away, a neighbour on the memory bus)
  // does not lower the denominators the fractions are taken against.
  BandwidthProbe probe(pool);
  const Bandwidth bandwidth_best = probe.Measure(0.3);
  const PeakFlops peak_before = MeasurePeakFlops(pool, 0.3);

  TempDir temp;
  std::string dir = o.model_dir;
  if (dir.empty()) {
    KVFORK_RETURN_IF_ERROR(MakeRandomModel(o, &temp));
    dir = temp.path.string();
  }
  ModelLoadOptions load_options;
  load_options.show_progress = false;
  Timer load_timer;
  KVFORK_ASSIGN_OR_RETURN(std::unique_ptr<Model> model, Model::Load(dir, load_options));
  const double load_s = load_timer.Seconds();
  const ModelConfig& c = model->config();
  const auto* decoder = dynamic_cast<const Decoder*>(model.get());
  if (decoder == nullptr) return InternalError("Model::Load returned something not a Decoder");
  const ModelWeights& w = decoder->weights();

  const int64_t total = o.prompt_tokens + o.decode_tokens;
  if (c.max_position_embeddings > 0 && total > c.max_position_embeddings)
    return InvalidArgumentError("--prompt-tokens + --decode-tokens = " + std::to_string(total) +
                                " exceeds max_position_embeddings " +
                                std::to_string(c.max_position_embeddings));
  const KvLayout layout = model->MakeKvLayout(o.kv_dtype, 16);
  KVFORK_ASSIGN_OR_RETURN(BlockTable table, AllocateBlocks(layout, total));

  // Deterministic prompt of random ids.
  std::mt19937 rng(7);
  std::uniform_int_distribution<int32_t> token_dist(0, static_cast<int32_t>(c.vocab_size - 1));
  ForwardBatch prefill;
  for (int64_t i = 0; i < o.prompt_tokens; ++i) prefill.tokens.push_back(token_dist(rng));
  prefill.seqs.push_back({o.prompt_tokens, 0, table.blocks.data(), false});
  std::vector<float> logits;

  // Warm-up: one token touches every weight page (the mmap faults them in),
  // then one untimed prefill sizes the decoder's buffers. Every prefill
  // writes the same K/V over the same positions.
  {
    ForwardBatch warm;
    warm.tokens = {prefill.tokens[0]};
    warm.seqs.push_back({1, 0, table.blocks.data(), false});
    KVFORK_RETURN_IF_ERROR(model->Forward(warm, layout, pool, &logits));
  }
  Timer first_timer;
  KVFORK_RETURN_IF_ERROR(model->Forward(prefill, layout, pool, &logits));
  const double first_prefill_s = first_timer.Seconds();
  std::vector<double> prefill_runs_s;
  // On a terminal only, and between timed calls: "prefill run 2/3".
  ProgressOptions prefill_progress;
  prefill_progress.label = "prefill run";
  prefill_progress.total = o.prefill_runs;
  Progress prefill_report(prefill_progress);
  for (int64_t r = 0; r < o.prefill_runs; ++r) {
    prefill_report.Update(r + 1);
    Timer prefill_timer;
    KVFORK_RETURN_IF_ERROR(model->Forward(prefill, layout, pool, &logits));
    prefill_runs_s.push_back(prefill_timer.Seconds());
  }
  prefill_report.Finish();
  const double prefill_s = Median(prefill_runs_s);

  // The decode runs in up to kDecodeRounds rounds with a read of the probe's
  // buffer before each and after the last: the decode's limit is the
  // bandwidth of the same minutes (the median of those reads),
  // not that of a quieter moment before the model loaded.
  constexpr int64_t kDecodeRounds = 4;
  const int64_t rounds = std::min(kDecodeRounds, o.decode_tokens);
  std::vector<double> bandwidth_samples;
  std::vector<int32_t> generated;
  int32_t next = Argmax(logits);
  double decode_s = 0;
  ProgressOptions decode_progress;
  decode_progress.label = "decode round";
  decode_progress.total = rounds;
  Progress decode_report(decode_progress);
  for (int64_t r = 0; r < rounds; ++r) {
    decode_report.Update(r + 1);
    bandwidth_samples.push_back(probe.Sample());
    Timer round_timer;
    for (int64_t i = o.decode_tokens * r / rounds; i < o.decode_tokens * (r + 1) / rounds; ++i) {
      ForwardBatch step;
      step.tokens = {next};
      step.seqs.push_back({1, o.prompt_tokens + i, table.blocks.data(), false});
      KVFORK_RETURN_IF_ERROR(model->Forward(step, layout, pool, &logits));
      generated.push_back(next);
      next = Argmax(logits);
    }
    decode_s += round_timer.Seconds();
  }
  decode_report.Finish();
  bandwidth_samples.push_back(probe.Sample());
  const double bw = Median(bandwidth_samples);

  const DecodeCompute compute = MeasureDecodeCompute(w, c, o.threads, 0.05);
  const PeakFlops peak_after = MeasurePeakFlops(pool, 0.3);
  const PeakFlops peak = Best(peak_before, peak_after);
  // The machine's best bf16 rate, whatever the active ISA can use.
  const double peak_gemm = peak.BestBf16();

  // FLOPs of the prefill: every layer matrix for every token, the lm head for
  // the last token only (all_logits is false), and causal attention (QK^T and
  // PV over positions [0, t] for token t).
  const double H = static_cast<double>(c.hidden_size), I = static_cast<double>(c.intermediate_size);
  const double qd = static_cast<double>(c.num_heads * c.head_dim);
  const double kvd = static_cast<double>(c.num_kv_heads * c.head_dim);
  // A mixture-of-experts layer multiplies each token by its router and its
  // num_experts_per_tok experts' three matrices, not by a dense MLP.
  double layer_params = 0;
  for (int64_t l = 0; l < c.num_layers; ++l)
    layer_params += 2 * H * qd + 2 * H * kvd +
                    (c.LayerIsMoe(l) ? H * static_cast<double>(c.num_experts) +
                                           static_cast<double>(c.num_experts_per_tok) * 3 * H *
                                               static_cast<double>(c.moe_intermediate_size)
                                     : 3 * H * I);
  const double lm_head_params = static_cast<double>(c.vocab_size) * H;
  const double T = static_cast<double>(o.prompt_tokens);
  const double attn_flops = 2.0 * static_cast<double>(c.num_layers) * qd * T * (T + 1);
  const double prefill_flops = 2 * layer_params * T + 2 * lm_head_params + attn_flops;
  const double prefill_flop_rate = prefill_flops / prefill_s;
  const double prefill_tok_s = T / prefill_s;
  // Tokens per second the peak allows at this prompt length (same FLOP count).
  const double prefill_tok_limit = peak_gemm * T / prefill_flops;

  const double weight_bytes = static_cast<double>(w.decode_bytes_per_token) +
                              static_cast<double>(w.embed_tokens.row_bytes());
  const double decode_tok_s = static_cast<double>(o.decode_tokens) / decode_s;
  const double decode_tok_limit = bw / weight_bytes;
  const double read_s = weight_bytes / bw;
  const double no_overlap_tok_s = 1.0 / (read_s + compute.seconds_per_token);
  const double overlap_tok_s = 1.0 / std::max(read_s, compute.seconds_per_token);
  // Mean KV bytes a decode step reads (positions [0, pos] at step pos).
  const double kv_bytes_mean = static_cast<double>(layout.BytesPerToken()) *
                               (T + 1 + static_cast<double>(o.decode_tokens - 1) / 2);

  const Row rows[] = {
      {"read bandwidth", "GB/s", bw * 1e-9, 0},
      {"peak f32 fma", "GFLOP/s", peak.f32 * 1e-9, 0},
      {"peak bf16 dot", "GFLOP/s", peak.bf16_dot * 1e-9, 0},
      {"peak amx bf16", "GFLOP/s", peak.amx_bf16 * 1e-9, 0},
      {"peak bf16 best", "GFLOP/s", peak_gemm * 1e-9, 0},
      {"prefill", "tok/s", prefill_tok_s, prefill_tok_limit},
      {"prefill", "GFLOP/s", prefill_flop_rate * 1e-9, peak_gemm * 1e-9},
      {"decode", "tok/s", decode_tok_s, decode_tok_limit},
      {"decode weights", "GB/s", decode_tok_s * weight_bytes * 1e-9, bw * 1e-9},
  };
  std::printf("%s (%s), %d threads, isa %s, %s KV, %lld prompt + %lld decode tokens\n",
              o.shape.c_str(), o.model_dir.empty() ? "random bf16" : o.model_dir.c_str(),
              o.threads, IsaName(isa), KvDTypeName(o.kv_dtype),
              static_cast<long long>(o.prompt_tokens), static_cast<long long>(o.decode_tokens));
  std::printf("load %.2f s, %lld params, %.1f MB weights read per decode step\n", load_s,
              static_cast<long long>(w.num_params), weight_bytes * 1e-6);
  std::printf(
      "bandwidth pattern: %s (its best read before the model: %.2f GB/s); best bf16 peak: %s\n",
      bandwidth_best.pattern.c_str(), bandwidth_best.bytes_per_s * 1e-9, peak.BestBf16Name());
  std::printf("read bandwidth around the decode rounds (GB/s):");
  for (double rate : bandwidth_samples) std::printf(" %.2f", rate * 1e-9);
  std::printf("; peak before / after: %.1f / %.1f GFLOP/s\n", peak_before.BestBf16() * 1e-9,
              peak_after.BestBf16() * 1e-9);
  std::printf("\n%-16s %-8s %12s %12s %9s\n", "metric", "unit", "value", "limit", "fraction");
  nlohmann::json json_rows = nlohmann::json::array();
  for (const Row& r : rows) {
    if (r.limit > 0)
      std::printf("%-16s %-8s %12.2f %12.2f %8.1f%%\n", r.metric.c_str(), r.unit.c_str(), r.value,
                  r.limit, 100.0 * r.value / r.limit);
    else
      std::printf("%-16s %-8s %12.2f %12s %9s\n", r.metric.c_str(), r.unit.c_str(), r.value, "-",
                  "-");
    json_rows.push_back(
        {{"metric", r.metric},
         {"unit", r.unit},
         {"value", r.value},
         {"limit", r.limit > 0 ? nlohmann::json(r.limit) : nlohmann::json()},
         {"fraction", r.limit > 0 ? nlohmann::json(r.value / r.limit) : nlohmann::json()}});
  }
  std::printf(
      "\ndecode compute alone %.2f ms/token (its matrices in L2) beside %.2f ms of reading: "
      "bound %.1f tok/s (%.1f%% of the limit) if they do not overlap, %.1f (%.1f%%) if they "
      "overlap perfectly; measured %.1f%%\n",
      compute.seconds_per_token * 1e3, read_s * 1e3, no_overlap_tok_s,
      100.0 * no_overlap_tok_s / decode_tok_limit, overlap_tok_s,
      100.0 * overlap_tok_s / decode_tok_limit, 100.0 * decode_tok_s / decode_tok_limit);
  std::printf("\nprefill %.3f s (median of", prefill_s);
  for (double r : prefill_runs_s) std::printf(" %.3f", r);
  std::printf("; first call, buffers unsized: %.3f s), decode %.2f ms/token\n", first_prefill_s,
              decode_s * 1e3 / static_cast<double>(o.decode_tokens));

  nlohmann::json out;
  out["shape"] = o.shape;
  out["model"] = o.model_dir.empty() ? nlohmann::json("random bf16") : nlohmann::json(o.model_dir);
  out["isa"] = IsaName(isa);
  out["threads"] = o.threads;
  out["kv_dtype"] = KvDTypeName(o.kv_dtype);
  out["prompt_tokens"] = o.prompt_tokens;
  out["decode_tokens"] = o.decode_tokens;
  out["load_s"] = load_s;
  out["num_params"] = w.num_params;
  out["read_bandwidth_gbps"] = bw * 1e-9;
  nlohmann::json samples_gbps = nlohmann::json::array();
  for (double rate : bandwidth_samples) samples_gbps.push_back(rate * 1e-9);
  out["read_bandwidth_samples_gbps"] = samples_gbps;
  out["read_bandwidth_best_gbps"] = bandwidth_best.bytes_per_s * 1e-9;
  out["peak_bf16_best_samples_gflops"] = {peak_before.BestBf16() * 1e-9,
                                          peak_after.BestBf16() * 1e-9};
  out["read_bandwidth_pattern"] = bandwidth_best.pattern;
  out["peak_f32_gflops"] = peak.f32 * 1e-9;
  out["peak_bf16_dot_gflops"] = peak.bf16_dot * 1e-9;
  out["peak_amx_bf16_gflops"] = peak.amx_bf16 * 1e-9;
  out["peak_bf16_best_gflops"] = peak_gemm * 1e-9;
  out["peak_bf16_best"] = peak.BestBf16Name();
  out["prefill_s"] = prefill_s;
  out["prefill_runs_s"] = prefill_runs_s;
  out["prefill_first_call_s"] = first_prefill_s;
  out["prefill_flops"] = prefill_flops;
  out["decode_s"] = decode_s;
  out["decode_weight_bytes_per_token"] = weight_bytes;
  out["decode_kv_bytes_per_token_mean"] = kv_bytes_mean;
  out["decode_compute_s_per_token"] = compute.seconds_per_token;
  out["decode_compute_by_format"] = compute.by_format;
  out["decode_no_overlap_fraction"] = no_overlap_tok_s / decode_tok_limit;
  out["decode_overlap_fraction"] = overlap_tok_s / decode_tok_limit;
  out["generated_tokens"] = generated;
  out["rows"] = json_rows;
  KVFORK_RETURN_IF_ERROR(WriteJsonFile(o.json_path, out));
  std::printf("wrote %s\n", o.json_path.c_str());
  return OkStatus();
}

int Run(int argc, char** argv) {
  return ExitCode("bench model", BenchModel(argc, argv));
}

}  // namespace

KVFORK_REGISTER_BENCHMARK(model, "model", "prefill and decode of one sequence vs the limits", Run);

}  // namespace kvfork::cli
