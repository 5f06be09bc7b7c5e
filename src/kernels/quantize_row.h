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
#include <functional>

#include "core/dtype.h"
#include "core/thread_pool.h"

namespace kvfork {

// Quantizes (or converts, for f32/f16/bf16) one row of `cols` floats into
// RowBytes(t, cols) bytes at dst. cols must be a multiple of
// Traits(t).block_elems (check RowFits first).
void QuantizeRow(DType t, const float* x, int64_t cols, uint8_t* dst);

// Writes `rows` rows of format t at dst (row r at r * RowBytes(t, cols)),
// filling each row's floats with load_row(r, out[cols]) first. Rows are
// split across `pool` (null: the calling thread); each row is computed
// alone, so the bytes do not depend on the threads. For block formats a
// row holding a NaN or an infinity is not written: the return value is the
// first such row (llama-quantize refuses these too), else -1.
// load_row is called from the pool's threads, a row at a time.
int64_t QuantizeRows(DType t, int64_t rows, int64_t cols,
                     const std::function<void(int64_t row, float* out)>& load_row, uint8_t* dst,
                     ThreadPool* pool);

}  // namespace kvfork
