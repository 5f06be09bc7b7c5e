// llama.cpp's block-quantized weight formats (core/dtype.h) in the kernels:
// reference dequantization, and the int8 activation rows the quantized
// matrix products multiply them with.
//
// Activations are quantized per row, as llama.cpp does: against *_0, *_1 and
// Q8_0 weights in blocks of 32 (q8_0: d = amax / 127, round to nearest even),
// against the K formats in blocks of 256 (q8_K). The row is laid out for the
// kernels rather than as ggml's blocks (see Q8Row). Quantizing a row depends
// on that row only, so M=1 and M=N give the same activations (invariant 1).
#pragma once

#include <cstddef>
#include <cstdint>

#include "core/dtype.h"

namespace kvfork {

// out[c] = weight c of one row of a quantized (or f32/bf16/f16) format, with
// the float operations of ggml's dequantize_row_* (bit for bit). row holds
// RowBytes(dtype, cols) bytes; cols a multiple of the block size.
void DequantizeRow(DType dtype, const uint8_t* row, int64_t cols, float* out);

// Elements per activation scale against weights of this format: 256 for the
// K formats (q8_K), 32 for the others (q8_0).
int ActivationBlockElems(DType weights);

// One quantized activation row of `cols` values (cols a multiple of
// block_elems). Every element x[c] ~= d[c / block_elems] * qs[c], |qs| <= 127.
// nsum4 and sum32 let the kernels fold a weight format's offset (q - 8,
// q - 32, ...) and min terms into their integer sums without extra work:
//   nsum4[i] = -(qs[4i] + ... + qs[4i + 3])     one per 32-bit lane of a dot
//   sum32[i] = qs[32i] + ... + qs[32i + 31]
struct Q8Row {
  const int8_t* qs = nullptr;      // [cols]
  const int32_t* nsum4 = nullptr;  // [cols / 4]
  const int32_t* sum32 = nullptr;  // [cols / 32]
  const float* d = nullptr;        // [cols / block_elems]
  int64_t cols = 0;
};

// Bytes of one activation row in memory (a multiple of 64, so rows packed
// one after another stay 64-byte aligned).
size_t Q8RowBytes(int64_t cols, int block_elems);
// The view of a row stored at `mem` (Q8RowBytes bytes, 64-byte aligned).
Q8Row Q8RowAt(const uint8_t* mem, int64_t cols, int block_elems);
// Quantizes x[0, cols) into the row at mem. Deterministic: round to nearest
// even, scale from the block's largest magnitude (q8_K's sign convention
// gives the same values, as rounding is symmetric).
void QuantizeQ8Row(const float* x, int64_t cols, int block_elems, uint8_t* mem);

}  // namespace kvfork
