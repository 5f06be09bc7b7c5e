// `kvfork bench grammar`: the cost of constrained decoding per decode step,
// as a fraction of a decode step of the model (goal: under 5%).
//
// Replay: JSON documents (a tool-call-like schema's instances, pretty and
// compact) are tokenized with the Qwen3 tokenizer (151,669 tokens) and fed
// token by token through a TokenConstraint, as the sampler does each step:
// the mask of the state (a cache lookup or a trie walk), the masked copy of a
// logits row (-inf, then the allowed logits), and the advance by the token.
// Batch 1 is one document; batch 8 is eight documents in lock step, their
// costs summed per step (one thread: the engine spreads them over its pool,
// so this is an upper bound). "cold" starts from an empty mask cache (a
// schema the server has not seen); "warm" replays other documents under the
// same schema once the cache holds the states (an agent loop's later turns:
// the engine keeps recent grammars' masks, engine/constraint_cache.h).
//
// The decode step it is compared with: with --model DIR, measured in the same
// run (the engine's mean decode-step time over greedy requests at batch 1
// and 8, unconstrained); else --step-ms (default 30, qwen3-0.6b's 25-40 ms
// on the 2-core development machine).
//
// Flags: --tokenizer DIR (default .cache/npm/tokenizer-qwen3/package/models),
// --model DIR, --threads N (default 2), --step-ms X, --json PATH (default
// bench/results/grammar.json).
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <vector>

#include "cli/command.h"
#include "cli/flags.h"
#include "cli/json_file.h"
#include "core/timer.h"
#include "engine/engine.h"
#include "grammar/compile.h"
#include "grammar/token_mask.h"
#include "model/model.h"
#include "tokenizer/tokenizer.h"

namespace kvfork::cli {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::ordered_json;

const char* kToolSchema = R"({"type":"object","properties":{
  "location":{"type":"string","description":"a city"},
  "unit":{"enum":["celsius","fahrenheit"]},
  "days":{"type":"integer"},
  "details":{"type":"array","items":{"type":"object","properties":{
    "name":{"type":"string"},"score":{"type":"number"},"tags":{"type":"array",
    "items":{"type":"string"},"maxItems":4}},"required":["name","score"],
    "additionalProperties":false}}},
  "required":["location","unit","days","details"],"additionalProperties":false})";

// Instances of kToolSchema with English text, pretty (indent 2) for even
// seeds and compact for odd ones.
std::string Document(uint32_t seed) {
  static const char* kWords[] = {"the",  "weather", "in",     "Paris", "is",    "mild",
                                 "with", "a",       "chance", "of",    "rain",  "tomorrow",
                                 "São",  "Paulo",   "北京",   "wind",  "north", "évening"};
  std::mt19937 rng(seed);
  auto text = [&](int words) {
    std::string s;
    for (int i = 0; i < words; ++i) s += (i ? " " : "") + std::string(kWords[rng() % 18]);
    return s;
  };
  json doc;
  doc["location"] = text(2);
  doc["unit"] = rng() % 2 ? "celsius" : "fahrenheit";
  doc["days"] = static_cast<int>(rng() % 30);
  doc["details"] = json::array();
  const int items = 2 + static_cast<int>(rng() % 3);
  for (int i = 0; i < items; ++i) {
    json d;
    d["name"] = text(1 + static_cast<int>(rng() % 6));
    d["score"] = static_cast<double>(rng() % 10000) / 100.0;
    if (rng() % 2) d["tags"] = json::array({text(1), text(2)});
    doc["details"].push_back(d);
  }
  return seed % 2 == 0 ? doc.dump(2) : doc.dump();
}

struct Timing {
  std::vector<double> step_us;  // per decode step (summed over the batch)
  int64_t tokens = 0;
};

// Feeds `docs` (token ids) in lock step through one constraint each under
// `tg`, timing every step as the sampler's constraint work.
StatusOr<Timing> Replay(const std::shared_ptr<const grammar::TokenGrammar>& tg,
                        const std::vector<std::vector<int32_t>>& docs, int32_t eos) {
  std::vector<std::unique_ptr<grammar::TokenConstraint>> cs;
  for (size_t i = 0; i < docs.size(); ++i)
    cs.push_back(std::make_unique<grammar::TokenConstraint>(tg));
  std::vector<float> row(tg->vocab().size());
  std::mt19937 rng(1);
  std::normal_distribution<float> normal;
  for (float& v : row) v = normal(rng);
  std::vector<float> masked;
  Timing t;
  size_t longest = 0;
  for (const auto& d : docs) longest = std::max(longest, d.size() + 1);  // + EOS
  for (size_t step = 0; step < longest; ++step) {
    const int64_t start = NowNanos();
    for (size_t i = 0; i < docs.size(); ++i) {
      if (step > docs[i].size()) continue;
      const int32_t token = step < docs[i].size() ? docs[i][step] : eos;
      std::shared_ptr<const grammar::TokenMask> mask = cs[i]->Mask();
      if (!mask->Allowed(token))
        return InternalError("document " + std::to_string(i) + " token " + std::to_string(step) +
                             " (" + std::to_string(token) + ") is not in its mask");
      if (mask->single < 0) {  // Sampler::Sample's masked copy
        masked.assign(row.size(), -std::numeric_limits<float>::infinity());
        for (size_t w = 0; w < mask->bits.size(); ++w)
          for (uint64_t bits = mask->bits[w]; bits != 0; bits &= bits - 1) {
            const size_t id = w * 64 + static_cast<size_t>(__builtin_ctzll(bits));
            if (id < row.size()) masked[id] = row[id];
          }
      }
      KVFORK_RETURN_IF_ERROR(cs[i]->Accept(token));
      ++t.tokens;
    }
    t.step_us.push_back(static_cast<double>(NowNanos() - start) / 1e3);
  }
  return t;
}

