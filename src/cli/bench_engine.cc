// `kvfork bench engine`: the continuous-batching engine on a random-weight
// model of a real shape (bf16).
//
//   1. aggregate decode tokens/s with 1, 2, 4, 8, 16 sequences decoding at
//      once, and each as a ratio to 1 sequence in the same run (target: 8
//      sequences >= 5x one), with where a decode step's time goes: the
//      forward pass, the samplers, and the rest (scheduling, KV bookkeeping,
//      detokenizing, streaming, the engine loop);
//   2. time to first token of a 2,000-token prompt cold, and of a second
//      prompt whose first 1,984 tokens the first one left in the prefix
//      cache (target: warm <= cold / 20).
//
// The batch sizes run in --repeats interleaved rounds and each keeps its best
// round, so a burst of load from other processes skews one round, not one
// batch size; the load average before and after is printed beside the table.
//
// Flags: --shape qwen3-0.6b (any RandomModelShapes() name), --model-dir DIR
// (where the random model is written once and reused; default
// models/bench-<shape>), --tokenizer-dir DIR (default the cached Qwen3
// tokenizer), --threads N, --decode-tokens N (per sequence, default 32),
// --batches 1,2,4,8,16, --repeats N (default 3), --prompt-len 2000,
// --cached-len 1984, --json PATH (default bench/results/engine.json).
#include <stdlib.h>

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
#include "cli/json_file.h"
#include "core/progress.h"
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
  // Per decode-only step, milliseconds: wall-clock (seqs / tokens_per_s) =
  // Model::Forward + the samplers + the rest of Engine's Step() (scheduling,
  // KV bookkeeping, detokenizing, streaming) + the engine loop between steps
  // (what is left of the wall-clock).
  double step_ms = 0;
  double forward_ms = 0;
  double sample_ms = 0;
  double other_ms = 0;
  double loop_ms = 0;
  std::vector<double> rounds;  // tokens_per_s of every round
};

