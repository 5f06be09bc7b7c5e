// Attention's part of `kvfork bench kernels`: PagedAttention on qwen3-0.6b's
// heads (16 query heads, 8 KV heads, head_dim 128, bf16 KV in blocks of 16),
// as a prefill of one layer against the machine's best bf16 rate (512 and
// 2,048 tokens from scratch; 22 tokens after 3,400 cached, the serving
// benchmark's seqshare request; bf16 and int8 KV) and as one
// decode step's 28 layers against the read bandwidth (KV rotated over copies
// larger than the caches, as the weights evict it between real steps).
#pragma once

#include <nlohmann/json.hpp>

#include "core/status.h"
#include "core/thread_pool.h"

namespace kvfork::cli {

// Prints one table row per case and returns them as JSON rows (an error when
// the KV blocks cannot be allocated). peak_flops: the machine's best bf16
// rate; bandwidth: its read bandwidth (bytes/s).
StatusOr<nlohmann::json> BenchAttention(ThreadPool& pool, double min_seconds, double peak_flops,
                                        double bandwidth);

}  // namespace kvfork::cli
