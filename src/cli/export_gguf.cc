// `kvfork export-gguf --model DIR --out FILE.gguf [--dtype f32|bf16|f16]`:
// writes a model directory as a GGUF file llama.cpp loads (model/gguf_export.h).
#include <cstdio>

#include "cli/command.h"
#include "cli/flags.h"
#include "model/gguf_export.h"

namespace kvfork::cli {
namespace {

int Fail(const Status& s) {
  std::fprintf(stderr, "kvfork export-gguf: %s\n", s.ToString().c_str());
  return 1;
}

int RunExportGguf(int argc, char** argv) {
  Flags flags = Flags::Parse(argc, argv, {});
  const std::string model =
      flags.GetRequiredString("model", "the Hugging Face model directory to export");
  const std::string out = flags.GetRequiredString("out", "the GGUF file to write");
  const std::string dtype = flags.GetString(
      "dtype", "f32", "element type of the 2-D weights: f32, bf16 or f16 (norms stay f32)");
  GgufExportOptions options;
  const std::string tokenizer =
      flags.GetString("tokenizer", "", "directory with tokenizer.json (none: the model directory)");
  const std::string vocab = flags.GetString(
      "vocab-gguf", "", "take tokenizer.* metadata from this llama.cpp vocab GGUF (none: from tokenizer.json)");
  const std::string pre = flags.GetString(
      "tokenizer-pre", "", "tokenizer.ggml.pre (none: llama-bpe for llama, qwen2 for qwen3)");
  const std::string name =
      flags.GetString("name", "", "general.name (none: the model directory's name)");
  if (Status finish = flags.Finish(); !finish.ok()) return Fail(finish);
  if (dtype == "f32") {
    options.dtype = GgmlType::kF32;
  } else if (dtype == "bf16") {
    options.dtype = GgmlType::kBf16;
  } else if (dtype == "f16") {
    options.dtype = GgmlType::kF16;
  } else {
    return Fail(InvalidArgumentError("--dtype must be f32, bf16 or f16, got \"" + dtype + "\""));
  }
  options.tokenizer_dir = tokenizer;
  options.vocab_gguf = vocab;
  options.tokenizer_pre = pre;
  options.name = name;
  options.progress_label = "writing " + out;
  Status s = ExportGguf(model, out, options);
  if (!s.ok()) return Fail(s);
  std::fprintf(stderr, "wrote %s\n", out.c_str());
  return 0;
}

}  // namespace

KVFORK_REGISTER_COMMAND(export_gguf, "export-gguf",
                        "write a model directory as a GGUF file for llama.cpp", RunExportGguf);

}  // namespace kvfork::cli