std::string LoadAverage() {
  std::ifstream in("/proc/loadavg");
  std::string a, b, c;
  in >> a >> b >> c;
  return a + " " + b + " " + c;
}

double Percentile(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[std::min(v.size() - 1, static_cast<size_t>(p * static_cast<double>(v.size())))];
}

double Mean(const std::vector<double>& v) {
  double s = 0;
  for (double x : v) s += x;
  return v.empty() ? 0 : s / static_cast<double>(v.size());
}

// Mean decode-step time (ms) of the engine at `batch` greedy requests.
StatusOr<double> MeasureDecodeStep(Model& model, const Tokenizer& tokenizer, int64_t threads,
                                   int64_t batch) {
  EngineOptions o;
  o.threads = threads;
  o.max_num_seqs = std::max<int64_t>(batch, 1);
  o.kv_cache_mib = 512;
  o.kv_backend = "paged";
  o.max_model_len = 1024;
  KVFORK_ASSIGN_OR_RETURN(std::unique_ptr<Engine> engine, Engine::Create(o, model, tokenizer));
  std::vector<std::shared_ptr<RequestStream>> streams;
  for (int64_t i = 0; i < batch; ++i) {
    Request r;
    r.id = "b" + std::to_string(i);
    r.prompt_tokens = tokenizer.Encode("Question " + std::to_string(i) + ": what is", false);
    r.sampling.temperature = 0;
    r.sampling.max_tokens = 24;
    r.sampling.ignore_eos = true;
    KVFORK_ASSIGN_OR_RETURN(std::shared_ptr<RequestStream> s, engine->Submit(std::move(r)));
    streams.push_back(std::move(s));
  }
  for (auto& s : streams)
    for (;;) {
      std::optional<RequestEvent> e = s->Pop(600000);
      if (!e) return InternalError("decode-step measurement timed out");
      if (e->kind == RequestEvent::Kind::kError) return e->error;
      if (e->kind == RequestEvent::Kind::kDone) break;
    }
  const EngineStats st = engine->Stats();
  if (st.decode_steps == 0) return InternalError("no decode-only step ran");
  return static_cast<double>(st.decode_step_ns) / static_cast<double>(st.decode_steps) / 1e6;
}

