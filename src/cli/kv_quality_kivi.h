// kv-quality's KIVI simulation (`--kv-dtype kivi4|kivi2`): a chunk run
// through the model with a bf16 KV layout whose complete token groups are
// rewritten with their KIVI round trip (kernels/kv_kivi_sim.h: K per
// channel over the group, V per token in groups of 32 dims), so the model
// attends to exactly what a KIVI cache would hold. Quality only: the KV is
// stored dequantized in bf16, no memory is saved, no kernel reads KIVI
// codes (docs/kv_cache.md, "KV quantization quality").
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "cli/kv_blocks.h"
#include "core/status.h"
#include "core/thread_pool.h"
#include "kernels/kv_kivi_sim.h"
#include "kernels/kv_layout.h"
#include "model/model.h"

namespace kvfork::cli {

// One side of a kv-quality comparison: a real KV format, or the KIVI
// simulation stored in bf16.
struct KvQualityFormat {
  std::string name;  // as given on the command line
  KvDType storage = KvDType::kBf16;
  int kivi_bits = 0;  // 4 or 2 for kivi4 / kivi2; 0 for a real format
};

// The simulation's settings beside the bits.
struct KiviOptions {
  int64_t group_tokens = 16;  // tokens per K channel group (and per bf16 residual)
  KiviKeyAxis key_axis = KiviKeyAxis::kPerChannel;
};

// bf16, f32, int8, q4, q4r, kivi4 or kivi2; an error names `flag`.
StatusOr<KvQualityFormat> ParseKvQualityFormat(const std::string& flag, const std::string& name);

// The KIVI counterpart of ForwardScoredHalf (perplexity_chunks.h), with the
// same *logits rows. Positions are run in pieces that end at every multiple
// of group_tokens (and at chunk.size() / 2, where the logits start); after
// a piece completes a group, that group is round-tripped in place. So every
// query attends to the complete groups before its own quantized and to its
// own group's earlier tokens, and itself, in bf16 (KIVI's full-precision
// residual), whatever the chunking: what decoding one token at a time into
// a KIVI cache would see. group_tokens >= chunk.size() quantizes nothing
// and gives ForwardScoredHalf's bits on a bf16 layout.
// Cost: one forward pass of the chunk in chunk.size() / group_tokens pieces.
Status ForwardScoredHalfKivi(Model& model, const KvLayout& layout, const BlockTable& blocks,
                             ThreadPool& pool, std::span<const int32_t> chunk, int kivi_bits,
                             const KiviOptions& options, std::vector<float>* logits);

}  // namespace kvfork::cli
