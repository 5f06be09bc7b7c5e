// f32 rows -> the weight formats of core/dtype.h, as llama.cpp's
// llama-quantize writes them without an importance matrix.
//
// The block formats follow ggml-quants.c's quantize_row_*_ref bit for bit
// (same search for scales, same float operation order, same rounding), so a
// model quantized by `kvfork quantize` holds the bytes llama-quantize would
// write for the same f32 weights; tests/model/llamacpp checks that.
//
// Scalar reference code: it runs once per model, not per token. The
// kernels module is compiled with -ffp-contract=off, which keeps a*b+c from
// being fused into one rounding here as it is not in ggml-quants.c.
// Thread-safe (no state); cost ~O(cols) per row, x ~40 for the k-quants'
// scale search.
#pragma once

#include <cstdint>

#include "core/dtype.h"

namespace kvfork {

// Quantizes (or converts, for f32/f16/bf16) one row of `cols` floats into
// RowBytes(t, cols) bytes at dst. cols must be a multiple of
// Traits(t).block_elems (check RowFits first).
void QuantizeRow(DType t, const float* x, int64_t cols, uint8_t* dst);

}  // namespace kvfork
