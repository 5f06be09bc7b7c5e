// MatMulShared and MatMulGrouped over block-quantized weights (ops.h
// dispatches here for any quantized dtype, on every ISA level). x's rows are
// quantized once per call into the caller's scratch (ActivationBlockElems:
// q8_0 and/or q8_K), then one ParallelFor per kMaxMatMulTargets targets (per
// call, for the grouped pass) shares their W rows among the threads; each W
// row is dotted with each x row by the (ISA, format) kernel of quant_isa.h,
// scalar where a level has none. Targets may mix formats.
#pragma once

#include <cstdint>
#include <span>

#include "core/thread_pool.h"
#include "kernels/ops.h"

namespace kvfork {

// Every target's w quantized with x's cols (a multiple of its block); m > 0.
void QuantMatMulShared(const float* x, int64_t m, std::span<const MatMulTarget> targets,
                       ThreadPool& pool);

// Whether MatMulGrouped runs this group in its shared quantized pass: w
// block-quantized and m in [1, kMatMulGroupedMaxRows].
inline bool InQuantGroupedPass(const MatMulGroup& g) {
  return g.m >= 1 && g.m <= kMatMulGroupedMaxRows && IsQuantized(g.target.w.dtype);
}

// MatMulGrouped's shared pass (ops.h): runs the InQuantGroupedPass groups as one
// ParallelFor over their W rows in tasks of about kGemvTaskBytes (a task never
// spans two groups); skips every other group. A group's x rows are quantized
// once for all the groups that share them.
void QuantMatMulGrouped(std::span<const MatMulGroup> groups, ThreadPool& pool);

}  // namespace kvfork
