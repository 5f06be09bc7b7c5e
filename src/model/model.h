// The decoder for the architectures of arch.h (Llama, Qwen2, Qwen3, SmolLM3, Phi3): load a
// Hugging Face directory or a GGUF file, run a batch of tokens against
// per-sequence block tables.
//
// The model knows nothing of prefix caching: each sequence in a batch comes
// with a block table (base addresses of KV blocks laid out as kv_layout.h
// says) that already holds K/V for positions [0, start_pos), and Forward
// writes K/V for the new positions into the same table.
//
// Thread affinity: one thread calls Forward at a time (the engine thread);
// the pool passed in does the parallel work. Scratch buffers are owned by the
// model and reused across calls.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "core/status.h"
#include "core/thread_pool.h"
#include "kernels/kv_group.h"
#include "kernels/kv_layout.h"
#include "model/model_config.h"

namespace kvfork {

struct ModelLoadOptions {
  // Compute dtype for weights stored f16: converted at load to bf16 (default)
  // or f32. bf16 and f32 weights are used in place from the mmap.
  bool f16_to_f32 = false;
  // Print a progress bar to stderr while loading when it is a terminal.
  bool show_progress = true;
  // The longest sequence the caller will run (prompt + output); 0 = the
  // model's max_position_embeddings. Picks longrope's factors as llama.cpp
  // does: long when this exceeds original_max_position_embeddings, else short.
  int64_t context_length = 0;
};

// One sequence's slice of a ForwardBatch.
struct ForwardSeq {
  int64_t num_tokens = 0;            // its tokens, consecutive in ForwardBatch::tokens
  int64_t start_pos = 0;             // position of its first new token
  uint8_t* const* blocks = nullptr;  // block table covering [0, start_pos + num_tokens)
  bool all_logits = false;           // logits for every new token (else only the last)
  // No logits row at all, whatever all_logits says: a prefill chunk that
  // nobody samples. When no sequence wants a row, the final norm and the
  // lm head (the largest matrix of a small model) are skipped.
  bool no_logits = false;
  // With ForwardBatch::kv_groups: the block table of each layer group
  // (group_blocks[g] for kv_groups[g]; blocks is then unused). A sliding
  // group's table may point anywhere (the cache's zeroed hole) for blocks
  // wholly before the window of start_pos: they are never read.
  std::array<uint8_t* const*, kMaxKvGroups> group_blocks{};
};

struct ForwardBatch {
  std::vector<int32_t> tokens;  // all sequences' new tokens, sequence after sequence
  std::vector<ForwardSeq> seqs;
  // Empty: each sequence has one table (ForwardSeq::blocks) holding every
  // layer in Forward's layout. Else the cache keeps one table per layer group
  // (Model::MakeKvGroups, in that order; KvCache::kv_groups()).
  std::span<const KvGroup> kv_groups;
};

// Where each layer's K/V lives when the cache keeps one block table per
// layer group: group 0 holds the global layers (possibly none), groups 1..
// the sliding layers of each distinct window (ascending), each group in
// layer order. A model without sliding layers has the one global group.
struct KvGroupMap {
  std::vector<KvGroup> groups;
  std::vector<int> group_of_layer;  // [num_layers]
  std::vector<int> index_in_group;  // [num_layers]
};
KvGroupMap MapKvGroups(const ModelConfig& config, KvDType dtype, int block_size);

// True when Model::Load would open `path` as a GGUF file (a *.gguf path that
// is not a directory); the CLI asks it where the tokenizer comes from.
bool IsGgufPath(const std::string& path);

class Model {
 public:
  virtual ~Model() = default;

  // Loads a model (mmap, weights used in place where their format allows):
  // a Hugging Face directory (config.json, safetensors) or a .gguf file
  // (single, or any part of a split NAME-0000K-of-0000N.gguf).
  static StatusOr<std::unique_ptr<Model>> Load(const std::string& path,
                                               const ModelLoadOptions& options);

  virtual const ModelConfig& config() const = 0;

  // The KV block layout this model's layers need for a dtype and block size.
  KvLayout MakeKvLayout(KvDType dtype, int block_size) const;
  // Its layer groups (MapKvGroups): one global group of every layer for a
  // model without sliding layers; for Gemma 3 the global and the sliding
  // layers; for Mistral an empty global group and the sliding one.
  std::vector<KvGroup> MakeKvGroups(KvDType dtype, int block_size) const {
    return MapKvGroups(config(), dtype, block_size).groups;
  }

  // Runs every sequence's new tokens, writes their K/V, and returns logits
  // [rows, vocab_size] row-major: for each sequence in order, none if
  // no_logits, one row per new token if all_logits, else one row for its
  // last token. Bitwise the same for a sequence whatever else is in the batch
  // and however it is chunked.
  virtual Status Forward(const ForwardBatch& batch, const KvLayout& layout, ThreadPool& pool,
                         std::vector<float>* logits) = 0;
};

}  // namespace kvfork
