// Deterministic random-weight models written as real Hugging Face
// directories (config.json, model.safetensors, tokenizer files), for tests
// and benchmarks. The same options always give the same bytes.
//
// Weights come from a counter-based PRNG keyed by (seed, tensor name,
// element index), so a tensor's values do not depend on which other tensors
// exist (tying embeddings does not shift the rest). Scales are chosen so
// attention and the MLP visibly shape the logits: linear weights
// N(0, 1/fan_in) (q/k a little larger so attention is not flat), norm
// weights 1 + N(0, 0.1^2), embeddings and lm_head N(0, (2.5/sqrt(hidden))^2)
// so logits have a std of a few units.
//
// Cost: generates every weight once (multi-threaded); writes one tensor at a
// time, so memory holds only the largest tensor.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "core/status.h"
#include "model/model_config.h"

namespace kvfork {

struct RandomModelOptions {
  Architecture arch = Architecture::kQwen3;
  // "tiny" | "default-50m" | "qwen3-0.6b" | "llama-3.2-1b" | "qwen2.5-0.5b" |
  // "qwen2.5-tiny" | "smollm3-3b" | "smollm3-tiny" | "phi-4-mini" |
  // "phi3-tiny" | "mistral-7b" | "gemma-3-1b" | "qwen3-30b-a3b"; the explicit dims below
  // override the shape's when > 0.
  std::string shape = "tiny";
  int64_t hidden_size = 0;
  int64_t intermediate_size = 0;
  int64_t num_layers = 0;
  int64_t num_heads = 0;
  int64_t num_kv_heads = 0;
  int64_t head_dim = 0;
  uint64_t seed = 0;
  DType dtype = DType::kBf16;  // kBf16 or kF32 (kF16 too, to test load-time conversion)
  // Directory with tokenizer.json and tokenizer_config.json (and optionally
  // generation_config.json) to copy; empty: no tokenizer (vocab_size needed).
  std::string tokenizer_dir;
  // 0: the shape's real vocab if it has one, else the tokenizer's
  // (max token id + 1). Must cover every tokenizer id.
  int64_t vocab_size = 0;
  std::optional<bool> tie_word_embeddings;  // default: the shape's
  // Rope scaling (llama3; longrope for phi3); default: the shape's.
  std::optional<bool> rope_scaling;
  // A progress line while weights are written, on a terminal only
  // (core/progress.h); `kvfork make-model` sets it.
  bool show_progress = false;
  // Architectures with a sliding window (mistral, gemma3): its size, 0 =
  // none; default: the shape's (tiny 32, mistral-7b 4096, gemma-3-1b 512).
  std::optional<int64_t> sliding_window;
  // qwen3moe: override the shape's experts, experts per token and expert
  // width when > 0 (a qwen3-30b-a3b with fewer experts fits a benchmark).
  int64_t num_experts = 0;
  int64_t num_experts_per_tok = 0;
  int64_t moe_intermediate_size = 0;
  // qwen3moe: layers that keep the dense MLP (config.json mlp_only_layers;
  // llama.cpp's qwen3moe has none, so export-gguf refuses such a model).
  std::vector<int64_t> mlp_only_layers;
};

// Names of the shapes WriteRandomModel knows.
std::vector<std::string> RandomModelShapes();

// The config.json the options describe (without writing anything).
StatusOr<ModelConfig> RandomModelConfig(const RandomModelOptions& options);

// Writes the directory (created if needed; files in it are overwritten).
Status WriteRandomModel(const RandomModelOptions& options, const std::string& out_dir);

// The tokenizer's vocab size: max id over model.vocab and added_tokens + 1.
StatusOr<int64_t> TokenizerVocabSize(const std::string& tokenizer_json_path);

}  // namespace kvfork
