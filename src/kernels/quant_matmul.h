// MatMulShared over block-quantized weights (ops.h dispatches here for any
// quantized dtype, on every ISA level). x's rows are quantized once per call
// into the caller's scratch (ActivationBlockElems: q8_0 and/or q8_K), then
// one ParallelFor per kMaxMatMulTargets targets shares their W rows among the
// threads; each W row is dotted with each x row by the (ISA, format) kernel
// of quant_isa.h, scalar where a level has none. Targets may mix formats.
#pragma once

#include <cstdint>
#include <span>

#include "core/thread_pool.h"
#include "kernels/ops.h"

namespace kvfork {

// Every target's w quantized with x's cols (a multiple of its block); m > 0.
void QuantMatMulShared(const float* x, int64_t m, std::span<const MatMulTarget> targets,
                       ThreadPool& pool);

}  // namespace kvfork
