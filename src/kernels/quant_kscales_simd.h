// DecodeKScales (quant_blocks.h) on SSE registers, for the SIMD Q4_K/Q5_K
// dot kernels: ~20 scalar integer operations per super-block and W row
// become 8 SSE ones, and the result is already in a vector register. It
// needs SSE4.1, which every SIMD level here has (DecodeKScales4: AVX-512 BW);
// the target attributes let the unit test (compiled without ISA flags) call
// them too. Same values as DecodeKScales (tests/kernels/quant_test.cc
// compares them).
#pragma once

#include <immintrin.h>

#include <cstdint>

namespace kvfork {
namespace {

// Bytes 0-7: the 8 scales, 8-15: the 8 mins (6 bits each), of the block
// whose scale bytes start at s. Reads 16 bytes from s: the 12 scale bytes and
// the 4 after them, which in a Q4_K or Q5_K block are its own qh or qs.
__attribute__((target("sse4.1"))) inline __m128i DecodeKScalesSimd(const uint8_t* s) {
  // Bytes 0-3 of v: a (scales 0-3, top bits of scales 4-7), 4-7: b (mins
  // 0-3, top bits of mins 4-7), 8-11: c (low nibbles: scales 4-7, high: mins 4-7).
  const __m128i v = _mm_loadu_si128(reinterpret_cast<const __m128i*>(s));
  const __m128i acbc =
      _mm_shuffle_epi8(v, _mm_setr_epi8(0, 1, 2, 3, 8, 9, 10, 11, 4, 5, 6, 7, 8, 9, 10, 11));
  const __m128i top =
      _mm_shuffle_epi8(v, _mm_setr_epi8(-1, -1, -1, -1, 0, 1, 2, 3, -1, -1, -1, -1, 4, 5, 6, 7));
  // Mins 4-7 take c's high nibbles: those bytes shifted down by 4 first.
  const __m128i low =
      _mm_blendv_epi8(acbc, _mm_srli_epi16(acbc, 4),
                      _mm_setr_epi8(0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, -1, -1, -1, -1));
  const __m128i low_mask = _mm_setr_epi8(0x3f, 0x3f, 0x3f, 0x3f, 0x0f, 0x0f, 0x0f, 0x0f, 0x3f, 0x3f,
                                         0x3f, 0x3f, 0x0f, 0x0f, 0x0f, 0x0f);
  // Bits 6-7 of a (b) become bits 4-5 of scales (mins) 4-7; the 16-bit shift
  // brings the next byte's low bits into bits 6-7, which the mask drops.
  return _mm_or_si128(_mm_and_si128(low, low_mask),
                      _mm_and_si128(_mm_srli_epi16(top, 2), _mm_set1_epi8(0x30)));
}

// The same for four blocks at once, one per 128-bit lane, for the kernels
// that take four W rows side by side (one decode of 16 bytes costs as much as
// one of 64). Lane r of `heads` holds the first 16 bytes of block r (d, dmin,
// then the 12 scale bytes); lane r of the result its 8 scales (bytes 0-7) and
// 8 mins (8-15), as DecodeKScalesSimd gives them.
__attribute__((target("avx512f,avx512bw"))) inline __m512i DecodeKScales4(__m512i heads) {
  // DecodeKScalesSimd's shuffles with every index 4 further on (past d,
  // dmin), and its mask, repeated per lane (as int32s, low byte first:
  // _mm512_broadcast_i32x4 trips GCC 12's uninitialized warning).
  const __m512i acbc = _mm512_shuffle_epi8(
      heads, _mm512_set4_epi32(0x0f0e0d0c, 0x0b0a0908, 0x0f0e0d0c, 0x07060504));
  const __m512i top =
      _mm512_shuffle_epi8(heads, _mm512_set4_epi32(0x0b0a0908, -1, 0x07060504, -1));
  // Words 6 and 7 of each lane (its bytes 12-15, mins 4-7) shifted by 4: the
  // blend of DecodeKScalesSimd as one masked shift.
  const __m512i low = _mm512_mask_srli_epi16(acbc, 0xc0c0c0c0u, acbc, 4);
  const __m512i low_mask = _mm512_set4_epi32(0x0f0f0f0f, 0x3f3f3f3f, 0x0f0f0f0f, 0x3f3f3f3f);
  return _mm512_or_si512(_mm512_and_si512(low, low_mask),
                         _mm512_and_si512(_mm512_srli_epi16(top, 2), _mm512_set1_epi8(0x30)));
}

}  // namespace
}  // namespace kvfork
