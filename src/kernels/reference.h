// Plain scalar implementations of every op in ops.h: the portable ISA path
// and the reference the SIMD paths are tested against. Readable over fast.
#pragma once

#include "kernels/ops.h"

namespace kvfork::reference {

void MatMul(const float* x, int64_t m, const MatrixView& w, float* y, ThreadPool& pool);
// MatMul per target, in order (the scalar level of ops.h's MatMulShared).
void MatMulShared(const float* x, int64_t m, std::span<const MatMulTarget> targets,
                  ThreadPool& pool);
void RmsNorm(const float* x, const float* weight, int64_t rows, int64_t dim, float eps, float* y);
void Rope(float* x, int64_t num_tokens, int64_t num_heads, int64_t head_dim,
          const int32_t* positions, const float* inv_freq);
void RopeRotate(float* x, int64_t num_tokens, int64_t num_heads, int64_t head_dim,
                const float* cos, const float* sin);
void SiluMul(const float* gate, const float* up, int64_t n, float* out);
void AddInPlace(float* y, const float* x, int64_t n);
void Softmax(float* x, int64_t n);
void EmbeddingLookup(const MatrixView& table, const int32_t* ids, int64_t n, float* out);
int64_t Argmax(const float* x, int64_t n);
void WriteKv(const KvLayout& layout, int layer, uint8_t* const* blocks, int64_t start_pos,
             int64_t num_tokens, const float* k, const float* v);
void PagedAttention(const KvLayout& layout, int layer, int num_heads, float scale,
                    std::span<const AttentionSeq> seqs, ThreadPool& pool);

// Reads element (pos, head, d) of layer's K (kv = 0) or V (kv = 1) back as f32.
float ReadKv(const KvLayout& layout, int layer, int kv, uint8_t* const* blocks, int64_t pos,
             int head, int d);

}  // namespace kvfork::reference