// B sequences with short prompts all decode together; the rate counts the
// tokens that arrive after every sequence has its first token (t0) until the
// last token of all (t1). Every sequence asks for the same number of tokens,
// so they decode in lockstep and finish in the same step; t1 is the latest
// last token so that the last step's tokens all count, not just the first
// one a reader thread stamped.
StatusOr<DecodeRow> MeasureDecode(Engine& engine, int64_t seqs, int64_t decode_tokens,
                                  std::mt19937& rng) {
  const EngineStats before = engine.Stats();
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
  int64_t t0 = 0, t1 = 0;
  for (const auto& t : times) {
    if (!t.ok) return InternalError("decode request failed: " + t.error);
    if (t.token_ns.size() < 2) return InternalError("decode request produced < 2 tokens");
    t0 = std::max(t0, t.token_ns.front());
    t1 = std::max(t1, t.token_ns.back());
  }
  int64_t count = 0;
  for (const auto& t : times)
    for (int64_t ns : t.token_ns)
      if (ns > t0) ++count;
  DecodeRow row;
  row.seqs = seqs;
  row.tokens_per_s = t1 > t0 ? count / ((t1 - t0) * 1e-9) : 0.0;
  // The engine publishes stats after the step that ended the last request.
  const EngineStats after = engine.Stats();
  const int64_t steps = after.decode_steps - before.decode_steps;
  if (steps > 0 && row.tokens_per_s > 0) {
    row.step_ms = 1e3 * seqs / row.tokens_per_s;
    row.forward_ms = (after.decode_forward_ns - before.decode_forward_ns) * 1e-6 / steps;
    row.sample_ms = (after.decode_sample_ns - before.decode_sample_ns) * 1e-6 / steps;
    const double in_step_ms = (after.decode_step_ns - before.decode_step_ns) * 1e-6 / steps;
    row.other_ms = in_step_ms - row.forward_ms - row.sample_ms;
    row.loop_ms = row.step_ms - in_step_ms;
  }
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

std::string LoadAverage() {
  double load[3] = {0, 0, 0};
  if (getloadavg(load, 3) < 0) return "unknown";
  char buf[64];
  std::snprintf(buf, sizeof(buf), "%.2f %.2f %.2f", load[0], load[1], load[2]);
  return buf;
}

Status BenchEngine(int argc, char** argv) {
  Flags flags = Flags::Parse(argc, argv, {});
  const std::string shape = flags.GetString("shape", "qwen3-0.6b", "random-weight model shape");
  const std::string model_dir = flags.GetString(
      "model-dir", "models/bench-" + shape, "where the random model is written once and reused");
  const std::string tok_dir = flags.GetString(
      "tokenizer-dir", ".cache/npm/tokenizer-qwen3/package/models", "tokenizer directory");
  const int64_t threads = flags.GetInt("threads", ThreadPool::DefaultThreads(),
                                       "compute threads, one per usable core unless set");
  const int64_t decode_tokens = flags.GetInt("decode-tokens", 32, "decode tokens per sequence");
  const std::string batches_text = flags.GetString(
      "batches", "1,2,4,8,16", "comma-separated numbers of sequences decoding at once");
  const int64_t repeats =
      flags.GetInt("repeats", 3, "interleaved rounds; each batch keeps its best");
  const int64_t prompt_len =
      flags.GetInt("prompt-len", 2000, "tokens of the time-to-first-token prompt");
  const int64_t cached_len = flags.GetInt(
      "cached-len", 1984, "of those, tokens the warm prompt finds in the prefix cache");
  const std::string json_path =
      flags.GetString("json", "bench/results/engine.json", "where the JSON result goes");
  KVFORK_RETURN_IF_ERROR(flags.Finish());
  KVFORK_ASSIGN_OR_RETURN(std::vector<int64_t> batches, ParseList(batches_text));
  if (threads < 1) return InvalidArgumentError("--threads must be >= 1");
  if (decode_tokens < 4) return InvalidArgumentError("--decode-tokens must be >= 4");
  if (repeats < 1) return InvalidArgumentError("--repeats must be >= 1");
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
                                   3 * (prompt_len + bs) / bs) +
                 16;
  std::mt19937 rng(17);
  const std::string load_before = LoadAverage();

  std::vector<DecodeRow> rows(batches.size());
  {
    KVFORK_ASSIGN_OR_RETURN(std::unique_ptr<Engine> engine, Engine::Create(eo, *model, *tokenizer));
    // Warm-up: page in the weights and the pool.
    KVFORK_RETURN_IF_ERROR(MeasureDecode(*engine, 1, 4, rng).status());
    // On a terminal only: "decode round: 2/3  8 seqs: 123.4 tok/s" (each
    // round's rates are in the JSON).
    ProgressOptions po;
    po.label = "decode round";
    po.total = repeats;
    Progress progress(po);
    for (int64_t round = 0; round < repeats; ++round) {
      for (size_t i = 0; i < batches.size(); ++i) {
        KVFORK_ASSIGN_OR_RETURN(DecodeRow row,
                                MeasureDecode(*engine, batches[i], decode_tokens, rng));
        char note[64];
        std::snprintf(note, sizeof(note), "%lld seqs: %.1f tok/s",
                      static_cast<long long>(batches[i]), row.tokens_per_s);
        progress.Update(round + 1, note);
        std::vector<double> seen = std::move(rows[i].rounds);
        seen.push_back(row.tokens_per_s);
        if (row.tokens_per_s > rows[i].tokens_per_s) rows[i] = row;
        rows[i].rounds = std::move(seen);
      }
    }
    progress.Finish();
    engine->Shutdown();
  }
  double base = 0;
  for (const auto& r : rows)
    if (r.seqs == 1) base = r.tokens_per_s;
  if (base <= 0) base = rows.front().tokens_per_s / rows.front().seqs;
  for (auto& r : rows) r.ratio = r.tokens_per_s / base;

  // TTFT on a fresh engine: a cold prompt, then a prompt that shares only its
  // first cached_len tokens (the cold one left them in the prefix cache).
  double cold_s = 0, warm_s = 0;
  int64_t cached_tokens = 0;
  {
    KVFORK_ASSIGN_OR_RETURN(std::unique_ptr<Engine> engine, Engine::Create(eo, *model, *tokenizer));
    const std::vector<int32_t> cold_prompt = RandomTokens(rng, prompt_len);
    std::vector<int32_t> warm_prompt(cold_prompt.begin(), cold_prompt.begin() + cached_len);
    // Differs from the cold prompt at every position after cached_len.
    for (int64_t i = cached_len; i < prompt_len; ++i)
      warm_prompt.push_back(cold_prompt[i] == 100 ? 101 : 100);
    KVFORK_ASSIGN_OR_RETURN(cold_s, MeasureTtft(*engine, "ttft-cold", cold_prompt));
    const int64_t hits_before = engine->Stats().prefix_hits_tokens;
    KVFORK_ASSIGN_OR_RETURN(warm_s, MeasureTtft(*engine, "ttft-warm", warm_prompt));
    cached_tokens = engine->Stats().prefix_hits_tokens - hits_before;
    engine->Shutdown();
  }
  const std::string load_after = LoadAverage();

  std::printf(
      "kvfork bench engine: %s bf16 random weights, %lld threads, %lld decode tokens/seq, "
      "best of %lld rounds\n",
      shape.c_str(), static_cast<long long>(threads), static_cast<long long>(decode_tokens),
      static_cast<long long>(repeats));
  std::printf("load average (1, 5, 15 min): %s before, %s after\n", load_before.c_str(),
              load_after.c_str());
  std::printf("%-6s %13s %9s   %s\n", "seqs", "decode tok/s", "vs 1 seq",
              "ms per decode step: wall = forward + sample + other + loop");
  for (const auto& r : rows)
    std::printf("%-6lld %13.1f %8.2fx   %8.1f = %8.1f + %6.2f + %6.2f + %6.2f\n",
                static_cast<long long>(r.seqs), r.tokens_per_s, r.ratio, r.step_ms, r.forward_ms,
                r.sample_ms, r.other_ms, r.loop_ms);
  std::printf("TTFT %lld-token prompt: cold %.3f s, warm (%lld cached) %.3f s, cold/warm %.1fx\n",
              static_cast<long long>(prompt_len), cold_s, static_cast<long long>(cached_tokens),
              warm_s, warm_s > 0 ? cold_s / warm_s : 0.0);
  double r8 = 0;
  for (const auto& r : rows)
    if (r.seqs == 8) r8 = r.ratio;
  std::printf("targets: 8 seqs >= 5x one: %s (%.2fx); warm TTFT <= cold/20: %s\n",
              r8 >= 5.0 ? "met" : "NOT met", r8, warm_s * 20 <= cold_s ? "met" : "NOT met");

  nlohmann::json decode = nlohmann::json::array();
  for (const DecodeRow& r : rows)
    decode.push_back({{"seqs", r.seqs},
                      {"tokens_per_s", r.tokens_per_s},
                      {"ratio", r.ratio},
                      {"step_ms", r.step_ms},
                      {"forward_ms", r.forward_ms},
                      {"sample_ms", r.sample_ms},
                      {"other_ms", r.other_ms},
                      {"loop_ms", r.loop_ms},
                      {"rounds_tokens_per_s", r.rounds}});
  const nlohmann::json out = {{"shape", shape},
                              {"threads", threads},
                              {"decode_tokens", decode_tokens},
                              {"repeats", repeats},
                              {"load_average_before", load_before},
                              {"load_average_after", load_after},
                              {"decode", decode},
                              {"ttft",
                               {{"prompt_tokens", prompt_len},
                                {"cached_tokens", cached_tokens},
                                {"cold_s", cold_s},
                                {"warm_s", warm_s}}}};
  KVFORK_RETURN_IF_ERROR(WriteJsonFile(json_path, out));
  std::printf("wrote %s\n", json_path.c_str());
  return OkStatus();
}

int Run(int argc, char** argv) {
  return ExitCode("bench engine", BenchEngine(argc, argv));
}

}  // namespace

KVFORK_REGISTER_BENCHMARK(engine, "engine",
                          "engine decode scaling 1..16 seqs and cold vs warm TTFT", Run);

}  // namespace kvfork::cli
