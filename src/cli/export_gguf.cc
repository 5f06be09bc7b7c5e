// `kvfork export-gguf --model DIR --out FILE.gguf [--dtype f32|bf16|f16]`:
// writes a model directory as a GGUF file llama.cpp loads (model/gguf_export.h).
#include <cstdio>

#include "cli/command.h"
#include "cli/flags.h"
#include "model/gguf_export.h"

namespace kvfork::cli {
namespace {

constexpr const char* kUsage =
    "usage: kvfork export-gguf --model DIR --out FILE.gguf [--dtype f32|bf16|f16]\n"
    "                          [--tokenizer DIR] [--vocab-gguf FILE] [--tokenizer-pre NAME]\n"
    "                          [--name NAME]\n"
    "  --dtype          element type of the 2-D weights (default f32; norms stay f32)\n"
    "  --tokenizer      directory with tokenizer.json (default: the model directory)\n"
    "  --vocab-gguf     copy tokenizer.* metadata from this llama.cpp vocab GGUF instead\n"
    "  --tokenizer-pre  tokenizer.ggml.pre (default llama-bpe for llama, qwen2 for qwen3)\n"
    "  --name           general.name (default: the model directory's name)\n";

int Fail(const Status& s) {
  std::fprintf(stderr, "kvfork export-gguf: %s\n", s.ToString().c_str());
  return 1;
}

int RunExportGguf(int argc, char** argv) {
  auto flags_or = Flags::Parse(argc, argv, {"help"});
  if (!flags_or.ok()) return Fail(flags_or.status());
  Flags& flags = *flags_or;
  if (flags.GetBool("help")) {
    std::printf("%s", kUsage);
    return 0;
  }
  auto model = flags.GetRequiredString("model");
  auto out = flags.GetRequiredString("out");
  auto dtype = flags.GetString("dtype", "f32");
  GgufExportOptions options;
  auto tokenizer = flags.GetString("tokenizer", "");
  auto vocab = flags.GetString("vocab-gguf", "");
  auto pre = flags.GetString("tokenizer-pre", "");
  auto name = flags.GetString("name", "");
  for (const auto* s : {&model, &out, &dtype, &tokenizer, &vocab, &pre, &name}) {
    if (!s->ok()) {
      std::fprintf(stderr, "%s", kUsage);
      return Fail(s->status());
    }
  }
  Status finish = flags.Finish();
  if (!finish.ok()) return Fail(finish);
  if (*dtype == "f32") {
    options.dtype = GgmlType::kF32;
  } else if (*dtype == "bf16") {
    options.dtype = GgmlType::kBf16;
  } else if (*dtype == "f16") {
    options.dtype = GgmlType::kF16;
  } else {
    return Fail(InvalidArgumentError("--dtype must be f32, bf16 or f16, got \"" + *dtype + "\""));
  }
  options.tokenizer_dir = *tokenizer;
  options.vocab_gguf = *vocab;
  options.tokenizer_pre = *pre;
  options.name = *name;
  Status s = ExportGguf(*model, *out, options);
  if (!s.ok()) return Fail(s);
  std::fprintf(stderr, "wrote %s\n", out->c_str());
  return 0;
}

}  // namespace

KVFORK_REGISTER_COMMAND(export_gguf, "export-gguf",
                        "write a model directory as a GGUF file for llama.cpp", RunExportGguf);

}  // namespace kvfork::cli
