// Per-ISA implementations of the ops in ops.h, chosen by ops.cc on ActiveIsa().
// avx2:: lives in *_avx2.cc (AVX2 + FMA + F16C), avx512:: in *_avx512.cc
// (AVX-512 F/BW/VL/DQ + BF16), amx:: in *_amx.cc (AVX-512 +
// AMX-TILE/BF16); none may be called unless the CPU has the ISA.
//
// The ISA translation units deliberately use no std containers or other
// out-of-line template code: a weak symbol compiled with AVX-512 flags could
// be picked by the linker for a scalar caller and fault on a CPU without it.
// Scratch memory comes from ThreadScratch (scratch.h), compiled without flags.
#pragma once

#include <cstdint>
#include <span>

#include "core/thread_pool.h"
#include "kernels/kv_layout.h"
#include "kernels/ops.h"

// MatMulShared here takes 1..kMaxMatMulTargets targets (row_tasks.h) of one
// dtype, and m > 0; ops.cc groups the caller's list.
#define KVFORK_DECLARE_ISA_OPS                                                               \
  void MatMulShared(const float* x, int64_t m, std::span<const MatMulTarget> targets,        \
                    ThreadPool& pool);                                                       \
  void RmsNorm(const float* x, const float* weight, int64_t rows, int64_t dim, float eps,    \
               float* y);                                                                    \
  void RopeRotate(float* x, int64_t num_tokens, int64_t num_heads, int64_t head_dim,         \
                  const float* cos, const float* sin);                                       \
  void SiluMul(const float* gate, const float* up, int64_t n, float* out);                   \
  void AddInPlace(float* y, const float* x, int64_t n);                                      \
  void Softmax(float* x, int64_t n);                                                         \
  void EmbeddingLookup(const MatrixView& table, const int32_t* ids, int64_t n, float* out);  \
  int64_t Argmax(const float* x, int64_t n);                                                 \
  void WriteKv(const KvLayout& layout, int layer, uint8_t* const* blocks, int64_t start_pos, \
               int64_t num_tokens, const float* k, const float* v);                          \
  void PagedAttention(const KvLayout& layout, int layer, int num_heads, float scale,         \
                      std::span<const AttentionSeq> seqs, ThreadPool& pool);

namespace kvfork {
namespace avx2 {
KVFORK_DECLARE_ISA_OPS
}  // namespace avx2
namespace avx512 {
KVFORK_DECLARE_ISA_OPS
// Decode MatMul's software prefetch (matmul_avx512.cc): 1 on, 0 off, -1 the
// CPU's default. Tests check that it changes no bits.
void SetDecodePrefetchForTesting(int on);
}  // namespace avx512
namespace amx {
// MatMulShared, MatMulSiluMul, MatMulAddTo and PagedAttention differ at this
// level (bf16 weights and bf16 KV on AMX tiles; MatMulShared and
// PagedAttention call the avx512 version for other dtypes and layouts); every
// other op runs the avx512 version.
void MatMulShared(const float* x, int64_t m, std::span<const MatMulTarget> targets,
                  ThreadPool& pool);
// gate and up bf16, same shape, m > 0; out = silu(x gate^T) * (x up^T).
void MatMulSiluMul(const float* x, int64_t m, const MatrixView& gate, const MatrixView& up,
                   float* out, ThreadPool& pool);
// w bf16, m > 0; sum += x w^T.
void MatMulAddTo(const float* x, int64_t m, const MatrixView& w, float* sum, ThreadPool& pool);
void PagedAttention(const KvLayout& layout, int layer, int num_heads, float scale,
                    std::span<const AttentionSeq> seqs, ThreadPool& pool);
}  // namespace amx
}  // namespace kvfork

#undef KVFORK_DECLARE_ISA_OPS
