// The per-(ISA, format) dot kernels of the quantized matrix products
// (quant_matmul.cc). A kernel computes y[r] = <row r of w, x> for r < rows,
// row r at w + r * row_bytes, x an activation row (quant.h) quantized for the
// format (ActivationBlockElems). Each y[r] is one row's reduction in one fixed
// order: the same bits however many rows a call covers (invariant 1).
//
// What each level has (nullptr = none, the caller runs the scalar kernel):
//   scalar  every format
//   avx2    Q8_0, Q4_0, Q4_K, Q6_K (vpmaddubsw)
//   avx512  every format (AVX512-VNNI vpdpbusd; needs CpuFeatures::avx512_vnni)
#pragma once

#include <cstddef>
#include <cstdint>

#include "core/dtype.h"
#include "kernels/quant.h"

namespace kvfork {

using QuantDotFn = void (*)(const uint8_t* w, size_t row_bytes, int64_t rows, const Q8Row& x,
                            float* y);

namespace reference {
QuantDotFn QuantDotKernel(DType weights);
}  // namespace reference
namespace avx2 {
QuantDotFn QuantDotKernel(DType weights);
}  // namespace avx2
namespace avx512 {
QuantDotFn QuantDotKernel(DType weights);
}  // namespace avx512

}  // namespace kvfork
