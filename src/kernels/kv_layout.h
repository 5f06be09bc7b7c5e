// Memory layout of one KV block, shared by the KV cache (which owns blocks)
// and the attention kernels (which read and write them). One block holds
// block_size consecutive positions of K and V for every layer, contiguous:
//
//   planes: [layers][2 (K, V)][kv_heads] planes of PlaneBytes() each
//   scales: [layers][2 (K, V)][kv_heads][block_size] f32   (int8 only)
//
// so copying, evicting or persisting a block moves one chunk of memory.
//
// A plane of bf16, f32 or int8 is [block_size][head_dim] elements. A plane of
// q4 or q4r (head_dim a multiple of 32) is
//
//   codes:  [block_size][head_dim / 2] bytes    (RowBytes() a token)
//   scales: [block_size][head_dim / 32] f16     (RowScaleBytes() a token)
//
// Each group of 32 values along head_dim (dims [32 g, 32 g + 32)) is 16
// bytes of codes at byte 16 g of the row and one f16 scale d: byte i holds
// dim 32 g + i in its low nibble and dim 32 g + 16 + i in its high nibble
// (llama.cpp's q4_0 order, so a 16-byte load widened to 16 lanes gives dims
// 0-15 from the low nibbles and 16-31 from the high ones). A nibble c is the
// value (c - 8) * d, exact in f32 (a 4-bit integer times an 11-bit
// significand). No zero point: an f16 one would make a head row 80 bytes at
// head_dim 128, 3.2x smaller than bf16, under the 3.5x asked (issue 26); with
// f16 scales it is 72 bytes, 3.56x. Quantization: kv_q4.h.
//
// q4r stores the same codes of K and V rotated by a fixed normalized
// Hadamard transform per head (kv_q4.h: blocks of the largest power of two
// dividing head_dim); attention rotates the queries the same way and
// rotates its output back, so kernels read q4r exactly as q4.
//
// KIVI's layout (Liu et al. 2024) is measured, not a format here (issue 26:
// `kvfork kv-quality --kv-dtype kivi4|kivi2` simulates it on a bf16 layout,
// kernels/kv_kivi_sim.h; docs/kv_cache.md "KIVI's layout, simulated"). K is
// quantized per channel over a group of T tokens and V per token in groups
// of 32 dims, both asymmetric (an f16 scale and an f16 zero point a group),
// and a sequence's newest, incomplete group stays bf16. As a block format
// with T = block_size, a plane would be
//
//   K: codes [head_dim][T / 2] bytes (channel-major: one channel's T tokens
//      in a row), scales and zeros [head_dim][2] f16      4 + 32 / T bits a value
//   V: codes [T][head_dim / 2] bytes, scales and zeros
//      [T][head_dim / 32][2] f16                          5 bits a value
//
// plus the bf16 tail block of each sequence until it fills. kivi4 at T = 16
// is 5.5 bits a value (2.9x smaller than bf16, under issue 26's 3.5x; q4 is
// 4.5 bits, 3.56x), at T = 32 5 bits (3.2x); kivi2 3.5 and 3 bits.
#pragma once

#include <cstddef>
#include <cstdint>

namespace kvfork {

enum class KvDType { kBf16, kF32, kInt8, kQ4, kQ4r };

const char* KvDTypeName(KvDType t);

// The 4-bit formats (read alike by every kernel; q4r adds the rotation).
inline bool IsQ4(KvDType t) { return t == KvDType::kQ4 || t == KvDType::kQ4r; }
// Values per q4 scale, along head_dim.
inline constexpr int kQ4Group = 32;

struct KvLayout {
  int num_layers = 0;
  int num_kv_heads = 0;
  int head_dim = 0;
  int block_size = 16;  // tokens per block
  KvDType dtype = KvDType::kBf16;

  // Bytes of one token's K (or V) values of one head in a plane: the codes
  // alone for q4 (its scales are RowScaleBytes()).
  size_t RowBytes() const {
    const size_t hd = static_cast<size_t>(head_dim);
    switch (dtype) {
      case KvDType::kF32: return hd * 4;
      case KvDType::kBf16: return hd * 2;
      case KvDType::kInt8: return hd;
      case KvDType::kQ4:
      case KvDType::kQ4r: return hd / 2;
    }
    return 0;
  }
  // q4: bytes of one token's scales of one head (an f16 per 32 dims); else 0.
  size_t RowScaleBytes() const {
    return IsQ4(dtype) ? static_cast<size_t>(head_dim) / kQ4Group * 2 : 0;
  }
  // Bytes of one (layer, K or V, head) plane, q4 scales included.
  size_t PlaneBytes() const {
    return static_cast<size_t>(block_size) * (RowBytes() + RowScaleBytes());
  }
  size_t DataBytes() const {
    return static_cast<size_t>(num_layers) * 2 * num_kv_heads * PlaneBytes();
  }
  size_t ScaleBytes() const {
    return dtype == KvDType::kInt8
               ? static_cast<size_t>(num_layers) * 2 * num_kv_heads * block_size * sizeof(float)
               : 0;
  }
  // Bytes of one block, rounded up to 64 so every block starts cache-aligned.
  size_t BlockBytes() const { return (DataBytes() + ScaleBytes() + 63) / 64 * 64; }
  // KV bytes per token across all layers (for accounting and benchmarks).
  size_t BytesPerToken() const { return (DataBytes() + ScaleBytes()) / block_size; }

  // Byte offset, inside a block, of the plane for (layer, kv = 0 for K / 1 for V, head).
  size_t PlaneOffset(int layer, int kv, int head) const {
    return ((static_cast<size_t>(layer) * 2 + kv) * num_kv_heads + head) * PlaneBytes();
  }
  // Byte offset of the scales [block_size] f32 for (layer, kv, head); int8 only.
  size_t ScaleOffset(int layer, int kv, int head) const {
    return DataBytes() +
           ((static_cast<size_t>(layer) * 2 + kv) * num_kv_heads + head) * block_size *
               sizeof(float);
  }
  // Byte offset of a q4 plane's scales [block_size][head_dim / 32] f16.
  size_t Q4ScaleOffset(int layer, int kv, int head) const {
    return PlaneOffset(layer, kv, head) + static_cast<size_t>(block_size) * RowBytes();
  }
};

}  // namespace kvfork
