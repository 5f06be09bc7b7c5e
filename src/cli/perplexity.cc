// `kvfork perplexity --model M --file TEXT [--ctx 512]`: the perplexity of a
// text, with the chunking and scoring of llama.cpp's `llama-perplexity`, so
// the two engines can be compared on one file:
//   - the whole text is tokenized once, with the special tokens the model's
//     tokenizer adds (a BOS for Llama 3, nothing for Qwen3); special-token
//     strings inside the text are tokenized as text, as llama.cpp does;
//   - it is cut into floor(tokens / ctx) chunks of ctx tokens, each run from
//     an empty cache; when the tokenizer adds a BOS, a chunk's first token
//     is replaced by it;
//   - in each chunk only the second half is scored: the logits at positions
//     [ctx/2, ctx - 1) against the next token, -log softmax in llama.cpp's
//     arithmetic (max in f32, sum of expf in double);
//   - PPL = exp(mean NLL) over every scored token, printed after each chunk
//     as "[k]ppl," and at the end with its standard error.
// The first half of a chunk is run without logits (no_logits) and the
// second half with all of them: by invariant 1 the split changes no bits.
//
// Flags: --model DIR|FILE, --file TEXT, --ctx N (512), --chunks N (all),
//        --threads N, --kv-dtype bf16|f32|int8|q4|q4r (bf16), --json PATH.
#include <cmath>
#include <cstdio>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "cli/command.h"
#include "cli/flags.h"
#include "cli/json_file.h"
#include "cli/kv_blocks.h"
#include "cli/model_tokenizer.h"
#include "cli/perplexity_chunks.h"
#include "core/thread_pool.h"
#include "core/timer.h"
#include "kv/kv_cache.h"
#include "model/model.h"
#include "tokenizer/tokenizer.h"

