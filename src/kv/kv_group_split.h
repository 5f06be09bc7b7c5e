// The layer groups' part of the paged cache's options (issue 24): their
// validation, and the split of the pool's bytes between the global group and
// the sliding ones (docs/kv_cache.md, "Sliding windows").
#pragma once

#include <cstdint>
#include <vector>

#include "core/status.h"
#include "kv/kv_cache.h"

namespace kvfork {

// o.groups must split o.layout's layers: the global group first (window 0,
// maybe no layers), then sliding ones (window > 0, layers), each with the
// layout's heads, head dim, block size and dtype; at most kMaxKvGroups.
// InvalidArgument naming the group otherwise. Empty groups pass.
Status ValidateKvGroups(const KvCacheOptions& o);

// Blocks of each pool for a budget of num_blocks blocks of every layer
// (KvCacheOptions::sliding_blocks says how); logs the split. o.groups has a
// sliding group.
void SplitKvPool(const KvCacheOptions& o, int64_t num_blocks, int64_t* primary_blocks,
                 std::vector<int64_t>* sliding_blocks);

}  // namespace kvfork
