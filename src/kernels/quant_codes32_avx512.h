// Codes of the 4- and 5-bit 32-blocks (Q4_0, Q4_1, Q5_0, Q5_1) as 32 bytes
// in element order, shared by the avx512 dot kernels and the AMX-INT8 panel
// repacking, so both read a block's codes the same way. Needs AVX512BW/VL.
#pragma once

#include <immintrin.h>

#include <cstdint>
#include <cstring>

namespace kvfork {

// The 32 codes of a 4-bit block, element order: low nibbles then high ones.
inline __m256i Nibbles32(const uint8_t* qs) {
  const __m128i v = _mm_loadu_si128(reinterpret_cast<const __m128i*>(qs));
  const __m128i m4 = _mm_set1_epi8(0x0f);
  return _mm256_inserti128_si256(_mm256_castsi128_si256(_mm_and_si128(v, m4)),
                                 _mm_and_si128(_mm_srli_epi16(v, 4), m4), 1);
}

// Adds 16 to the codes whose bit is set in the block's 32 high bits.
inline __m256i AddHighBits(__m256i q, const uint8_t* qh) {
  uint32_t bits;
  std::memcpy(&bits, qh, 4);
  return _mm256_mask_add_epi8(q, static_cast<__mmask32>(bits), q, _mm256_set1_epi8(16));
}

}  // namespace kvfork
