// `kvfork kv-quality --model M --file TEXT --kv-dtype int8 [--base-kv-dtype bf16]`:
// what a KV cache format costs in model quality. The same text, chunks and
// positions as `kvfork perplexity` (llama-perplexity's, perplexity_chunks.h)
// run through the model twice in one process, each chunk first with the base
// KV format and then with the tested one, and the two next-token
// distributions are compared at every scored position:
//   - KL(base || tested) = sum_v p_base(v) (log p_base(v) - log p_tested(v)),
//     in double from each row's log-softmax; its mean (with the standard
//     error of the mean), median, p99 and max over the positions;
//   - top-1 agreement: the share of positions whose argmax (first index of
//     the largest logit) is the same in both runs;
//   - both perplexities, in llama-perplexity's arithmetic, so each equals
//     `kvfork perplexity --kv-dtype` of that format on the same file.
// llama-perplexity's --kl-divergence reports the same statistics for
// llama.cpp's KV types (bench/kv_quality runs both on one model and text).
//
// Memory: only the current chunk's base logits are kept ([ctx/2, vocab]
// floats); each position's four numbers are all that outlives its chunk.
//
// kivi4 and kivi2 are not KV formats but a simulation of KIVI's layout (K
// per channel over --kivi-group-tokens tokens, V per token, the newest
// incomplete group in bf16; kv_quality_kivi.h), to decide whether a real
// KIVI format would be worth its kernels: the KV is stored dequantized in
// bf16 and nothing is saved.
//
// Flags: --model DIR|FILE, --file TEXT, --kv-dtype, --base-kv-dtype (bf16),
//        --ctx N (512), --chunks N (all), --threads N, --json PATH,
//        --dump-logits PREFIX (both runs' scored logits, for tests),
//        --kivi-group-tokens N (16), --kivi-keys channel|token (channel).
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <memory>
#include <span>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "cli/command.h"
#include "cli/flags.h"
#include "cli/json_file.h"
#include "cli/kv_blocks.h"
#include "cli/kv_quality_kivi.h"
#include "cli/model_tokenizer.h"
#include "cli/perplexity_chunks.h"
#include "core/progress.h"
#include "core/thread_pool.h"
#include "core/timer.h"
#include "kernels/kv_kivi_sim.h"
#include "kv/kv_cache.h"
#include "model/model.h"
#include "tokenizer/tokenizer.h"

