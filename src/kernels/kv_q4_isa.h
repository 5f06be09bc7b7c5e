// SIMD copies of kv_q4.h's row quantizer and Hadamard rotation, one per ISA
// level, with exactly the portable functions' bits: the same maximum (NaN
// skipped, the first of equal magnitudes), the same scale (Q4GroupScale),
// x * (1 / d) rounded in the current rounding mode as std::nearbyint does
// (to nearest even by default), the same clamp (NaN -> -8); the rotation's
// butterflies are the same adds and subtracts, stage by stage, then the same
// multiply. kv_q4_test compares them byte for byte. ops.cc runs the active
// level's (Q4RowKernels); none may be called unless the CPU has the ISA.
// Preconditions as kv_q4.h's (head_dim a multiple of 32).
#pragma once

#include <cstdint>

#include "core/bf16.h"

namespace kvfork {
namespace avx2 {
void QuantizeQ4Row(const float* x, int head_dim, uint8_t* codes, f16_t* scales);
void HadamardRotate(float* x, int head_dim);
}  // namespace avx2
namespace avx512 {
void QuantizeQ4Row(const float* x, int head_dim, uint8_t* codes, f16_t* scales);
void HadamardRotate(float* x, int head_dim);
}  // namespace avx512
}  // namespace kvfork
