// `kvfork generate`: one request (--prompt TEXT or --prompt-ids 1,2,3), or
// many at once (--batch FILE.jsonl), run on the continuous-batching engine.
//
// --prompt streams the text to stdout; --prompt-ids prints the generated ids
// comma-separated; --batch writes one JSON line per input line (same order)
// to --output (default stdout): {"id", "text", "token_ids", "finish_reason",
// "usage": {"prompt_tokens", "completion_tokens", "cached_tokens"}}.
// Batch input lines: {"prompt": "..."} or {"prompt_ids": [...]}, optional
// "id", "max_tokens", "temperature", "top_p", "top_k", "seed", "stop"; any
// other field is an error that names it.
// Speeds go to stderr.
#include <algorithm>
#include <cstdio>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string_view>
#include <thread>

#include "cli/command.h"
#include "cli/flags.h"
#include "cli/model_tokenizer.h"
#include "core/thread_pool.h"
#include "core/timer.h"
#include "engine/engine.h"
#include "model/model.h"
#include "tokenizer/tokenizer.h"

namespace kvfork::cli {
namespace {

StatusOr<std::vector<int32_t>> ParseIds(const std::string& s) {
  std::vector<int32_t> ids;
  std::stringstream ss(s);
  std::string item;
  while (std::getline(ss, item, ',')) {
    char* end = nullptr;
    long v = std::strtol(item.c_str(), &end, 10);
    if (item.empty() || *end != '\0' || v < 0 || v > INT32_MAX)
      return InvalidArgumentError("--prompt-ids: \"" + item + "\" is not a token id");
    ids.push_back(static_cast<int32_t>(v));
  }
  if (ids.empty()) return InvalidArgumentError("--prompt-ids is empty");
  return ids;
}

// Reads one batch line into a request (defaults from the flags).
StatusOr<Request> ParseBatchLine(const std::string& line, int64_t line_no, const Request& defaults,
                                 const Tokenizer& tokenizer) {
  const std::string where = "--batch line " + std::to_string(line_no) + ": ";
  Request r = defaults;
  r.id = "line-" + std::to_string(line_no);
  try {
    const nlohmann::json j = nlohmann::json::parse(line);
    if (!j.is_object()) return InvalidArgumentError(where + "not a JSON object");
    // A field this command does not read is an error, not a silent default.
    static constexpr std::string_view kFields[] = {"id",         "prompt",      "prompt_ids",
                                                   "max_tokens", "temperature", "top_p",
                                                   "top_k",      "seed",        "stop"};
    for (const auto& item : j.items()) {
      if (std::find(std::begin(kFields), std::end(kFields), item.key()) != std::end(kFields))
        continue;
      std::string known;
      for (std::string_view f : kFields) known += (known.empty() ? "" : ", ") + std::string(f);
      return InvalidArgumentError(where + "unknown field \"" + item.key() + "\" (a line takes " +
                                  known + ")");
    }
    if (j.contains("prompt") && j.contains("prompt_ids"))
      return InvalidArgumentError(where + "has both \"prompt\" and \"prompt_ids\"");
    if (j.contains("id")) r.id = j.at("id").get<std::string>();
    if (j.contains("prompt")) {
      r.prompt_tokens = tokenizer.Encode(j.at("prompt").get<std::string>(), true);
    } else if (j.contains("prompt_ids")) {
      r.prompt_tokens = j.at("prompt_ids").get<std::vector<int32_t>>();
    } else {
      return InvalidArgumentError(where + "needs \"prompt\" or \"prompt_ids\"");
    }
    if (j.contains("max_tokens")) r.sampling.max_tokens = j.at("max_tokens").get<int64_t>();
    if (j.contains("temperature")) r.sampling.temperature = j.at("temperature").get<double>();
    if (j.contains("top_p")) r.sampling.top_p = j.at("top_p").get<double>();
    if (j.contains("top_k")) r.sampling.top_k = j.at("top_k").get<int64_t>();
    if (j.contains("seed")) r.sampling.seed = j.at("seed").get<uint64_t>();
    if (j.contains("stop")) {
      const auto& s = j.at("stop");
      r.sampling.stop = s.is_string() ? std::vector<std::string>{s.get<std::string>()}
                                      : s.get<std::vector<std::string>>();
    }
  } catch (const nlohmann::json::exception& e) {
    return InvalidArgumentError(where + e.what());
  }
  return r;
}

struct Output {
  std::string text;
  std::vector<int32_t> tokens;
  FinishReason finish = FinishReason::kStop;
  Usage usage;
  Status error;
  int64_t first_token_ns = 0;
};

// Reads a stream to its end; on_token (may be null) sees each event.
Output Collect(RequestStream& s, const std::function<void(const RequestEvent&)>& on_token) {
  Output o;
  for (;;) {
    std::optional<RequestEvent> e = s.Pop(1000);
    if (!e) continue;
    switch (e->kind) {
      case RequestEvent::Kind::kToken:
        if (o.tokens.empty()) o.first_token_ns = NowNanos();
        o.tokens.push_back(e->token);
        o.text += e->text_delta;
        if (on_token) on_token(*e);
        break;
      case RequestEvent::Kind::kFinish:
        o.finish = e->finish_reason;
        break;
      case RequestEvent::Kind::kPromptLogprobs:  // never asked here
        break;
      case RequestEvent::Kind::kDone:
        o.usage = e->usage;
        return o;
      case RequestEvent::Kind::kError:
        o.error = e->error;
        return o;
    }
  }
}

Status Generate(int argc, char** argv) {
  Flags flags = Flags::Parse(argc, argv, {"ignore-eos"});
  const std::string dir =
      flags.GetRequiredString("model", "a Hugging Face model directory or a .gguf file");
  const std::string tokenizer_dir =
      flags.GetString("tokenizer", "", "directory with tokenizer.json (none: the model's own)");
  const std::string ids_text =
      flags.GetString("prompt-ids", "", "the prompt as comma-separated token ids (none)");
  const std::string prompt_text = flags.GetString("prompt", "", "the prompt as text (none; give one of the three)");
  const std::string batch_path = flags.GetString(
      "batch", "", "a JSON-lines file of requests run together, one result line each (none)");
  const std::string output_path =
      flags.GetString("output", "", "where --batch writes its JSON lines (none: stdout)");
  Request defaults;
  SamplingParams& sp = defaults.sampling;
  sp.max_tokens = flags.GetInt("max-tokens", 16, "tokens to generate at most");
  sp.temperature = flags.GetDouble("temperature", 0.0, "sampling temperature; 0 = greedy");
  sp.top_p = flags.GetDouble("top-p", 1.0, "nucleus sampling: keep this much probability mass");
  sp.top_k = flags.GetInt("top-k", 0, "keep only the k most likely tokens; 0 = all");
  const int64_t seed = flags.GetInt("seed", 0, "sampling seed");
  const std::string stop = flags.GetString("stop", "", "stop when this text appears (none: no stop text)");
  sp.ignore_eos = flags.GetBool("ignore-eos", "keep generating past end-of-sequence tokens");
  sp.seed = static_cast<uint64_t>(seed);
  if (!stop.empty()) sp.stop = {stop};
  EngineOptions eo;
  const int64_t threads = flags.GetInt("threads", ThreadPool::DefaultThreads(),
                                       "compute threads, one per usable core unless set");
  eo.max_num_seqs = flags.GetInt("max-num-seqs", 8, "sequences running at once");
  eo.max_num_batched_tokens =
      flags.GetInt("max-num-batched-tokens", 512, "tokens per engine step (decode + prefill)");
  eo.kv_blocks = flags.GetInt("kv-blocks", 0, "KV pool in blocks (overrides kv-cache-mib)");
  eo.kv_cache_mib = flags.GetInt("kv-cache-mib", 0, "KV pool in MiB; 0 = a share of free memory");
  eo.kv_dtype =
      flags.GetString("kv-dtype", eo.kv_dtype, "KV element type: bf16, f32, int8, q4 or q4r");
  KVFORK_RETURN_IF_ERROR(flags.Finish());
  if (threads < 1) return InvalidArgumentError("--threads must be >= 1");
  eo.threads = static_cast<int>(threads);
  const int given = !ids_text.empty() + !prompt_text.empty() + !batch_path.empty();
  if (given != 1) return InvalidArgumentError("give exactly one of --prompt, --prompt-ids, --batch");

  ModelLoadOptions load;
  KVFORK_ASSIGN_OR_RETURN(std::unique_ptr<Model> model, Model::Load(dir, load));
  KVFORK_ASSIGN_OR_RETURN(std::unique_ptr<Tokenizer> tokenizer,
                          LoadModelTokenizer(dir, tokenizer_dir));
  KVFORK_ASSIGN_OR_RETURN(std::unique_ptr<Engine> engine, Engine::Create(eo, *model, *tokenizer));

  if (batch_path.empty()) {
    Request r = defaults;
    r.id = "generate";
    if (!ids_text.empty()) {
      KVFORK_ASSIGN_OR_RETURN(r.prompt_tokens, ParseIds(ids_text));
    } else {
      r.prompt_tokens = tokenizer->Encode(prompt_text, true);
    }
    const bool ids_out = !ids_text.empty();
    const int64_t start = NowNanos();
    KVFORK_ASSIGN_OR_RETURN(std::shared_ptr<RequestStream> s, engine->Submit(r));
    int64_t n = 0;
    Output o = Collect(*s, [&](const RequestEvent& e) {
      if (ids_out)
        std::printf("%s%d", n++ ? "," : "", e.token);
      else
        std::fputs(e.text_delta.c_str(), stdout);
      std::fflush(stdout);
    });
    const int64_t end = NowNanos();
    std::printf("\n");
    if (!o.error.ok()) return o.error;
    const double ttft = (o.first_token_ns - start) * 1e-9;
    const double decode_s = (end - o.first_token_ns) * 1e-9;
    const int64_t decode_tokens = std::max<int64_t>(0, static_cast<int64_t>(o.tokens.size()) - 1);
    std::fprintf(stderr,
                 "prompt %zu tokens, first token after %.3f s (%.1f tok/s prefill); decode %lld "
                 "tokens in %.3f s (%.1f tok/s); finish %s; %lld threads\n",
                 r.prompt_tokens.size(), ttft, r.prompt_tokens.size() / std::max(ttft, 1e-9),
                 static_cast<long long>(decode_tokens), decode_s,
                 decode_tokens > 0 ? decode_tokens / decode_s : 0.0,
                 FinishReasonName(o.finish), static_cast<long long>(threads));
    engine->Shutdown();
    return OkStatus();
  }

  std::ifstream in(batch_path);
  if (!in) return NotFoundError("--batch: cannot open " + batch_path);
  std::vector<Request> reqs;
  std::string line;
  for (int64_t line_no = 1; std::getline(in, line); ++line_no) {
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    KVFORK_ASSIGN_OR_RETURN(Request r, ParseBatchLine(line, line_no, defaults, *tokenizer));
    reqs.push_back(std::move(r));
  }
  if (reqs.empty()) return InvalidArgumentError("--batch: " + batch_path + " has no requests");
  // Submit all at once; the engine refuses beyond max_queue, so submit in
  // order and read in order.
  const int64_t start = NowNanos();
  std::vector<std::shared_ptr<RequestStream>> streams;
  for (const Request& r : reqs) {
    auto s = engine->Submit(r);
    if (!s.ok()) return s.status().WithContext("--batch request " + r.id);
    streams.push_back(*s);
  }
  std::vector<Output> outs(reqs.size());
  std::vector<std::thread> readers;
  for (size_t i = 0; i < reqs.size(); ++i)
    readers.emplace_back([&, i] { outs[i] = Collect(*streams[i], nullptr); });
  for (auto& t : readers) t.join();
  const double total_s = (NowNanos() - start) * 1e-9;

  std::FILE* out = stdout;
  if (!output_path.empty()) {
    out = std::fopen(output_path.c_str(), "w");
    if (out == nullptr) return NotFoundError("--output: cannot write " + output_path);
  }
  int64_t generated = 0;
  for (size_t i = 0; i < reqs.size(); ++i) {
    nlohmann::json j;
    j["id"] = reqs[i].id;
    if (!outs[i].error.ok()) {
      j["error"] = outs[i].error.ToString();
    } else {
      j["text"] = outs[i].text;
      j["token_ids"] = outs[i].tokens;
      j["finish_reason"] = FinishReasonName(outs[i].finish);
      j["usage"] = {{"prompt_tokens", outs[i].usage.prompt_tokens},
                    {"completion_tokens", outs[i].usage.completion_tokens},
                    {"cached_tokens", outs[i].usage.cached_tokens}};
      generated += outs[i].usage.completion_tokens;
    }
    // Invalid UTF-8 cannot occur (the stream decoder never splits a
    // character), but dump with replacement rather than throw.
    std::fprintf(out, "%s\n", j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace).c_str());
  }
  if (out != stdout) std::fclose(out);
  std::fprintf(stderr, "%zu requests, %lld tokens generated in %.3f s (%.1f tok/s aggregate)\n",
               reqs.size(), static_cast<long long>(generated), total_s, generated / total_s);
  engine->Shutdown();
  return OkStatus();
}

int Run(int argc, char** argv) {
  return ExitCode("generate", Generate(argc, argv));
}

}  // namespace

KVFORK_REGISTER_COMMAND(generate, "generate",
                        "generate from a prompt or a JSONL batch on the engine", Run);

}  // namespace kvfork::cli
