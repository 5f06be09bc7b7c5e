// The per-(ISA, format) dot kernels of the quantized matrix products
// (quant_matmul.cc). A kernel computes y[c * ldy + r] = <W row r, x row c>
// for r < rows and c < nx, W row r at w + r * row_bytes, x[c] an activation
// row (quant.h) quantized for the format (ActivationBlockElems). Each output
// is one (W row, x row) reduction in one fixed order: the same bits however
// many rows of either a call covers (invariant 1).
//
// What each level has (nullptr = none, the caller runs the scalar kernel):
//   scalar  every format
//   avx2    Q8_0, Q4_0, Q4_K, Q5_K, Q6_K (vpmaddubsw)
//   avx512  every format (AVX512-VNNI vpdpbusd; needs CpuFeatures::avx512_vnni)
//           Q4_K, Q5_K and Q6_K unpack codes with GFNI where the CPU has it
//   amx     prefill (QuantPanelFn) of Q8_0, Q4_K, Q5_K, Q6_K on AMX-INT8 tiles; needs
//           CpuFeatures::amx_int8 and avx512_vnni (quant_matmul_amx.cc)
#pragma once

#include <cstddef>
#include <cstdint>

#include "core/dtype.h"
#include "kernels/quant.h"

namespace kvfork {

using QuantDotFn = void (*)(const uint8_t* w, size_t row_bytes, int64_t rows, const Q8Row* x,
                            int64_t nx, float* y, int64_t ldy);

namespace reference {
QuantDotFn QuantDotKernel(DType weights);
}  // namespace reference
namespace avx2 {
QuantDotFn QuantDotKernel(DType weights);
}  // namespace avx2
namespace avx512 {
// gfni: Q4_K, Q5_K and Q6_K unpack their codes with GF2P8AFFINEQB (the same
// bits; nullptr where the CPU lacks GFNI). The one-argument form takes it
// where the CPU has it.
QuantDotFn QuantDotKernel(DType weights);
QuantDotFn QuantDotKernel(DType weights, bool gfni);
}  // namespace avx512

// A prefill kernel over one panel of W: y[c * ldy + r] = <W row r, x row c>
// for r < rows (at most kQuantPanelRows) and c < m. x holds
// RoundUp(m, kQuantPanelRows) activation rows, kept one after another
// x_stride bytes apart (x[c].qs = x[0].qs + c * x_stride), the rows past m
// zero. Each output takes exactly the float operations, in the same order,
// as the avx512 kernel of its format, so the two are interchangeable.
inline constexpr int64_t kQuantPanelRows = 16;
using QuantPanelFn = void (*)(const uint8_t* w, size_t row_bytes, int64_t rows, const Q8Row* x,
                              size_t x_stride, int64_t m, float* y, int64_t ldy);
namespace amx {
// The AMX-INT8 panel kernel of this format, or nullptr (no kernel for the
// format, or the CPU lacks AMX-INT8 or AVX512-VNNI).
QuantPanelFn QuantPanelKernel(DType weights);
}  // namespace amx

}  // namespace kvfork
