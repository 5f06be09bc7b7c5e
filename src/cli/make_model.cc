// `kvfork make-model`: writes a deterministic random-weight Hugging Face
// model directory (model/random_model.h).
#include <algorithm>
#include <cmath>
#include <cstdio>

#include "cli/command.h"
#include "cli/flags.h"
#include "core/timer.h"
#include "model/arch.h"
#include "model/random_model.h"

namespace kvfork::cli {
namespace {

Status MakeModel(int argc, char** argv) {
  Flags flags = Flags::Parse(argc, argv, {});
  RandomModelOptions o;
  std::string types;
  for (const ArchSpec* a : Architectures())
    types += (types.empty() ? "" : ", ") + std::string(a->ModelType());
  const std::string arch =
      flags.GetString("arch", "qwen3", "architecture, as config.json's model_type: " + types);
  std::string shapes;
  for (const std::string& s : RandomModelShapes()) shapes += (shapes.empty() ? "" : ", ") + s;
  o.shape = flags.GetString("shape", "tiny", "dimensions: " + shapes);
  o.seed = static_cast<uint64_t>(flags.GetInt("seed", 0, "seed of the random weights"));
  const std::string dtype = flags.GetString("dtype", "bf16", "weight type: bf16, f32 or f16");
  o.tokenizer_dir = flags.GetString(
      "tokenizer", "",
      "copy tokenizer.json and its config from this directory (none: no tokenizer)");
  o.vocab_size = flags.GetInt("vocab-size", 0, "0: the shape's vocabulary, else the tokenizer's");
  o.hidden_size = flags.GetInt("hidden-size", 0, "overrides the shape's when > 0");
  o.intermediate_size = flags.GetInt("intermediate-size", 0, "overrides the shape's when > 0");
  o.num_layers = flags.GetInt("layers", 0, "overrides the shape's when > 0");
  o.num_heads = flags.GetInt("heads", 0, "overrides the shape's when > 0");
  o.num_kv_heads = flags.GetInt("kv-heads", 0, "overrides the shape's when > 0");
  o.head_dim = flags.GetInt("head-dim", 0, "overrides the shape's when > 0");
  const int64_t tie =
      flags.GetInt("tie", -1, "1: lm_head is the embedding, 0: its own; -1: the shape's choice");
  const int64_t rope_scaling =
      flags.GetInt("rope-scaling", -1, "1: rope scaling (llama3; longrope for phi3), 0: none; -1: the shape's choice");
  const int64_t sliding_window = flags.GetInt(
      "sliding-window", -1, "mistral, gemma3: the attention window, 0 = none; -1: the shape's");
  o.num_experts = flags.GetInt("experts", 0, "qwen3moe: overrides the shape's experts when > 0");
  o.num_experts_per_tok =
      flags.GetInt("experts-per-token", 0, "qwen3moe: overrides the shape's when > 0");
  o.moe_intermediate_size =
      flags.GetInt("moe-intermediate-size", 0, "qwen3moe: overrides the shape's when > 0");
  const std::string out = flags.GetRequiredString("out", "the model directory to write");
  KVFORK_RETURN_IF_ERROR(flags.Finish());
  const ArchSpec* spec = ArchForModelType(arch);
  if (spec == nullptr) spec = ArchForGgufName(arch);  // "gemma3" too
  if (spec == nullptr)
    return InvalidArgumentError("--arch must be one of " + types + ", got \"" + arch + "\"");
  o.arch = spec->id;
  if (dtype == "bf16") o.dtype = DType::kBf16;
  else if (dtype == "f32") o.dtype = DType::kF32;
  else if (dtype == "f16") o.dtype = DType::kF16;
  else return InvalidArgumentError("--dtype must be bf16, f32 or f16, got \"" + dtype + "\"");
  if (tie < -1 || tie > 1) return InvalidArgumentError("--tie must be -1, 0 or 1");
  if (tie >= 0) o.tie_word_embeddings = tie == 1;
  if (rope_scaling < -1 || rope_scaling > 1)
    return InvalidArgumentError("--rope-scaling must be -1, 0 or 1");
  if (rope_scaling >= 0) o.rope_scaling = rope_scaling == 1;
  if (sliding_window < -1) return InvalidArgumentError("--sliding-window must be >= 0 (0 = none)");
  if (sliding_window >= 0) o.sliding_window = sliding_window;

  o.show_progress = true;  // on a terminal only
  KVFORK_ASSIGN_OR_RETURN(ModelConfig c, RandomModelConfig(o));
  Timer timer;
  KVFORK_RETURN_IF_ERROR(WriteRandomModel(o, out));
  std::fprintf(stderr,
               "wrote %s: %s shape %s, hidden %lld, %lld layers, vocab %lld, %s, tied %d, "
               "rope scaling %d (%.1f s)\n",
               out.c_str(), arch.c_str(), o.shape.c_str(), static_cast<long long>(c.hidden_size),
               static_cast<long long>(c.num_layers), static_cast<long long>(c.vocab_size),
               dtype.c_str(), c.tie_word_embeddings ? 1 : 0,
               c.rope_scaling.type == RopeScaling::Type::kNone ? 0 : 1, timer.Seconds());
  return OkStatus();
}

int Run(int argc, char** argv) {
  return ExitCode("make-model", MakeModel(argc, argv));
}

}  // namespace

KVFORK_REGISTER_COMMAND(make_model, "make-model", "write a random-weight Hugging Face model", Run);

}  // namespace kvfork::cli
