// `kvfork bench engine`: the continuous-batching engine on a random-weight
// model of a real shape (bf16).
//
//   1. aggregate decode tokens/s with 1, 2, 4, 8, 16 sequences decoding at
//      once, and each as a ratio to 1 sequence in the same run (target: 8
//      sequences >= 5x one);
//   2. time to first token of a 2,000-token prompt cold, and again with its
//      first 1,984 tokens in the prefix cache (target: warm <= cold / 20).
//
// Flags: --shape qwen3-0.6b (any RandomModelShapes() name), --model-dir DIR
// (where the random model is written once and reused; default
// models/bench-<shape>), --tokenizer-dir DIR (default the cached Qwen3
// tokenizer), --threads N, --decode-tokens N (per sequence, default 32),
// --batches 1,2,4,8,16, --prompt-len 2000, --cached-len 1984,
// --json PATH (default bench/results/engine.json).
#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "cli/command.h"
#include "cli/flags.h"
#include "core/thread_pool.h"
#include "core/timer.h"
#include "engine/engine.h"
#include "model/model.h"
#include "model/random_model.h"
#include "tokenizer/tokenizer.h"

namespace kvfork::cli {
namespace {

struct StreamTimes {
  std::vector<int64_t> token_ns;  // arrival of each token event
  bool ok = false;
  std::string error;
};

// Reads a stream to its end, stamping every token.
StreamTimes Collect(RequestStream& s) {
  StreamTimes t;
  for (;;) {
    std::optional<RequestEvent> e = s.Pop(600000);
    if (!e) {
      t.error = "timed out";
      return t;
    }
    if (e->kind == RequestEvent::Kind::kToken) t.token_ns.push_back(NowNanos());
    if (e->kind == RequestEvent::Kind::kDone) {
      t.ok = true;
      return t;
    }
    if (e->kind == RequestEvent::Kind::kError) {
      t.error = e->error.ToString();
      return t;
    }
  }
}

std::vector<int32_t> RandomTokens(std::mt19937& rng, int64_t n) {
  std::uniform_int_distribution<int32_t> d(100, 100000);
  std::vector<int32_t> v(n);
  for (auto& x : v) x = d(rng);
  return v;
}

StatusOr<std::vector<int64_t>> ParseList(const std::string& s) {
  std::vector<int64_t> out;
  std::stringstream ss(s);
  std::string item;
  while (std::getline(ss, item, ',')) {
    try {
      size_t used = 0;
      const long long v = std::stoll(item, &used);
      if (used != item.size() || v < 1) throw std::invalid_argument(item);
      out.push_back(v);
    } catch (const std::exception&) {
      return InvalidArgumentError("--batches: \"" + item + "\" is not a positive integer");
    }
  }
  if (out.empty()) return InvalidArgumentError("--batches is empty");
  return out;
}

struct DecodeRow {
  int64_t seqs = 0;
  double tokens_per_s = 0;
  double ratio = 0;
};

// B sequences with short prompts all decode together; the rate counts the
// tokens that arrive while every one of them is decoding.
StatusOr<DecodeRow> MeasureDecode(Engine& engine, int64_t seqs, int64_t decode_tokens,
                                  std::mt19937& rng) {
  std::vector<std::shared_ptr<RequestStream>> streams;
  for (int64_t i = 0; i < seqs; ++i) {
    Request r;
    r.id = "decode-" + std::to_string(seqs) + "-" + std::to_string(i);
    r.prompt_tokens = RandomTokens(rng, 32);
    r.sampling.temperature = 0;
    r.sampling.ignore_eos = true;
    r.sampling.max_tokens = decode_tokens;
    KVFORK_ASSIGN_OR_RETURN(std::shared_ptr<RequestStream> s, engine.Submit(r));
    streams.push_back(s);
  }
  std::vector<StreamTimes> times(seqs);
  std::vector<std::thread> readers;
  for (int64_t i = 0; i < seqs; ++i)
    readers.emplace_back([&, i] { times[i] = Collect(*streams[i]); });
  for (auto& t : readers) t.join();
  int64_t t0 = 0, t1 = INT64_MAX;
  for (const auto& t : times) {
    if (!t.ok) return InternalError("decode request failed: " + t.error);
    if (t.token_ns.size() < 2) return InternalError("decode request produced < 2 tokens");
    t0 = std::max(t0, t.token_ns.front());
    t1 = std::min(t1, t.token_ns.back());
  }
  int64_t count = 0;
  for (const auto& t : times)
    for (int64_t ns : t.token_ns)
      if (ns > t0 && ns <= t1) ++count;
  DecodeRow row;
  row.seqs = seqs;
  row.tokens_per_s = t1 > t0 ? count / ((t1 - t0) * 1e-9) : 0.0;
  return row;
}

StatusOr<double> MeasureTtft(Engine& engine, const std::string& id, std::vector<int32_t> prompt) {
  Request r;
  r.id = id;
  r.prompt_tokens = std::move(prompt);
  r.sampling.temperature = 0;
  r.sampling.max_tokens = 1;
  r.sampling.ignore_eos = true;
  const int64_t start = NowNanos();
  KVFORK_ASSIGN_OR_RETURN(std::shared_ptr<RequestStream> s, engine.Submit(r));
  StreamTimes t = Collect(*s);
  if (!t.ok || t.token_ns.empty()) return InternalError("TTFT request failed: " + t.error);
  return (t.token_ns.front() - start) * 1e-9;
}

Status BenchEngine(int argc, char** argv) {
  KVFORK_ASSIGN_OR_RETURN(Flags flags, Flags::Parse(argc, argv, {}));
  KVFORK_ASSIGN_OR_RETURN(std::string shape, flags.GetString("shape", "qwen3-0.6b"));
  KVFORK_ASSIGN_OR_RETURN(std::string model_dir, flags.GetString("model-dir", "models/bench-" + shape));
  KVFORK_ASSIGN_OR_RETURN(std::string tok_dir,
                          flags.GetString("tokenizer-dir", ".cache/npm/tokenizer-qwen3/package/models"));
  KVFORK_ASSIGN_OR_RETURN(int64_t threads, flags.GetInt("threads", ThreadPool::DefaultThreads()));
  KVFORK_ASSIGN_OR_RETURN(int64_t decode_tokens, flags.GetInt("decode-tokens", 32));
  KVFORK_ASSIGN_OR_RETURN(std::string batches_text, flags.GetString("batches", "1,2,4,8,16"));
  KVFORK_ASSIGN_OR_RETURN(int64_t prompt_len, flags.GetInt("prompt-len", 2000));
  KVFORK_ASSIGN_OR_RETURN(int64_t cached_len, flags.GetInt("cached-len", 1984));
  KVFORK_ASSIGN_OR_RETURN(std::string json_path, flags.GetString("json", "bench/results/engine.json"));
  KVFORK_RETURN_IF_ERROR(flags.Finish());
  KVFORK_ASSIGN_OR_RETURN(std::vector<int64_t> batches, ParseList(batches_text));
  if (threads < 1) return InvalidArgumentError("--threads must be >= 1");
  if (decode_tokens < 4) return InvalidArgumentError("--decode-tokens must be >= 4");
  if (prompt_len < 2) return InvalidArgumentError("--prompt-len must be >= 2");
  if (cached_len < 0 || cached_len >= prompt_len)
    return InvalidArgumentError("--cached-len must be in [0, --prompt-len)");

  if (!std::filesystem::exists(model_dir + "/config.json")) {
    RandomModelOptions ro;
    ro.shape = shape;
    ro.seed = 1;
    ro.tokenizer_dir = tok_dir;
    std::fprintf(stderr, "writing random %s model to %s\n", shape.c_str(), model_dir.c_str());
    KVFORK_RETURN_IF_ERROR(WriteRandomModel(ro, model_dir));
  }
  ModelLoadOptions lo;
  KVFORK_ASSIGN_OR_RETURN(std::unique_ptr<Model> model, Model::Load(model_dir, lo));
  KVFORK_ASSIGN_OR_RETURN(std::unique_ptr<Tokenizer> tokenizer, Tokenizer::Load(model_dir));
  const int64_t max_batch = *std::max_element(batches.begin(), batches.end());

  EngineOptions eo;
  eo.threads = static_cast<int>(threads);
  eo.max_num_seqs = std::max<int64_t>(8, max_batch);
  const int64_t bs = eo.kv_block_size;
  eo.kv_blocks = std::max<int64_t>((max_batch * (32 + decode_tokens)) / bs + max_batch * 2,
                                   3 * (prompt_len + bs) / bs) + 16;
  std::mt19937 rng(17);

  std::vector<DecodeRow> rows;
  {
    KVFORK_ASSIGN_OR_RETURN(std::unique_ptr<Engine> engine, Engine::Create(eo, *model, *tokenizer));
    // Warm-up: page in the weights and the pool.
    KVFORK_RETURN_IF_ERROR(MeasureDecode(*engine, 1, 4, rng).status());
    for (int64_t b : batches) {
      KVFORK_ASSIGN_OR_RETURN(DecodeRow row, MeasureDecode(*engine, b, decode_tokens, rng));
      rows.push_back(row);
      std::fprintf(stderr, "  %lld seqs: %.1f tok/s\n", static_cast<long long>(b), row.tokens_per_s);
    }
    engine->Shutdown();
  }
  double base = 0;
  for (const auto& r : rows)
    if (r.seqs == 1) base = r.tokens_per_s;
  if (base <= 0) base = rows.front().tokens_per_s / rows.front().seqs;
  for (auto& r : rows) r.ratio = r.tokens_per_s / base;

  // TTFT: cold (empty cache), then warm with the first cached_len tokens cached
  // by an earlier request that shares only them.
  double cold_s = 0, warm_s = 0;
  int64_t cached_tokens = 0;
  {
    KVFORK_ASSIGN_OR_RETURN(std::unique_ptr<Engine> engine, Engine::Create(eo, *model, *tokenizer));
    const std::vector<int32_t> prompt = RandomTokens(rng, prompt_len);
    KVFORK_ASSIGN_OR_RETURN(cold_s, MeasureTtft(*engine, "ttft-cold", prompt));
    engine->ResetPrefixCache();
    std::vector<int32_t> seed_prompt(prompt.begin(), prompt.begin() + cached_len);
    const std::vector<int32_t> other = RandomTokens(rng, prompt_len - cached_len);
    seed_prompt.insert(seed_prompt.end(), other.begin(), other.end());
    KVFORK_RETURN_IF_ERROR(MeasureTtft(*engine, "ttft-seed", seed_prompt).status());
    const int64_t hits_before = engine->Stats().prefix_hits_tokens;
    KVFORK_ASSIGN_OR_RETURN(warm_s, MeasureTtft(*engine, "ttft-warm", prompt));
    cached_tokens = engine->Stats().prefix_hits_tokens - hits_before;
    engine->Shutdown();
  }

  std::printf("kvfork bench engine: %s bf16 random weights, %lld threads, %lld decode tokens/seq\n",
              shape.c_str(), static_cast<long long>(threads),
              static_cast<long long>(decode_tokens));
  std::printf("%-10s %14s %10s\n", "seqs", "decode tok/s", "vs 1 seq");
  for (const auto& r : rows)
    std::printf("%-10lld %14.1f %9.2fx\n", static_cast<long long>(r.seqs), r.tokens_per_s, r.ratio);
  std::printf("TTFT %lld-token prompt: cold %.3f s, warm (%lld cached) %.3f s, cold/warm %.1fx\n",
              static_cast<long long>(prompt_len), cold_s, static_cast<long long>(cached_tokens),
              warm_s, warm_s > 0 ? cold_s / warm_s : 0.0);
  double r8 = 0;
  for (const auto& r : rows)
    if (r.seqs == 8) r8 = r.ratio;
  std::printf("targets: 8 seqs >= 5x one: %s (%.2fx); warm TTFT <= cold/20: %s\n",
              r8 >= 5.0 ? "met" : "NOT met", r8, warm_s * 20 <= cold_s ? "met" : "NOT met");

  std::filesystem::path jp(json_path);
  if (jp.has_parent_path()) std::filesystem::create_directories(jp.parent_path());
  std::ofstream out(json_path);
  if (!out) return NotFoundError("cannot write --json " + json_path);
  out << "{\n  \"shape\": \"" << shape << "\",\n  \"threads\": " << threads
      << ",\n  \"decode_tokens\": " << decode_tokens << ",\n  \"decode\": [";
  for (size_t i = 0; i < rows.size(); ++i)
    out << (i ? ", " : "") << "{\"seqs\": " << rows[i].seqs
        << ", \"tokens_per_s\": " << rows[i].tokens_per_s << ", \"ratio\": " << rows[i].ratio
        << "}";
  out << "],\n  \"ttft\": {\"prompt_tokens\": " << prompt_len << ", \"cached_tokens\": "
      << cached_tokens << ", \"cold_s\": " << cold_s << ", \"warm_s\": " << warm_s << "}\n}\n";
  std::printf("wrote %s\n", json_path.c_str());
  return OkStatus();
}

int Run(int argc, char** argv) {
  Status s = BenchEngine(argc, argv);
  if (!s.ok()) {
    std::fprintf(stderr, "kvfork bench engine: %s\n", s.ToString().c_str());
    return 1;
  }
  return 0;
}

}  // namespace

KVFORK_REGISTER_BENCHMARK(engine, "engine",
                          "engine decode scaling 1..16 seqs and cold vs warm TTFT", Run);

}  // namespace kvfork::cli
