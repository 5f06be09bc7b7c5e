// `kvfork quantize --model DIR|FILE.gguf --type q4_k_m --out FILE.gguf`:
// writes a quantized GGUF file llama.cpp and kvfork load (model/gguf_quantize.h).
#include <cstdio>
#include <string>

#include "cli/command.h"
#include "cli/flags.h"
#include "core/thread_pool.h"
#include "model/gguf_quantize.h"

namespace kvfork::cli {
namespace {

int Fail(const Status& s) {
  std::fprintf(stderr, "kvfork quantize: %s\n", s.ToString().c_str());
  return 1;
}

int RunQuantize(int argc, char** argv) {
  Flags flags = Flags::Parse(argc, argv, {});
  const std::string model = flags.GetRequiredString(
      "model", "a model directory, or a GGUF file with f32/f16/bf16 weights");
  const std::string out = flags.GetRequiredString("out", "the GGUF file to write");
  const std::string type = flags.GetRequiredString(
      "type", "q8_0, q4_0, q4_1, q5_0, q5_1, q4_k_s, q4_k_m, q5_k_s, q5_k_m or q6_k");
  const std::string tokenizer = flags.GetString(
      "tokenizer", "", "for a directory: tokenizer.json's directory (none: the model's)");
  const std::string vocab = flags.GetString(
      "vocab-gguf", "", "take tokenizer.* metadata from this llama.cpp vocab GGUF (none: from tokenizer.json)");
  const std::string pre = flags.GetString(
      "tokenizer-pre", "", "tokenizer.ggml.pre (none: llama-bpe for llama, qwen2 for qwen3)");
  const std::string name = flags.GetString("name", "", "general.name (none: the model's name)");
  const int64_t threads = flags.GetInt("threads", ThreadPool::DefaultThreads(),
                                       "threads quantizing rows (same bytes at any count)");
  if (Status finish = flags.Finish(); !finish.ok()) return Fail(finish);
  auto mix = ParseQuantizeMix(type);
  if (!mix.ok()) return Fail(mix.status());
  if (threads < 1 || threads > 1024)
    return Fail(
        InvalidArgumentError("--threads must be in [1, 1024], got " + std::to_string(threads)));
  ThreadPool pool(static_cast<int>(threads));
  QuantizeOptions options;
  options.mix = *mix;
  options.export_options.tokenizer_dir = tokenizer;
  options.export_options.vocab_gguf = vocab;
  options.export_options.tokenizer_pre = pre;
  options.export_options.name = name;
  options.export_options.pool = &pool;
  options.export_options.progress_label = "quantizing to " + out;
  auto summary = QuantizeModel(model, out, options);
  if (!summary.ok()) return Fail(summary.status());
  std::string types;
  for (const auto& [t, n] : summary->tensors_by_type)
    types += (types.empty() ? "" : ", ") + std::to_string(n) + " " + t;
  std::fprintf(stderr, "wrote %s (%s, %.1f MiB): tensors %s\n", out.c_str(), QuantizeMixName(*mix),
               static_cast<double>(summary->file_bytes) / (1024.0 * 1024.0), types.c_str());
  return 0;
}

}  // namespace

KVFORK_REGISTER_COMMAND(quantize, "quantize",
                        "write a model as a quantized GGUF file (llama-quantize's mixes)",
                        RunQuantize);

}  // namespace kvfork::cli
