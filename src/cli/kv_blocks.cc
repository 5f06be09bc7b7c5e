#include "cli/kv_blocks.h"

#include <string>

#include "kv/kv_cache.h"

namespace kvfork::cli {

StatusOr<BlockTable> AllocateBlocks(const KvLayout& layout, int64_t tokens) {
  KVFORK_RETURN_IF_ERROR(ValidateKvLayout(layout));  // q4's head_dim among others
  const int64_t n = (tokens + layout.block_size - 1) / layout.block_size;
  const size_t block_bytes = layout.BlockBytes();  // a multiple of 64
  BlockTable t;
  t.memory.reset(static_cast<uint8_t*>(std::aligned_alloc(64, block_bytes * n)));
  if (t.memory == nullptr)
    return ResourceExhaustedError("cannot allocate " + std::to_string(block_bytes * n) +
                                  " bytes of KV blocks");
  for (int64_t i = 0; i < n; ++i) t.blocks.push_back(t.memory.get() + i * block_bytes);
  return t;
}

}  // namespace kvfork::cli