namespace kvfork::cli {
namespace {

// One scored position's comparison of the two runs.
struct PositionResult {
  double kl = 0;           // KL(base || tested), nats
  double nll_base = 0;     // -log p_base(next token)
  double nll_tested = 0;   // -log p_tested(next token)
  bool same_top1 = false;  // the same argmax in both rows
};

// log(sum_v exp(row[v] - max)) in double, and the max (f32) it is relative to.
struct LogSumExp {
  float max = 0;
  double lse = 0;
};

LogSumExp RowLogSumExp(const float* row, int64_t vocab) {
  LogSumExp out;
  out.max = row[0];
  for (int64_t v = 1; v < vocab; ++v) out.max = std::max(out.max, row[v]);
  double sum = 0;
  for (int64_t v = 0; v < vocab; ++v) sum += std::exp(static_cast<double>(row[v]) - out.max);
  out.lse = std::log(sum);
  return out;
}

int64_t ArgMax(const float* row, int64_t vocab) {
  int64_t best = 0;
  for (int64_t v = 1; v < vocab; ++v)
    if (row[v] > row[best]) best = v;
  return best;
}

PositionResult ComparePosition(const float* base, const float* tested, int64_t vocab,
                               int32_t next) {
  const LogSumExp b = RowLogSumExp(base, vocab);
  const LogSumExp t = RowLogSumExp(tested, vocab);
  PositionResult r;
  double kl = 0;
  for (int64_t v = 0; v < vocab; ++v) {
    const double lp_base = static_cast<double>(base[v]) - b.max - b.lse;
    const double lp_tested = static_cast<double>(tested[v]) - t.max - t.lse;
    // Identical rows give exactly 0: exp(x) * (x - x).
    kl += std::exp(lp_base) * (lp_base - lp_tested);
  }
  r.kl = kl;
  r.nll_base = NegLogProb(base, vocab, next);
  r.nll_tested = NegLogProb(tested, vocab, next);
  r.same_top1 = ArgMax(base, vocab) == ArgMax(tested, vocab);
  return r;
}

// Linear interpolation between the closest ranks (numpy's default), q in [0, 1].
double Percentile(std::vector<double> values, double q) {
  std::sort(values.begin(), values.end());
  const double k = q * static_cast<double>(values.size() - 1);
  const size_t lo = static_cast<size_t>(std::floor(k));
  const size_t hi = static_cast<size_t>(std::ceil(k));
  return values[lo] + (values[hi] - values[lo]) * (k - static_cast<double>(lo));
}

struct Summary {
  int64_t positions = 0;
  double kl_mean = 0, kl_stderr = 0, kl_median = 0, kl_p99 = 0, kl_max = 0;
  int64_t same_top1 = 0;
  double ppl_base = 0, ppl_tested = 0;
};

Summary Summarize(const std::vector<PositionResult>& results) {
  Summary s;
  s.positions = static_cast<int64_t>(results.size());
  const double n = static_cast<double>(s.positions);
  std::vector<double> kl;
  kl.reserve(results.size());
  double kl_sum = 0, kl_sum2 = 0, nll_base = 0, nll_tested = 0;
  for (const PositionResult& r : results) {
    kl.push_back(r.kl);
    kl_sum += r.kl;
    kl_sum2 += r.kl * r.kl;
    nll_base += r.nll_base;
    nll_tested += r.nll_tested;
    s.same_top1 += r.same_top1 ? 1 : 0;
  }
  s.kl_mean = kl_sum / n;
  const double var = kl_sum2 / n - s.kl_mean * s.kl_mean;
  s.kl_stderr = var > 0 && n > 1 ? std::sqrt(var / (n - 1)) : 0.0;
  s.kl_median = Percentile(kl, 0.5);
  s.kl_p99 = Percentile(kl, 0.99);
  s.kl_max = *std::max_element(kl.begin(), kl.end());
  s.ppl_base = std::exp(nll_base / n);
  s.ppl_tested = std::exp(nll_tested / n);
  return s;
}

// Appends rows to a raw file (the --dump-logits outputs).
Status AppendRaw(const std::string& path, const void* data, size_t bytes, bool truncate) {
  std::ofstream out(path, std::ios::binary | (truncate ? std::ios::trunc : std::ios::app));
  out.write(static_cast<const char*>(data), static_cast<std::streamsize>(bytes));
  if (!out) return InternalError("--dump-logits: cannot write " + path);
  return OkStatus();
}

// One chunk through the model in `format`: ForwardScoredHalf, or its KIVI
// simulation on a bf16 layout.
Status RunChunk(Model& model, const KvQualityFormat& format, const KvLayout& layout,
                const BlockTable& blocks, ThreadPool& pool, std::span<const int32_t> chunk,
                const KiviOptions& kivi, std::vector<float>* logits) {
  if (format.kivi_bits == 0) return ForwardScoredHalf(model, layout, blocks, pool, chunk, logits);
  return ForwardScoredHalfKivi(model, layout, blocks, pool, chunk, format.kivi_bits, kivi, logits);
}

void PrintTable(const Summary& s, const std::string& base, const std::string& tested) {
  std::printf("| KV %s against %s | value |\n|---|---|\n", tested.c_str(), base.c_str());
  std::printf("| scored positions | %lld |\n", static_cast<long long>(s.positions));
  std::printf("| PPL %s (base) | %.4f |\n", base.c_str(), s.ppl_base);
  std::printf("| PPL %s | %.4f (%+.3f%%) |\n", tested.c_str(), s.ppl_tested,
              100.0 * (s.ppl_tested / s.ppl_base - 1.0));
  std::printf("| mean KL(base || tested) | %.6g +/- %.2g |\n", s.kl_mean, s.kl_stderr);
  std::printf("| median KL | %.6g |\n", s.kl_median);
  std::printf("| p99 KL | %.6g |\n", s.kl_p99);
  std::printf("| max KL | %.6g |\n", s.kl_max);
  std::printf("| top-1 agreement | %.3f%% (%lld of %lld) |\n",
              100.0 * static_cast<double>(s.same_top1) / static_cast<double>(s.positions),
              static_cast<long long>(s.same_top1), static_cast<long long>(s.positions));
}

Status KvQuality(int argc, char** argv) {
  Flags flags = Flags::Parse(argc, argv, {});
  const std::string model_path =
      flags.GetRequiredString("model", "a Hugging Face model directory or a .gguf file");
  const std::string file = flags.GetRequiredString("file", "the text file to score");
  const std::string tested_name = flags.GetRequiredString(
      "kv-dtype",
      "the KV format under test (bf16, f32, int8, q4, q4r), or kivi4 / kivi2: KIVI's layout "
      "simulated for quality only (K per channel, V per token, quantized and stored "
      "dequantized in bf16: no memory saved)");
  const std::string base_name =
      flags.GetString("base-kv-dtype", "bf16", "the KV format it is compared against");
  const int64_t ctx = flags.GetInt("ctx", 512, "tokens per chunk (llama-perplexity's -c)");
  const int64_t max_chunks = flags.GetInt("chunks", -1, "chunks to score at most; -1 = all");
  const int64_t threads = flags.GetInt("threads", ThreadPool::DefaultThreads(),
                                       "compute threads, one per usable core unless set");
  const std::string json_path =
      flags.GetString("json", "", "also write the result as JSON to this file (none)");
  const int64_t kivi_group = flags.GetInt(
      "kivi-group-tokens", 16,
      "kivi4/kivi2: tokens per K channel group; the newest incomplete group stays bf16");
  const std::string kivi_keys = flags.GetString(
      "kivi-keys", "channel",
      "kivi4/kivi2: K groups per channel (KIVI) or per token as V (token: an ablation)");
  const std::string dump_prefix = flags.GetString(
      "dump-logits", "",
      "write PREFIX.base.f32 and PREFIX.tested.f32 ([positions, vocab] logits) and "
      "PREFIX.next.i32 (the scored next tokens), for checking the statistics (none)");
  KVFORK_RETURN_IF_ERROR(flags.Finish());
  if (ctx < 4 || ctx > (1 << 20)) return InvalidArgumentError("--ctx must be in [4, 1048576]");
  if (threads < 1) return InvalidArgumentError("--threads must be >= 1");
  if (kivi_group < 1 || kivi_group > (1 << 20))
    return InvalidArgumentError("--kivi-group-tokens must be in [1, 1048576]");
  KiviOptions kivi_options;
  kivi_options.group_tokens = kivi_group;
  if (kivi_keys == "token") {
    kivi_options.key_axis = KiviKeyAxis::kPerToken;
  } else if (kivi_keys != "channel") {
    return InvalidArgumentError("--kivi-keys: expected channel or token, got '" + kivi_keys + "'");
  }
  KVFORK_ASSIGN_OR_RETURN(KvQualityFormat tested, ParseKvQualityFormat("kv-dtype", tested_name));
  KVFORK_ASSIGN_OR_RETURN(KvQualityFormat base, ParseKvQualityFormat("base-kv-dtype", base_name));
  KVFORK_ASSIGN_OR_RETURN(std::string text, ReadTextFile(file));

  ModelLoadOptions load;
  KVFORK_ASSIGN_OR_RETURN(std::unique_ptr<Model> model, Model::Load(model_path, load));
  KVFORK_ASSIGN_OR_RETURN(std::unique_ptr<Tokenizer> tokenizer, LoadModelTokenizer(model_path, ""));
  const ModelConfig& c = model->config();
  if (ctx > c.max_position_embeddings && c.max_position_embeddings > 0)
    return InvalidArgumentError("--ctx " + std::to_string(ctx) + " exceeds the model's " +
                                std::to_string(c.max_position_embeddings) + " positions");
  const ChunkedText chunked = TokenizeForPerplexity(*tokenizer, text);
  const int64_t n = static_cast<int64_t>(chunked.tokens.size());
  if (n < 2 * ctx)
    return InvalidArgumentError(file + " tokenizes to " + std::to_string(n) +
                                " tokens; kv-quality with --ctx " + std::to_string(ctx) +
                                " needs at least " + std::to_string(2 * ctx));
  int64_t chunks = n / ctx;
  if (max_chunks >= 0) chunks = std::min(chunks, max_chunks);
  if (chunks < 1) return InvalidArgumentError("--chunks must be >= 1 or -1 (all)");

  ThreadPool pool(static_cast<int>(threads));
  const KvLayout base_layout = model->MakeKvLayout(base.storage, 16);
  const KvLayout tested_layout = model->MakeKvLayout(tested.storage, 16);
  const bool kivi = base.kivi_bits > 0 || tested.kivi_bits > 0;
  if (kivi && base_layout.head_dim % kKiviValueGroup != 0)
    return InvalidArgumentError("kivi4/kivi2 quantize V in groups of " +
                                std::to_string(kKiviValueGroup) + " dims; the model's head_dim " +
                                std::to_string(base_layout.head_dim) + " is not a multiple of it");
  KVFORK_ASSIGN_OR_RETURN(BlockTable base_blocks, AllocateBlocks(base_layout, ctx));
  KVFORK_ASSIGN_OR_RETURN(BlockTable tested_blocks, AllocateBlocks(tested_layout, ctx));
  const int64_t first = ctx / 2;
  const int64_t scored_per_chunk = ctx - first - 1;
  const int64_t vocab = c.vocab_size;
  std::fprintf(stderr,
               "kv-quality: KV %s against %s, %lld tokens, %lld chunks of %lld (scoring the last "
               "%lld of each), bos %s, %lld threads\n",
               tested_name.c_str(), base_name.c_str(), static_cast<long long>(n),
               static_cast<long long>(chunks), static_cast<long long>(ctx),
               static_cast<long long>(scored_per_chunk), chunked.bos ? "yes" : "no",
               static_cast<long long>(threads));

  std::vector<PositionResult> results;
  results.reserve(static_cast<size_t>(chunks * scored_per_chunk));
  std::vector<float> base_logits, tested_logits;
  const int64_t t0 = NowNanos();
  ProgressOptions po;
  po.label = "kv-quality: chunk";
  po.total = chunks;
  Progress progress(po);
  for (int64_t k = 0; k < chunks; ++k) {
    const std::vector<int32_t> chunk = ChunkTokens(chunked, ctx, k);
    KVFORK_RETURN_IF_ERROR(
        RunChunk(*model, base, base_layout, base_blocks, pool, chunk, kivi_options, &base_logits));
    KVFORK_RETURN_IF_ERROR(RunChunk(*model, tested, tested_layout, tested_blocks, pool, chunk,
                                    kivi_options, &tested_logits));
    // Positions are independent; each task writes only its own slot, so the
    // thread split changes nothing.
    std::vector<PositionResult> chunk_results(static_cast<size_t>(scored_per_chunk));
    pool.ParallelFor(scored_per_chunk, [&](int64_t i) {
      chunk_results[static_cast<size_t>(i)] =
          ComparePosition(base_logits.data() + i * vocab, tested_logits.data() + i * vocab, vocab,
                          chunk[static_cast<size_t>(first + i + 1)]);
    });
    results.insert(results.end(), chunk_results.begin(), chunk_results.end());
    if (!dump_prefix.empty()) {
      const size_t row_bytes = static_cast<size_t>(scored_per_chunk * vocab) * sizeof(float);
      KVFORK_RETURN_IF_ERROR(
          AppendRaw(dump_prefix + ".base.f32", base_logits.data(), row_bytes, k == 0));
      KVFORK_RETURN_IF_ERROR(
          AppendRaw(dump_prefix + ".tested.f32", tested_logits.data(), row_bytes, k == 0));
      KVFORK_RETURN_IF_ERROR(AppendRaw(dump_prefix + ".next.i32", chunk.data() + first + 1,
                                       static_cast<size_t>(scored_per_chunk) * sizeof(int32_t),
                                       k == 0));
    }
    progress.Update(k + 1);
  }
  progress.Finish();
  const double seconds = static_cast<double>(NowNanos() - t0) * 1e-9;
  const Summary s = Summarize(results);
  PrintTable(s, base_name, tested_name);
  std::fprintf(stderr, "kv-quality: %lld scored positions in %.1f s\n",
               static_cast<long long>(s.positions), seconds);
  if (!json_path.empty()) {
    nlohmann::json j = {
        {"model", model_path},
        {"file", file},
        {"ctx", ctx},
        {"chunks", chunks},
        {"tokens", n},
        {"bos", chunked.bos.has_value()},
        {"base_kv_dtype", base_name},
        {"kv_dtype", tested_name},
        {"positions", s.positions},
        {"ppl_base", s.ppl_base},
        {"ppl_tested", s.ppl_tested},
        {"kl_mean", s.kl_mean},
        {"kl_mean_stderr", s.kl_stderr},
        {"kl_median", s.kl_median},
        {"kl_p99", s.kl_p99},
        {"kl_max", s.kl_max},
        {"top1_same", s.same_top1},
        {"top1_agreement", static_cast<double>(s.same_top1) / static_cast<double>(s.positions)},
        {"threads", threads},
        {"seconds", seconds}};
    if (kivi) {
      j["kivi_group_tokens"] = kivi_group;
      j["kivi_keys"] = kivi_keys;
      j["kivi_note"] =
          "kivi4/kivi2: KIVI's layout simulated for quality only (K per channel over the group, V "
          "per token in groups of 32 dims, the newest incomplete group in bf16), KV stored "
          "dequantized in bf16";
    }
    KVFORK_RETURN_IF_ERROR(WriteJsonFile(json_path, j));
  }
  return OkStatus();
}

int Run(int argc, char** argv) {
  return ExitCode("kv-quality", KvQuality(argc, argv));
}

}  // namespace

KVFORK_REGISTER_COMMAND(kv_quality, "kv-quality",
                        "KL divergence and top-1 agreement of a KV format against another", Run);

}  // namespace kvfork::cli
