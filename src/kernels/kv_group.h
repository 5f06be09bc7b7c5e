// Layers that share one KV block table (issue 24; docs/kv_cache.md "Sliding
// windows"): the global layers (window 0), or the sliding layers of one
// window. The model says which layer is in which group (model.h,
// MapKvGroups), the KV cache keeps a pool and a table per group; the
// kernels see one group's layout at a time.
#pragma once

#include <cstdint>

#include "kernels/kv_layout.h"

namespace kvfork {

// layout.num_layers counts the group's layers and PlaneOffset's `layer` is
// the index inside the group. A model without global layers (Mistral) still
// has a global group, of 0 layers: its blocks hold no K/V, only the prefix
// index's identity of each block of positions.
struct KvGroup {
  KvLayout layout;
  int64_t window = 0;  // AttentionSeq::window of every layer in the group; 0 = global
};

// The most groups a model may have (global + sliding windows of distinct sizes).
inline constexpr int kMaxKvGroups = 4;

}  // namespace kvfork
