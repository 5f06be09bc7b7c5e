// Helpers shared by the model tests: temp dirs, tiny random models, a
// contiguous KV allocation, and rewriting a checkpoint's tensors.
#pragma once

#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "model/model.h"
#include "model/random_model.h"
#include "model/safetensors.h"
#include "temp_dir.h"

namespace kvfork::testing {

inline RandomModelOptions TinyOptions(Architecture arch, DType dtype, bool tie, bool rope_scaling,
                                      int64_t vocab = 256, uint64_t seed = 7) {
  RandomModelOptions o;
  o.arch = arch;
  // SmolLM3 and Phi3 need their own tiny shapes: 4 layers so one has no
  // RoPE; partial rotary and longrope's short pretrained context.
  o.shape = arch == Architecture::kSmolLM3 ? "smollm3-tiny"
            : arch == Architecture::kPhi3  ? "phi3-tiny"
                                           : "tiny";
  o.dtype = dtype;
  o.tie_word_embeddings = tie;
  o.rope_scaling = rope_scaling;
  o.vocab_size = vocab;
  o.seed = seed;
  return o;
}

// Contiguous KV blocks for one sequence of up to `tokens` positions.
struct LocalKv {
  LocalKv(const KvLayout& layout, int64_t tokens) {
    const int64_t n = (tokens + layout.block_size - 1) / layout.block_size;
    bytes.resize(n * layout.BlockBytes() + 64);
    uint8_t* base = reinterpret_cast<uint8_t*>(
        (reinterpret_cast<uintptr_t>(bytes.data()) + 63) / 64 * 64);
    for (int64_t b = 0; b < n; ++b) blocks.push_back(base + b * layout.BlockBytes());
  }
  std::vector<uint8_t> bytes;
  std::vector<uint8_t*> blocks;
};

inline std::vector<TensorToWrite> ReadTensors(const std::string& path) {
  auto f = SafetensorsFile::Open(path);
  KVFORK_CHECK_MSG(f.ok(), f.status().ToString());
  std::vector<TensorToWrite> out;
  for (const TensorInfo& t : (*f)->tensors())
    out.push_back({t.name, t.dtype, t.shape, std::vector<uint8_t>(t.data, t.data + t.num_bytes)});
  return out;
}

}  // namespace kvfork::testing
