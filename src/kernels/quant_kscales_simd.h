// DecodeKScales (quant_blocks.h) on SSE registers, for the SIMD Q4_K/Q5_K
// dot kernels: ~20 scalar integer operations per super-block and W row
// become 8 SSE ones, and the result is already in a vector register. It
// needs SSE4.1, which every SIMD level here has; the target attribute lets
// the unit test (compiled without ISA flags) call it too. Same values as
// DecodeKScales (tests/kernels/quant_test.cc compares them).
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

}  // namespace
}  // namespace kvfork
