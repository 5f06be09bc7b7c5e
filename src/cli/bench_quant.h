// The quantized MatMul's part of `kvfork bench kernels`: every block format
// on qwen3-0.6b's projection shapes, as a decode GEMV (m = 1, weights rotated
// over copies larger than the L3 so they come from DRAM) against the read
// bandwidth, counting the bytes of the quantized blocks, and as a prefill
// GEMM (m = 512) in integer GOP/s (2 m n k per call). Each GEMV also runs
// with W in L2 (its compute alone: "hot"), which gives the fraction of the
// limit it would reach if streaming and compute did not overlap at all, and
// hot / bandwidth the one it could reach if they overlapped perfectly
// (issue 22's compute bound); bf16 GEMV rows come last as the baseline.
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
