// One sliding-window layer group's pool of the paged KV cache (issue 24),
// as KvCacheStats, EngineStats, /v1/cache/stats and /metrics report it.
#pragma once

#include <cstdint>

namespace kvfork {

struct KvGroupStats {
  int64_t window = 0;
  int64_t block_bytes = 0;
  int64_t blocks_total = 0;
  int64_t blocks_free = 0;    // now
  int64_t blocks_used = 0;    // now: in a running sequence's table
  int64_t blocks_cached = 0;  // now: attached to an index node, evictable
  int64_t peak_used_blocks = 0;
  int64_t evictions = 0;
  int64_t pinned_evictions = 0;  // of those, a pinned prefix's (all cached were pinned)
};

}  // namespace kvfork
