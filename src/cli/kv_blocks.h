// A sequence's KV blocks in one allocation and its block table, for the
// benchmarks that run the model or attention without the KV cache
// (bench_model.cc, bench_attention.cc).
#pragma once

#include <cstdint>
#include <cstdlib>
#include <memory>
#include <vector>

#include "core/status.h"
#include "kernels/kv_layout.h"

namespace kvfork::cli {

struct BlockTable {
  std::unique_ptr<uint8_t, decltype(&std::free)> memory{nullptr, &std::free};
  std::vector<uint8_t*> blocks;  // block i's base address
};

// Blocks for `tokens` positions of `layout`, 64-byte aligned, contents unset;
// a layout ValidateKvLayout (kv/kv_cache.h) refuses is an InvalidArgument.
StatusOr<BlockTable> AllocateBlocks(const KvLayout& layout, int64_t tokens);

}  // namespace kvfork::cli
