// How the avx2 attention kernel reads a block's K or V rows: 8 dims of row j
// from dim d as f32 (Load(j, d)), either from the block's plane converted to
// f32 rows once for every tile of a span (F32Rows), or, for int8 spans of
// one tile (decode: each block read once, so the copy is pure cost), from
// the plane as stored, converted in registers (Int8Rows). Both give every
// value the same f32 bits, so the kernel's operations and their order do
// not depend on which one a span uses.
// Included by attention_avx2.cc alone, and its names have internal linkage
// (the anonymous namespace): no function here may be merged with another ISA
// level's (kernels_isa_objects_have_no_weak_symbols).
#pragma once

#include <cstddef>
#include <cstdint>

#include "kernels/kv_layout.h"
#include "kernels/simd_avx2.h"

namespace kvfork::avx2 {
namespace {

// Rows of `stride` floats (head_dim rounded up to 8, zeros past it).
struct F32Rows {
  const float* f;
  int stride;
  __m256 Load(int j, int d) const {
    return _mm256_load_ps(f + static_cast<size_t>(j) * stride + d);
  }
};

// An int8 plane as stored (kv_layout.h), head_dim a multiple of 8, so no
// load reaches past a row: its codes unscaled, as PlaneToF32 reads them (the
// row scales go on the scores and on p).
struct Int8Rows {
  const uint8_t* c;
  int hd;
  __m256 Load(int j, int d) const {
    const __m128i b =
        _mm_loadl_epi64(reinterpret_cast<const __m128i*>(c + static_cast<size_t>(j) * hd + d));
    return _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(b));
  }
};

}  // namespace
}  // namespace kvfork::avx2
