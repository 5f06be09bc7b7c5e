// Dispatch of every op to its ISA implementation, once per call, on
// ActiveIsa(): kScalar runs reference.cc, kAvx2 the *_avx2.cc files, kAvx512
// the *_avx512.cc files (ops_isa.h).
#include "kernels/ops.h"

#include "core/cpu_features.h"
#include "kernels/ops_isa.h"
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

#define KVFORK_DISPATCH(call)                    \
  switch (ActiveIsa()) {                         \
    case Isa::kAvx512: return avx512::call;      \
    case Isa::kAvx2: return avx2::call;          \
    case Isa::kScalar: break;                    \
  }                                              \
  return reference::call
// Until the AVX-512 files land, AVX-512 machines run the AVX2 code.
#define KVFORK_SCALAR_ONLY(call)                 \
  if (ActiveIsa() != Isa::kScalar) return avx2::call; \
  return reference::call

void MatMul(const float* x, int64_t m, const MatrixView& w, float* y, ThreadPool& pool) {
  if (ActiveIsa() != Isa::kScalar) return avx2::MatMul(x, m, w, y, pool);
  reference::MatMul(x, m, w, y, pool);
}
void RmsNorm(const float* x, const float* weight, int64_t rows, int64_t dim, float eps, float* y) {
  KVFORK_SCALAR_ONLY(RmsNorm(x, weight, rows, dim, eps, y));
}
void Rope(float* x, int64_t num_tokens, int64_t num_heads, int64_t head_dim,
          const int32_t* positions, const float* inv_freq) {
  KVFORK_SCALAR_ONLY(Rope(x, num_tokens, num_heads, head_dim, positions, inv_freq));
}
void SiluMul(const float* gate, const float* up, int64_t n, float* out) {
  KVFORK_SCALAR_ONLY(SiluMul(gate, up, n, out));
}
void AddInPlace(float* y, const float* x, int64_t n) { KVFORK_SCALAR_ONLY(AddInPlace(y, x, n)); }
void Softmax(float* x, int64_t n) { KVFORK_SCALAR_ONLY(Softmax(x, n)); }
void EmbeddingLookup(const MatrixView& table, const int32_t* ids, int64_t n, float* out) {
  KVFORK_SCALAR_ONLY(EmbeddingLookup(table, ids, n, out));
}
int64_t Argmax(const float* x, int64_t n) { KVFORK_SCALAR_ONLY(Argmax(x, n)); }
void WriteKv(const KvLayout& layout, int layer, uint8_t* const* blocks, int64_t start_pos,
             int64_t num_tokens, const float* k, const float* v) {
  KVFORK_SCALAR_ONLY(WriteKv(layout, layer, blocks, start_pos, num_tokens, k, v));
}
void PagedAttention(const KvLayout& layout, int layer, int num_heads, float scale,
                    std::span<const AttentionSeq> seqs, ThreadPool& pool) {
  KVFORK_SCALAR_ONLY(PagedAttention(layout, layer, num_heads, scale, seqs, pool));
}

#undef KVFORK_DISPATCH

}  // namespace kvfork