namespace kvfork::cli {
namespace {

Status Perplexity(int argc, char** argv) {
  Flags flags = Flags::Parse(argc, argv, {});
  const std::string model_path =
      flags.GetRequiredString("model", "a Hugging Face model directory or a .gguf file");
  const std::string file = flags.GetRequiredString("file", "the text file to score");
  const int64_t ctx = flags.GetInt("ctx", 512, "tokens per chunk (llama-perplexity's -c)");
  const int64_t max_chunks = flags.GetInt("chunks", -1, "chunks to score at most; -1 = all");
  const int64_t threads = flags.GetInt("threads", ThreadPool::DefaultThreads(),
                                       "compute threads, one per usable core unless set");
  const std::string kv_name =
      flags.GetString("kv-dtype", "bf16", "KV element type: bf16, f32, int8, q4 or q4r");
  const std::string json_path =
      flags.GetString("json", "", "also write the result as JSON to this file (none)");
  KVFORK_RETURN_IF_ERROR(flags.Finish());
  if (ctx < 4 || ctx > (1 << 20)) return InvalidArgumentError("--ctx must be in [4, 1048576]");
  if (threads < 1) return InvalidArgumentError("--threads must be >= 1");
  KVFORK_ASSIGN_OR_RETURN(KvDType kv_dtype, ParseKvDType(kv_name));
  KVFORK_ASSIGN_OR_RETURN(std::string text, ReadTextFile(file));

  ModelLoadOptions load;
  KVFORK_ASSIGN_OR_RETURN(std::unique_ptr<Model> model, Model::Load(model_path, load));
  KVFORK_ASSIGN_OR_RETURN(std::unique_ptr<Tokenizer> tokenizer, LoadModelTokenizer(model_path, ""));
  const ModelConfig& c = model->config();
  if (ctx > c.max_position_embeddings && c.max_position_embeddings > 0)
    return InvalidArgumentError("--ctx " + std::to_string(ctx) + " exceeds the model's " +
                                std::to_string(c.max_position_embeddings) + " positions");

  // A special token's string in the text is text, as llama-perplexity
  // tokenizes (parse_special off): a corpus with "<|endoftext|>" between
  // documents scores those bytes, on both sides alike.
  const ChunkedText chunked = TokenizeForPerplexity(*tokenizer, text);
  const std::vector<int32_t>& tokens = chunked.tokens;
  const bool add_bos = chunked.bos.has_value();
  const int64_t n = static_cast<int64_t>(tokens.size());
  if (n < 2 * ctx)
    return InvalidArgumentError(file + " tokenizes to " + std::to_string(n) +
                                " tokens; perplexity with --ctx " + std::to_string(ctx) +
                                " needs at least " + std::to_string(2 * ctx));
  int64_t chunks = n / ctx;
  if (max_chunks >= 0) chunks = std::min(chunks, max_chunks);

  ThreadPool pool(static_cast<int>(threads));
  const KvLayout layout = model->MakeKvLayout(kv_dtype, 16);
  KVFORK_ASSIGN_OR_RETURN(BlockTable table, AllocateBlocks(layout, ctx));
  const int64_t first = ctx / 2;
  const int64_t vocab = c.vocab_size;
  std::fprintf(stderr,
               "perplexity: %lld tokens, %lld chunks of %lld (scoring the last %lld of each), "
               "bos %s, %lld threads\n",
               static_cast<long long>(n), static_cast<long long>(chunks),
               static_cast<long long>(ctx), static_cast<long long>(ctx - first - 1),
               add_bos ? "yes" : "no", static_cast<long long>(threads));

  double nll = 0, nll2 = 0;
  int64_t count = 0;
  std::vector<double> chunk_ppl;
  std::vector<float> logits;
  const int64_t t0 = NowNanos();
  for (int64_t k = 0; k < chunks; ++k) {
    const std::vector<int32_t> chunk = ChunkTokens(chunked, ctx, k);
    KVFORK_RETURN_IF_ERROR(ForwardScoredHalf(*model, layout, table, pool, chunk, &logits));
    for (int64_t i = 0; i + 1 < ctx - first; ++i) {
      const double v = NegLogProb(logits.data() + i * vocab, vocab, chunk[first + i + 1]);
      nll += v;
      nll2 += v * v;
      ++count;
    }
    chunk_ppl.push_back(std::exp(nll / count));
    std::printf("[%lld]%.4f,", static_cast<long long>(k + 1), chunk_ppl.back());
    std::fflush(stdout);
  }
  std::printf("\n");
  const double seconds = static_cast<double>(NowNanos() - t0) * 1e-9;
  const double mean = nll / count;
  const double ppl = std::exp(mean);
  double var = nll2 / count - mean * mean;
  const double stderr_ppl = var > 0 ? std::sqrt(var / (count - 1)) * ppl : 0.0;
  std::printf("Final estimate: PPL = %.4f +/- %.5f\n", ppl, stderr_ppl);
  std::fprintf(stderr, "perplexity: %lld scored tokens in %.1f s (%.1f tok/s of context)\n",
               static_cast<long long>(count), seconds, static_cast<double>(chunks * ctx) / seconds);
  if (!json_path.empty()) {
    nlohmann::json j = {{"model", model_path},
                        {"file", file},
                        {"ctx", ctx},
                        {"chunks", chunks},
                        {"tokens", n},
                        {"scored", count},
                        {"bos", add_bos},
                        {"kv_dtype", kv_name},
                        {"ppl", ppl},
                        {"ppl_stderr", stderr_ppl},
                        {"chunk_ppl", chunk_ppl},
                        {"seconds", seconds}};
    KVFORK_RETURN_IF_ERROR(WriteJsonFile(json_path, j));
  }
  return OkStatus();
}

int Run(int argc, char** argv) {
  return ExitCode("perplexity", Perplexity(argc, argv));
}

}  // namespace

KVFORK_REGISTER_COMMAND(perplexity, "perplexity",
                        "perplexity of a text file, chunked and scored as llama-perplexity", Run);

}  // namespace kvfork::cli
