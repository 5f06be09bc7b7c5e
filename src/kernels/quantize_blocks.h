// Per-format row quantizers behind QuantizeRow (quantize_row.h). Each takes
// a row of n floats (n a multiple of the format's block size) and writes
// n / block_elems blocks in ggml's layout.
#pragma once

#include <cstdint>

namespace kvfork::quantize {

// 32-weight blocks (quantize_legacy.cc).
void RowQ8_0(const float* x, int64_t n, uint8_t* dst);
void RowQ4_0(const float* x, int64_t n, uint8_t* dst);
void RowQ4_1(const float* x, int64_t n, uint8_t* dst);
void RowQ5_0(const float* x, int64_t n, uint8_t* dst);
void RowQ5_1(const float* x, int64_t n, uint8_t* dst);

// 256-weight super-blocks (quantize_k.cc).
void RowQ4_K(const float* x, int64_t n, uint8_t* dst);
void RowQ5_K(const float* x, int64_t n, uint8_t* dst);
void RowQ6_K(const float* x, int64_t n, uint8_t* dst);

// Stores an f16 (little endian, round to nearest even) at dst.
void StoreF16(float v, uint8_t* dst);
// Reads an f16 stored by StoreF16.
float LoadF16(const uint8_t* src);

}  // namespace kvfork::quantize
