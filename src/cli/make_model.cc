// `kvfork make-model`: writes a deterministic random-weight Hugging Face
// model directory (model/random_model.h).
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
  KVFORK_ASSIGN_OR_RETURN(Flags flags, Flags::Parse(argc, argv, {}));
  RandomModelOptions o;
  KVFORK_ASSIGN_OR_RETURN(std::string arch, flags.GetString("arch", "qwen3"));
  // By config.json model_type: llama, qwen2, qwen3, mistral, ...
  const ArchSpec* spec = ArchForModelType(arch);
  if (spec == nullptr) spec = ArchForGgufName(arch);  // "gemma3" too
  if (spec == nullptr) {
    std::string types;
    for (const ArchSpec* a : Architectures()) types += (types.empty() ? "" : ", ") + std::string(a->ModelType());
    return InvalidArgumentError("--arch must be one of " + types + ", got \"" + arch + "\"");
  }
  o.arch = spec->id;
  KVFORK_ASSIGN_OR_RETURN(o.shape, flags.GetString("shape", "tiny"));
  KVFORK_ASSIGN_OR_RETURN(int64_t seed, flags.GetInt("seed", 0));
  o.seed = static_cast<uint64_t>(seed);
  KVFORK_ASSIGN_OR_RETURN(std::string dtype, flags.GetString("dtype", "bf16"));
  if (dtype == "bf16") o.dtype = DType::kBf16;
  else if (dtype == "f32") o.dtype = DType::kF32;
  else if (dtype == "f16") o.dtype = DType::kF16;
  else return InvalidArgumentError("--dtype must be bf16, f32 or f16, got \"" + dtype + "\"");
  KVFORK_ASSIGN_OR_RETURN(o.tokenizer_dir, flags.GetString("tokenizer", ""));
  KVFORK_ASSIGN_OR_RETURN(o.vocab_size, flags.GetInt("vocab-size", 0));
  KVFORK_ASSIGN_OR_RETURN(o.hidden_size, flags.GetInt("hidden-size", 0));
  KVFORK_ASSIGN_OR_RETURN(o.intermediate_size, flags.GetInt("intermediate-size", 0));
  KVFORK_ASSIGN_OR_RETURN(o.num_layers, flags.GetInt("layers", 0));
  KVFORK_ASSIGN_OR_RETURN(o.num_heads, flags.GetInt("heads", 0));
  KVFORK_ASSIGN_OR_RETURN(o.num_kv_heads, flags.GetInt("kv-heads", 0));
  KVFORK_ASSIGN_OR_RETURN(o.head_dim, flags.GetInt("head-dim", 0));
  if (flags.Has("tie")) {
    KVFORK_ASSIGN_OR_RETURN(int64_t tie, flags.GetInt("tie", 0));
    if (tie != 0 && tie != 1) return InvalidArgumentError("--tie must be 0 or 1");
    o.tie_word_embeddings = tie == 1;
  }
  if (flags.Has("rope-scaling")) {
    KVFORK_ASSIGN_OR_RETURN(int64_t rs, flags.GetInt("rope-scaling", 0));
    if (rs != 0 && rs != 1) return InvalidArgumentError("--rope-scaling must be 0 or 1");
    o.rope_scaling = rs == 1;
  }
  if (flags.Has("sliding-window")) {
    KVFORK_ASSIGN_OR_RETURN(int64_t w, flags.GetInt("sliding-window", 0));
    if (w < 0) return InvalidArgumentError("--sliding-window must be >= 0 (0 = none)");
    o.sliding_window = w;
  }
  KVFORK_ASSIGN_OR_RETURN(std::string out, flags.GetRequiredString("out"));
  KVFORK_RETURN_IF_ERROR(flags.Finish());

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
  Status s = MakeModel(argc, argv);
  if (!s.ok()) {
    std::fprintf(stderr,
                 "kvfork make-model: %s\nusage: kvfork make-model --arch llama|qwen2|qwen3|mistral|gemma3 "
                 "--shape tiny|default-50m|qwen3-0.6b|llama-3.2-1b|mistral-7b|gemma-3-1b --seed N --dtype bf16|f32 "
                 "[--tokenizer DIR] --out DIR [--vocab-size N] [--tie 0|1] [--rope-scaling 0|1] "
                 "[--sliding-window N (mistral, gemma3; 0 = none)]\n",
                 s.ToString().c_str());
    return 1;
  }
  return 0;
}

}  // namespace

KVFORK_REGISTER_COMMAND(make_model, "make-model", "write a random-weight Hugging Face model", Run);

}  // namespace kvfork::cli