int RunBenchGrammar(int argc, char** argv) {
  Flags flags = Flags::Parse(argc, argv, {});
  const std::string tok_dir = flags.GetString(
      "tokenizer", ".cache/npm/tokenizer-qwen3/package/models", "tokenizer directory");
  const std::string model_dir =
      flags.GetString("model", "", "measure the decode step on this model (none: use --step-ms)");
  const int64_t threads = flags.GetInt("threads", 2, "compute threads for the --model decode step");
  const double step_ms =
      flags.GetDouble("step-ms", 30.0, "decode step in ms to compare with, without --model");
  const std::string json_path =
      flags.GetString("json", "bench/results/grammar.json", "where the JSON result goes");
  if (Status s = flags.Finish(); !s.ok()) {
    std::fprintf(stderr, "kvfork bench grammar: %s\n", s.ToString().c_str());
    return 2;
  }
  auto tokenizer = Tokenizer::Load(tok_dir);
  if (!tokenizer.ok()) {
    std::fprintf(stderr, "bench grammar: %s\n", tokenizer.status().ToString().c_str());
    return 1;
  }
  const Tokenizer& tok = **tokenizer;
  const int32_t eos = tok.eos_token_ids().empty() ? 0 : tok.eos_token_ids()[0];

  double step_ms_b1 = step_ms, step_ms_b8 = step_ms;
  std::string step_source = "--step-ms";
  if (!model_dir.empty()) {
    ModelLoadOptions lo;
    lo.show_progress = false;
    auto model = Model::Load(model_dir, lo);
    if (!model.ok()) {
      std::fprintf(stderr, "bench grammar: %s\n", model.status().ToString().c_str());
      return 1;
    }
    auto b1 = MeasureDecodeStep(**model, tok, threads, 1);
    auto b8 = MeasureDecodeStep(**model, tok, threads, 8);
    if (!b1.ok() || !b8.ok()) {
      std::fprintf(stderr, "bench grammar: %s\n",
                   (!b1.ok() ? b1.status() : b8.status()).ToString().c_str());
      return 1;
    }
    step_ms_b1 = *b1;
    step_ms_b8 = *b8;
    step_source = "measured: " + model_dir + ", " + std::to_string(threads) + " threads";
  }

  int64_t t0 = NowNanos();
  auto vocab = grammar::Vocabulary::FromTokenizer(tok, tok.vocab_size());
  const double vocab_ms = static_cast<double>(NowNanos() - t0) / 1e6;
  std::printf("vocabulary: %lld tokens, %lld trie nodes, built in %.1f ms\n",
              static_cast<long long>(vocab->size()),
              static_cast<long long>(vocab->num_trie_nodes()), vocab_ms);
  std::printf("decode step: %.2f ms at batch 1, %.2f ms at batch 8 (%s); load average %s\n\n",
              step_ms_b1, step_ms_b8, step_source.c_str(), LoadAverage().c_str());

  struct Workload {
    std::string name;
    std::shared_ptr<const grammar::Grammar> grammar;
  };
  std::vector<Workload> workloads;
  auto schema = grammar::CompileJsonSchema(kToolSchema, "schema");
  if (!schema.ok()) {
    std::fprintf(stderr, "bench grammar: %s\n", schema.status().ToString().c_str());
    return 1;
  }
  workloads.push_back({"json_schema", *schema});
  workloads.push_back({"json_object", grammar::CompileJsonObject()});

  // Documents 0-7 are the cold runs' (batch 8 uses all, batch 1 the first);
  // 8-15 the warm runs'.
  std::vector<std::vector<int32_t>> docs;
  for (uint32_t i = 0; i < 16; ++i) docs.push_back(tok.Encode(Document(i), false));

  std::printf("%-12s %5s %5s %6s %10s %10s %10s %10s %9s\n", "workload", "batch", "cache", "steps",
              "mean_us", "p50_us", "p99_us", "max_us", "of_step");
  json rows = json::array();
  int rc = 0;
  for (const Workload& w : workloads) {
    for (int batch : {1, 8}) {
      // A fresh TokenGrammar per batch size: cold starts from nothing.
      auto tg =
          std::make_shared<const grammar::TokenGrammar>(w.grammar, vocab, tok.eos_token_ids());
      for (const char* cache : {"cold", "warm"}) {
        const size_t first = std::string(cache) == "cold" ? 0 : 8;
        std::vector<std::vector<int32_t>> batch_docs(docs.begin() + first,
                                                     docs.begin() + first + batch);
        auto t = Replay(tg, batch_docs, eos);
        if (!t.ok()) {
          std::fprintf(stderr, "bench grammar: %s\n", t.status().ToString().c_str());
          return 1;
        }
        const double mean = Mean(t->step_us);
        const double step_us = (batch == 1 ? step_ms_b1 : step_ms_b8) * 1e3;
        const double fraction = mean / step_us;
        std::printf("%-12s %5d %5s %6zu %10.1f %10.1f %10.1f %10.1f %8.2f%%\n", w.name.c_str(),
                    batch, cache, t->step_us.size(), mean, Percentile(t->step_us, 0.5),
                    Percentile(t->step_us, 0.99), Percentile(t->step_us, 1.0), 100 * fraction);
        rows.push_back({{"workload", w.name},
                        {"batch", batch},
                        {"cache", cache},
                        {"steps", t->step_us.size()},
                        {"tokens", t->tokens},
                        {"mean_us_per_step", mean},
                        {"p50_us", Percentile(t->step_us, 0.5)},
                        {"p99_us", Percentile(t->step_us, 0.99)},
                        {"max_us", Percentile(t->step_us, 1.0)},
                        {"decode_step_ms", step_us / 1e3},
                        {"fraction_of_decode_step", fraction},
                        {"goal_fraction", 0.05}});
      }
      const grammar::MaskCacheStats cs = tg->cache_stats();
      std::printf("%-12s %5d masks computed %lld, cache hits %lld\n", "", batch,
                  static_cast<long long>(cs.misses), static_cast<long long>(cs.hits));
    }
  }
  const json doc = {{"tokenizer", tok_dir},
                    {"vocab_tokens", vocab->size()},
                    {"trie_nodes", vocab->num_trie_nodes()},
                    {"vocab_build_ms", vocab_ms},
                    {"decode_step_ms_batch1", step_ms_b1},
                    {"decode_step_ms_batch8", step_ms_b8},
                    {"decode_step_source", step_source},
                    {"load_average", LoadAverage()},
                    {"results", rows}};
  if (Status s = WriteJsonFile(json_path, doc); !s.ok()) return ExitCode("bench grammar", s);
  std::printf("\nwrote %s\n", json_path.c_str());
  return rc;
}

}  // namespace

KVFORK_REGISTER_BENCHMARK(grammar, "grammar",
                          "constrained decoding: token-mask cost per decode step", RunBenchGrammar);

}  // namespace kvfork::cli
