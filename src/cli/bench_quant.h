// The quantized MatMul's part of `kvfork bench kernels`: every block format
// on qwen3-0.6b's projection shapes, as a decode GEMV (m = 1, weights rotated
// over copies larger than the L3 so they come from DRAM) against the read
// bandwidth, counting the bytes of the quantized blocks, and as a prefill
// GEMM (m = 512) in integer GOP/s (2 m n k per call).
#pragma once

#include <nlohmann/json.hpp>

#include "core/thread_pool.h"

namespace kvfork::cli {

// Prints one table row per (format, op, shape) and returns them as JSON rows.
// bandwidth: the machine's read bandwidth (bytes/s); gemm_row_cap: the lm
// head's GEMM rows are cut to this many to keep the run short.
nlohmann::json BenchQuantMatMul(ThreadPool& pool, double min_seconds, double bandwidth,
                                int64_t gemm_row_cap);

}  // namespace kvfork::cli
