// ggml's block layouts (ggml-common.h) as structs, and the small decoders the
// dequantizer and every dot kernel share. Included by the per-ISA files too:
// everything here has internal linkage (ops_isa.h explains why).
#pragma once

#include <cstdint>
#include <cstring>

namespace kvfork {
namespace {

constexpr int kQK = 256;  // weights per K-format super-block (ggml's QK_K)

struct BlockQ8_0 {
  uint16_t d;  // f16 scale
  int8_t qs[32];
};
struct BlockQ4_0 {
  uint16_t d;
  uint8_t qs[16];  // element j in the low nibble of qs[j], j + 16 in the high one; value q - 8
};
struct BlockQ4_1 {
  uint16_t d, m;  // value d * q + m
  uint8_t qs[16];
};
struct BlockQ5_0 {
  uint16_t d;
  uint8_t qh[4];  // bit i (little-endian u32) is bit 4 of element i; value q - 16
  uint8_t qs[16];
};
struct BlockQ5_1 {
  uint16_t d, m;
  uint8_t qh[4];
  uint8_t qs[16];
};
// Eight sub-blocks of 32 with 6-bit scales and mins (DecodeKScales); value
// d * scale_j * q - dmin * min_j. qs[32c + l]: low nibble element 64c + l,
// high nibble element 64c + 32 + l.
struct BlockQ4_K {
  uint16_t d, dmin;
  uint8_t scales[12];
  uint8_t qs[128];
};
// As Q4_K with a fifth bit: bit j of qh[l] is bit 4 of element 32j + l.
struct BlockQ5_K {
  uint16_t d, dmin;
  uint8_t scales[12];
  uint8_t qh[32];
  uint8_t qs[128];
};
// Sixteen sub-blocks of 16 with int8 scales; value d * scale_j * (q - 32).
// Half h (128 elements) uses ql[64h, 64h + 64) and qh[32h, 32h + 32):
// element 128h + 32s + l (s < 4, l < 32) is the low (s = 0, 1) or high
// (s = 2, 3) nibble of ql[64h + 32 (s & 1) + l], with bits 2s, 2s + 1 of
// qh[32h + l] on top.
struct BlockQ6_K {
  uint8_t ql[128];
  uint8_t qh[64];
  int8_t scales[16];
  uint16_t d;
};

static_assert(sizeof(BlockQ8_0) == 34 && sizeof(BlockQ4_0) == 18 && sizeof(BlockQ4_1) == 20 &&
              sizeof(BlockQ5_0) == 22 && sizeof(BlockQ5_1) == 24 && sizeof(BlockQ4_K) == 144 &&
              sizeof(BlockQ5_K) == 176 && sizeof(BlockQ6_K) == 210);

// The 12 scale bytes of a Q4_K/Q5_K block as 8 scales and 8 mins (6 bits
// each), one per byte, sub-block j in byte j of a little-endian u64. Bytes 0-3
// hold scales 0-3 in their low 6 bits, 4-7 the mins 0-3; bytes 8-11 hold the
// low 4 bits of scales 4-7 (low nibble) and mins 4-7 (high nibble), whose top
// 2 bits are the top bits of bytes 0-3 (scales) and 4-7 (mins). Kept in
// registers: the SIMD kernels move each u64 straight into a vector.
struct KScales {
  uint64_t scales;
  uint64_t mins;
  int scale(int j) const { return static_cast<int>((scales >> (8 * j)) & 0xff); }
  int min(int j) const { return static_cast<int>((mins >> (8 * j)) & 0xff); }
};
inline KScales DecodeKScales(const uint8_t* s) {
  uint32_t a, b, c;
  std::memcpy(&a, s, 4);
  std::memcpy(&b, s + 4, 4);
  std::memcpy(&c, s + 8, 4);
  const uint32_t sc_lo = a & 0x3f3f3f3fu;
  const uint32_t mn_lo = b & 0x3f3f3f3fu;
  const uint32_t sc_hi = (c & 0x0f0f0f0fu) | (((a >> 6) & 0x03030303u) << 4);
  const uint32_t mn_hi = ((c >> 4) & 0x0f0f0f0fu) | (((b >> 6) & 0x03030303u) << 4);
  return {sc_lo | static_cast<uint64_t>(sc_hi) << 32, mn_lo | static_cast<uint64_t>(mn_hi) << 32};
}

}  // namespace
}  // namespace kvfork
