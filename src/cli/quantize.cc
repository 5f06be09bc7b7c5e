// `kvfork quantize --model DIR|FILE.gguf --type q4_k_m --out FILE.gguf`:
// writes a quantized GGUF file llama.cpp and kvfork load (model/gguf_quantize.h).
#include <cstdio>
#include <string>

#include "cli/command.h"
#include "cli/flags.h"
#include "model/gguf_quantize.h"

namespace kvfork::cli {
namespace {

constexpr const char* kUsage =
    "usage: kvfork quantize --model DIR|FILE.gguf --type TYPE --out FILE.gguf\n"
    "                       [--tokenizer DIR] [--vocab-gguf FILE] [--tokenizer-pre NAME]\n"
    "                       [--name NAME]\n"
    "  --model          a model directory (config.json, safetensors, tokenizer.json) or a\n"
    "                   GGUF file with f32/f16/bf16 weights\n"
    "  --type           q8_0, q4_0, q4_1, q5_0, q5_1, q4_k_s, q4_k_m, q5_k_s, q5_k_m, q6_k:\n"
    "                   llama-quantize's mixes, same per-tensor types (docs/quantize.md)\n"
    "  --out            the GGUF file to write\n"
    "  --tokenizer, --vocab-gguf, --tokenizer-pre, --name: as export-gguf, for a directory\n";

int Fail(const Status& s) {
  std::fprintf(stderr, "kvfork quantize: %s\n", s.ToString().c_str());
  return 1;
}

int RunQuantize(int argc, char** argv) {
  auto flags_or = Flags::Parse(argc, argv, {"help"});
  if (!flags_or.ok()) return Fail(flags_or.status());
  Flags& flags = *flags_or;
  if (flags.GetBool("help")) {
    std::printf("%s", kUsage);
    return 0;
  }
  auto model = flags.GetRequiredString("model");
  auto out = flags.GetRequiredString("out");
  auto type = flags.GetRequiredString("type");
  auto tokenizer = flags.GetString("tokenizer", "");
  auto vocab = flags.GetString("vocab-gguf", "");
  auto pre = flags.GetString("tokenizer-pre", "");
  auto name = flags.GetString("name", "");
  for (const auto* s : {&model, &out, &type, &tokenizer, &vocab, &pre, &name}) {
    if (!s->ok()) {
      std::fprintf(stderr, "%s", kUsage);
      return Fail(s->status());
    }
  }
  Status finish = flags.Finish();
  if (!finish.ok()) return Fail(finish);
  auto mix = ParseQuantizeMix(*type);
  if (!mix.ok()) return Fail(mix.status());
  QuantizeOptions options;
  options.mix = *mix;
  options.export_options.tokenizer_dir = *tokenizer;
  options.export_options.vocab_gguf = *vocab;
  options.export_options.tokenizer_pre = *pre;
  options.export_options.name = *name;
  auto summary = QuantizeModel(*model, *out, options);
  if (!summary.ok()) return Fail(summary.status());
  std::string types;
  for (const auto& [t, n] : summary->tensors_by_type)
    types += (types.empty() ? "" : ", ") + std::to_string(n) + " " + t;
  std::fprintf(stderr, "wrote %s (%s, %.1f MiB): tensors %s\n", out->c_str(), QuantizeMixName(*mix),
               static_cast<double>(summary->file_bytes) / (1024.0 * 1024.0), types.c_str());
  return 0;
}

}  // namespace

KVFORK_REGISTER_COMMAND(quantize, "quantize",
                        "write a model as a quantized GGUF file (llama-quantize's mixes)",
                        RunQuantize);

}  // namespace kvfork::cli
