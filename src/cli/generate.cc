// `kvfork generate`: runs a prompt of token ids straight on the Model with a
// local contiguous KV allocation, greedy or simple sampling, and reports
// prefill and decode speed. (The engine-backed version with text prompts
// replaces this once the engine lands.)
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <numeric>
#include <random>
#include <sstream>

#include "cli/command.h"
#include "cli/flags.h"
#include "core/thread_pool.h"
#include "core/timer.h"
#include "model/model.h"

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

struct Sampling {
  double temperature = 0.0;
  double top_p = 1.0;
  int64_t top_k = 0;
};

int32_t Sample(const std::vector<float>& logits, const Sampling& s, std::mt19937_64& rng) {
  const int64_t n = static_cast<int64_t>(logits.size());
  if (s.temperature <= 0.0)
    return static_cast<int32_t>(std::max_element(logits.begin(), logits.end()) - logits.begin());
  std::vector<int32_t> idx(n);
  std::iota(idx.begin(), idx.end(), 0);
  std::stable_sort(idx.begin(), idx.end(), [&](int32_t a, int32_t b) { return logits[a] > logits[b]; });
  int64_t k = s.top_k > 0 ? std::min(s.top_k, n) : n;
  std::vector<double> p(k);
  double sum = 0;
  for (int64_t i = 0; i < k; ++i) {
    p[i] = std::exp((logits[idx[i]] - logits[idx[0]]) / s.temperature);
    sum += p[i];
  }
  double cum = 0;
  int64_t keep = k;
  for (int64_t i = 0; i < k; ++i) {
    cum += p[i] / sum;
    if (cum >= s.top_p) {
      keep = i + 1;
      break;
    }
  }
  std::discrete_distribution<int64_t> dist(p.begin(), p.begin() + keep);
  return idx[dist(rng)];
}

Status Generate(int argc, char** argv) {
  KVFORK_ASSIGN_OR_RETURN(Flags flags, Flags::Parse(argc, argv, {}));
  KVFORK_ASSIGN_OR_RETURN(std::string dir, flags.GetRequiredString("model"));
  KVFORK_ASSIGN_OR_RETURN(std::string ids_text, flags.GetRequiredString("prompt-ids"));
  KVFORK_ASSIGN_OR_RETURN(int64_t max_tokens, flags.GetInt("max-tokens", 16));
  Sampling sampling;
  KVFORK_ASSIGN_OR_RETURN(sampling.temperature, flags.GetDouble("temperature", 0.0));
  KVFORK_ASSIGN_OR_RETURN(sampling.top_p, flags.GetDouble("top-p", 1.0));
  KVFORK_ASSIGN_OR_RETURN(sampling.top_k, flags.GetInt("top-k", 0));
  KVFORK_ASSIGN_OR_RETURN(int64_t seed, flags.GetInt("seed", 0));
  KVFORK_ASSIGN_OR_RETURN(int64_t threads, flags.GetInt("threads", ThreadPool::DefaultThreads()));
  KVFORK_RETURN_IF_ERROR(flags.Finish());
  if (max_tokens < 0) return InvalidArgumentError("--max-tokens must be >= 0");
  if (threads < 1) return InvalidArgumentError("--threads must be >= 1");
  if (sampling.temperature < 0) return InvalidArgumentError("--temperature must be >= 0");
  if (sampling.top_p <= 0 || sampling.top_p > 1) return InvalidArgumentError("--top-p must be in (0, 1]");
  KVFORK_ASSIGN_OR_RETURN(std::vector<int32_t> prompt, ParseIds(ids_text));

  ModelLoadOptions load;
  KVFORK_ASSIGN_OR_RETURN(std::unique_ptr<Model> model, Model::Load(dir, load));
  const ModelConfig& c = model->config();
  for (int32_t id : prompt)
    if (id >= c.vocab_size)
      return InvalidArgumentError("--prompt-ids: token " + std::to_string(id) +
                                  " is outside the vocab of " + std::to_string(c.vocab_size));

  // One contiguous allocation for the whole context.
  const KvLayout layout = model->MakeKvLayout(KvDType::kBf16, 16);
  const int64_t context = static_cast<int64_t>(prompt.size()) + max_tokens;
  const int64_t num_blocks = (context + layout.block_size - 1) / layout.block_size;
  const size_t block_bytes = layout.BlockBytes();
  std::unique_ptr<uint8_t, decltype(&std::free)> kv(
      static_cast<uint8_t*>(std::aligned_alloc(64, num_blocks * block_bytes)), &std::free);
  if (kv == nullptr) return ResourceExhaustedError("cannot allocate the KV cache");
  std::vector<uint8_t*> blocks(num_blocks);
  for (int64_t b = 0; b < num_blocks; ++b) blocks[b] = kv.get() + b * block_bytes;

  ThreadPool pool(static_cast<int>(threads));
  std::mt19937_64 rng(static_cast<uint64_t>(seed));
  std::vector<float> logits;
  ForwardBatch batch;
  batch.tokens = prompt;
  batch.seqs = {{static_cast<int64_t>(prompt.size()), 0, blocks.data(), false}};
  Timer prefill_timer;
  KVFORK_RETURN_IF_ERROR(model->Forward(batch, layout, pool, &logits));
  const double prefill_s = prefill_timer.Seconds();

  std::vector<int32_t> out;
  Timer decode_timer;
  int64_t pos = static_cast<int64_t>(prompt.size());
  for (int64_t i = 0; i < max_tokens; ++i) {
    int32_t next = Sample(logits, sampling, rng);
    out.push_back(next);
    std::printf("%s%d", i ? "," : "", next);
    std::fflush(stdout);
    if (std::find(c.eos_token_ids.begin(), c.eos_token_ids.end(), next) != c.eos_token_ids.end())
      break;
    if (i + 1 == max_tokens) break;
    batch.tokens = {next};
    batch.seqs = {{1, pos, blocks.data(), false}};
    ++pos;
    KVFORK_RETURN_IF_ERROR(model->Forward(batch, layout, pool, &logits));
  }
  const double decode_s = decode_timer.Seconds();
  std::printf("\n");
  const int64_t decode_steps = std::max<int64_t>(0, static_cast<int64_t>(out.size()) - 1);
  std::fprintf(stderr, "prefill: %zu tokens in %.3f s (%.1f tok/s); decode: %lld tokens in %.3f s (%.1f tok/s); %lld threads\n",
               prompt.size(), prefill_s, prompt.size() / prefill_s,
               static_cast<long long>(decode_steps), decode_s,
               decode_steps > 0 ? decode_steps / decode_s : 0.0, static_cast<long long>(threads));
  return OkStatus();
}

int Run(int argc, char** argv) {
  Status s = Generate(argc, argv);
  if (!s.ok()) {
    std::fprintf(stderr,
                 "kvfork generate: %s\nusage: kvfork generate --model DIR --prompt-ids 1,2,3 "
                 "--max-tokens N [--temperature T --top-p P --top-k K --seed S --threads N]\n",
                 s.ToString().c_str());
    return 1;
  }
  return 0;
}

}  // namespace

KVFORK_REGISTER_COMMAND(generate, "generate", "generate tokens from a prompt (ids for now)", Run);

}  // namespace kvfork::cli
