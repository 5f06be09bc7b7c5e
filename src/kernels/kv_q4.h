// The q4 and q4r KV formats (kv_layout.h): quantizing a head's row at write,
// reading one value back, and q4r's Hadamard rotation.
//
// The functions here are the portable reference. The avx2 and avx512 levels
// have SIMD copies of the row quantizer and the rotation (kv_q4_isa.h) that
// produce exactly the same bits (kv_q4_test compares them byte for byte), so
// the stored codes and scales are the same everywhere and a cached block
// means the same thing whichever level wrote it. Every function here is
// elementwise or in a fixed order, so its bits do not depend on batching or
// chunking.
#pragma once

#include <cstdint>

#include "core/bf16.h"
#include "kernels/kv_layout.h"

namespace kvfork {

// Quantizes x[0, head_dim) (head_dim a multiple of 32) into codes
// [head_dim / 2] and scales [head_dim / 32] (f16), group by group as
// llama.cpp's q4_0: m = the value of largest magnitude (the first one on a
// tie), d = f16(m / -8) (clamped to +-65504, +0 for an all-zero group),
// q = clamp(round_to_nearest_even(x / d), -8, 7) computed as x * (1 / d), the
// nibble q + 8. So m itself comes back exactly when d is exact, and NaN
// inputs are skipped by the max and stored as -8.
void QuantizeQ4Row(const float* x, int head_dim, uint8_t* codes, f16_t* scales);

// The scalar step of QuantizeQ4Row for one group, shared with the SIMD
// copies so the scale has one definition: m is the group's value of largest
// magnitude and amax its magnitude (0 for a group of zeros and NaNs).
// Returns d16 and sets *inv = 1 / d (0 when d is 0).
f16_t Q4GroupScale(float m, float amax, float* inv);

// Value d (0 <= d < head_dim) of a row quantized by QuantizeQ4Row:
// (nibble - 8) * scale, exact in f32.
inline float DequantizeQ4(const uint8_t* codes, const f16_t* scales, int d) {
  const int g = d / kQ4Group, i = d % kQ4Group;
  const uint8_t byte = codes[g * 16 + (i & 15)];
  const int c = i < 16 ? (byte & 15) : (byte >> 4);
  return static_cast<float>(c - 8) * F16ToF32(scales[g]);
}

// q4r's rotation block: the largest power of two dividing head_dim (128 for
// 128, 64 for 64, 32 for 96), so the transform is a Hadamard matrix on each
// block of that many dims.
inline int HadamardBlock(int head_dim) { return head_dim & -head_dim; }

// x[0, head_dim) = H x in place, H block-diagonal with normalized Walsh-
// Hadamard blocks of HadamardBlock(head_dim): butterflies (a + b, a - b) in
// a fixed order, then a multiply by 1 / sqrt(block). H is orthogonal and its
// own inverse (up to rounding), so q . k = Hq . Hk and sum p_j v_j =
// H (sum p_j H v_j).
void HadamardRotate(float* x, int head_dim);

// The row functions WriteKvQ4 runs: the portable ones above, or a level's
// SIMD copies (kv_q4_isa.h) with the same bits. ops.cc picks the active
// level's.
struct Q4RowKernels {
  void (*quantize)(const float* x, int head_dim, uint8_t* codes, f16_t* scales) = QuantizeQ4Row;
  void (*rotate)(float* x, int head_dim) = HadamardRotate;
};

// WriteKv (ops.h) for q4 and q4r layouts: each (token, head) row of k and v
// rotated (q4r) and quantized into its plane.
void WriteKvQ4(const KvLayout& layout, int layer, uint8_t* const* blocks, int64_t start_pos,
               int64_t num_tokens, const float* k, const float* v,
               const Q4RowKernels& kernels = Q4RowKernels{});

}  // namespace kvfork
