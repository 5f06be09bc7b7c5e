// Dispatch of every op to its ISA implementation. Until an op has a SIMD
// version it runs the scalar reference on every ISA.
#include "kernels/ops.h"

#include "core/cpu_features.h"
#include "kernels/reference.h"

namespace kvfork {

const char* KvDTypeName(KvDType t) {
  switch (t) {
    case KvDType::kBf16: return "bf16";
    case KvDType::kF32: return "f32";
    case KvDType::kInt8: return "int8";
  }
  return "?";
}

void MatMul(const float* x, int64_t m, const MatrixView& w, float* y, ThreadPool& pool) {
  reference::MatMul(x, m, w, y, pool);
}
void RmsNorm(const float* x, const float* weight, int64_t rows, int64_t dim, float eps, float* y) {
  reference::RmsNorm(x, weight, rows, dim, eps, y);
}
void Rope(float* x, int64_t num_tokens, int64_t num_heads, int64_t head_dim,
          const int32_t* positions, const float* inv_freq) {
  reference::Rope(x, num_tokens, num_heads, head_dim, positions, inv_freq);
}
void SiluMul(const float* gate, const float* up, int64_t n, float* out) {
  reference::SiluMul(gate, up, n, out);
}
void AddInPlace(float* y, const float* x, int64_t n) { reference::AddInPlace(y, x, n); }
void Softmax(float* x, int64_t n) { reference::Softmax(x, n); }
void EmbeddingLookup(const MatrixView& table, const int32_t* ids, int64_t n, float* out) {
  reference::EmbeddingLookup(table, ids, n, out);
}
int64_t Argmax(const float* x, int64_t n) { return reference::Argmax(x, n); }
void WriteKv(const KvLayout& layout, int layer, uint8_t* const* blocks, int64_t start_pos,
             int64_t num_tokens, const float* k, const float* v) {
  reference::WriteKv(layout, layer, blocks, start_pos, num_tokens, k, v);
}
void PagedAttention(const KvLayout& layout, int layer, int num_heads, float scale,
                    std::span<const AttentionSeq> seqs, ThreadPool& pool) {
  reference::PagedAttention(layout, layer, num_heads, scale, seqs, pool);
}

}  // namespace kvfork
