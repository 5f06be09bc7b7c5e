// Dispatch of every op to its ISA implementation, once per call, on
// ActiveIsa(): kScalar runs reference.cc, kAvx2 the *_avx2.cc files, kAvx512
// the *_avx512.cc files, kAmx the *_amx.cc files for MatMul and
// PagedAttention and the *_avx512.cc files for the rest (ops_isa.h).
// Block-quantized weights go to quant_matmul.cc on every level (its kernels
// are chosen there per ISA and format, quant_isa.h).
#include "kernels/ops.h"

#include <algorithm>
#include <cmath>
#include <new>

#include "core/cpu_features.h"
#include "kernels/kv_q4.h"
#include "kernels/kv_q4_isa.h"
#include "kernels/ops_isa.h"
#include "kernels/quant.h"
#include "kernels/quant_matmul.h"
#include "kernels/reference.h"
#include "kernels/row_tasks.h"
#include "kernels/scratch.h"

namespace kvfork {

const char* KvDTypeName(KvDType t) {
  switch (t) {
    case KvDType::kBf16:
      return "bf16";
    case KvDType::kF32:
      return "f32";
    case KvDType::kInt8:
      return "int8";
    case KvDType::kQ4:
      return "q4";
    case KvDType::kQ4r:
      return "q4r";
  }
  return "?";
}

#define KVFORK_DISPATCH(call) \
  switch (ActiveIsa()) {      \
    case Isa::kAmx:           \
    case Isa::kAvx512:        \
      return avx512::call;    \
    case Isa::kAvx2:          \
      return avx2::call;      \
    case Isa::kScalar:        \
      break;                  \
  }                           \
  return reference::call

namespace {

// The active level's q4 row functions: SIMD copies with the portable ones'
// bits (kv_q4_isa.h), so the level that wrote a block does not matter.
Q4RowKernels ActiveQ4RowKernels() {
  switch (ActiveIsa()) {
    case Isa::kAmx:
    case Isa::kAvx512:
      return {avx512::QuantizeQ4Row, avx512::HadamardRotate};
    case Isa::kAvx2:
      return {avx2::QuantizeQ4Row, avx2::HadamardRotate};
    case Isa::kScalar:
      break;
  }
  return {};
}

// One ISA-level MatMulShared call (1..kMaxMatMulTargets targets of one dtype).
void MatMulSharedRun(const float* x, int64_t m, std::span<const MatMulTarget> run,
                     ThreadPool& pool) {
  if (ActiveIsa() == Isa::kAmx) return amx::MatMulShared(x, m, run, pool);
  KVFORK_DISPATCH(MatMulShared(x, m, run, pool));
}

void PagedAttentionLevel(const KvLayout& layout, int layer, int num_heads, float scale,
                         std::span<const AttentionSeq> seqs, ThreadPool& pool) {
  if (ActiveIsa() == Isa::kAmx)
    return amx::PagedAttention(layout, layer, num_heads, scale, seqs, pool);
  KVFORK_DISPATCH(PagedAttention(layout, layer, num_heads, scale, seqs, pool));
}

// q4r: its K and V are stored rotated by H (kv_q4.h), so each query row is
// rotated once (Hq . Hk = q . k), the level's q4 kernel runs on the rotated
// queries, and each output row is rotated back (H sum p_j H v_j = sum p_j
// v_j). Row by row, the same on every level and for any batching.
void PagedAttentionRotated(const KvLayout& layout, int layer, int num_heads, float scale,
                           std::span<const AttentionSeq> seqs, ThreadPool& pool) {
  const int hd = layout.head_dim;
  int64_t rows = 0;
  for (const AttentionSeq& s : seqs) rows += s.num_tokens * num_heads;
  if (rows == 0) return;
  const size_t seq_bytes = (seqs.size() * sizeof(AttentionSeq) + 63) / 64 * 64;
  auto* mem = static_cast<uint8_t*>(
      ThreadScratch(kScratchDispatch, seq_bytes + static_cast<size_t>(rows) * hd * sizeof(float)));
  auto* rotated = reinterpret_cast<AttentionSeq*>(mem);
  float* q = reinterpret_cast<float*>(mem + seq_bytes);  // [rows, head_dim]
  int64_t row0 = 0;
  for (size_t i = 0; i < seqs.size(); ++i) {
    new (&rotated[i]) AttentionSeq(seqs[i]);
    rotated[i].q = q + row0 * hd;
    row0 += seqs[i].num_tokens * num_heads;
  }
  const auto rotate = ActiveQ4RowKernels().rotate;
  const auto rotate_rows = [&](bool out) {
    for (size_t i = 0; i < seqs.size(); ++i) {
      const AttentionSeq& s = seqs[i];
      float* dst = out ? s.out : q + (rotated[i].q - q);
      if (!out) std::copy(s.q, s.q + s.num_tokens * num_heads * hd, dst);
      pool.ParallelForRows(s.num_tokens * num_heads, [&](int64_t r0, int64_t r1) {
        for (int64_t r = r0; r < r1; ++r) rotate(dst + r * hd, hd);
      });
    }
  };
  rotate_rows(false);
  PagedAttentionLevel(layout, layer, num_heads, scale,
                      std::span<const AttentionSeq>(rotated, seqs.size()), pool);
  rotate_rows(true);
}

}  // namespace

void MatMul(const float* x, int64_t m, const MatrixView& w, float* y, ThreadPool& pool) {
  const MatMulTarget target{w, y};
  MatMulShared(x, m, std::span<const MatMulTarget>(&target, 1), pool);
}

void MatMulShared(const float* x, int64_t m, std::span<const MatMulTarget> targets,
                  ThreadPool& pool) {
  if (m <= 0) return;
  for (const MatMulTarget& t : targets)
    KVFORK_CHECK_MSG(t.w.cols == targets[0].w.cols, "MatMulShared: matrices of different cols");
  size_t i = 0;
  while (i < targets.size()) {
    if (IsQuantized(targets[i].w.dtype)) {
      // Quantized weights of any formats in a row share one quantized x.
      size_t j = i + 1;
      while (j < targets.size() && IsQuantized(targets[j].w.dtype)) ++j;
      QuantMatMulShared(x, m, targets.subspan(i, j - i), pool);
      i = j;
      continue;
    }
    // The longest run from i that one ISA-level call takes.
    size_t j = i + 1;
    while (j < targets.size() && j - i < static_cast<size_t>(kMaxMatMulTargets) &&
           targets[j].w.dtype == targets[i].w.dtype) {
      ++j;
    }
    MatMulSharedRun(x, m, targets.subspan(i, j - i), pool);
    i = j;
  }
}
void MatMulGrouped(std::span<const MatMulGroup> groups, ThreadPool& pool) {
  // The groups outside the quantized pass: each run of consecutive ones with
  // one x (an expert's gate and up; every expert of one token at decode) as
  // one MatMulShared, as the model would call it without grouping.
  size_t i = 0;
  while (i < groups.size()) {
    const MatMulGroup& first = groups[i];
    if (InQuantGroupedPass(first)) {
      ++i;
      continue;
    }
    MatMulTarget run[kMaxMatMulTargets];
    size_t count = 0;
    while (i < groups.size() && count < static_cast<size_t>(kMaxMatMulTargets) &&
           !InQuantGroupedPass(groups[i]) && groups[i].x == first.x && groups[i].m == first.m &&
           groups[i].target.w.cols == first.target.w.cols) {
      run[count++] = groups[i++].target;
    }
    MatMulShared(first.x, first.m, std::span<const MatMulTarget>(run, count), pool);
  }
  QuantMatMulGrouped(groups, pool);
}
void MatMulSiluMul(const float* x, int64_t m, const MatMulTarget& gate, const MatMulTarget& up,
                   ThreadPool& pool) {
  if (m <= 0) return;
  KVFORK_CHECK_MSG(gate.w.rows == up.w.rows && gate.w.cols == up.w.cols,
                   "MatMulSiluMul: gate and up of different shapes");
  if (ActiveIsa() == Isa::kAmx && gate.w.dtype == DType::kBf16 && up.w.dtype == DType::kBf16)
    return amx::MatMulSiluMul(x, m, gate.w, up.w, gate.y, pool);
  const MatMulTarget both[] = {gate, up};
  MatMulShared(x, m, both, pool);
  const int64_t n = gate.w.rows;
  pool.ParallelForRows(m, [&](int64_t r0, int64_t r1) {
    SiluMul(gate.y + r0 * n, up.y + r0 * n, (r1 - r0) * n, gate.y + r0 * n);
  });
}
void MatMulAddTo(const float* x, int64_t m, const MatMulTarget& product, float* sum,
                 ThreadPool& pool) {
  if (m <= 0) return;
  if (ActiveIsa() == Isa::kAmx && product.w.dtype == DType::kBf16)
    return amx::MatMulAddTo(x, m, product.w, sum, pool);
  MatMul(x, m, product.w, product.y, pool);
  const int64_t n = product.w.rows;
  pool.ParallelForRows(m, [&](int64_t r0, int64_t r1) {
    AddInPlace(sum + r0 * n, product.y + r0 * n, (r1 - r0) * n);
  });
}
void RmsNorm(const float* x, const float* weight, int64_t rows, int64_t dim, float eps, float* y) {
  KVFORK_DISPATCH(RmsNorm(x, weight, rows, dim, eps, y));
}
void RopeAngles(const int32_t* positions, int64_t num_tokens, const float* inv_freq, int64_t half,
                float* cos, float* sin) {
  for (int64_t t = 0; t < num_tokens; ++t) {
    for (int64_t i = 0; i < half; ++i) {
      // The angle in double and its rounding exactly as reference::Rope.
      const double angle = static_cast<double>(positions[t]) * static_cast<double>(inv_freq[i]);
      cos[t * half + i] = static_cast<float>(std::cos(angle));
      sin[t * half + i] = static_cast<float>(std::sin(angle));
    }
  }
}
void RopeRotate(float* x, int64_t num_tokens, int64_t num_heads, int64_t head_dim,
                const float* cos, const float* sin) {
  KVFORK_DISPATCH(RopeRotate(x, num_tokens, num_heads, head_dim, cos, sin));
}
void SiluMul(const float* gate, const float* up, int64_t n, float* out) {
  KVFORK_DISPATCH(SiluMul(gate, up, n, out));
}
void AddInPlace(float* y, const float* x, int64_t n) { KVFORK_DISPATCH(AddInPlace(y, x, n)); }
void GeluTanhMul(const float* gate, const float* up, int64_t n, float* out) {
  // PyTorch's GeluKernel (approximate tanh): kBeta = sqrt(2) * (2 / sqrt(pi)) / 2.
  const float kBeta = 0.7978845608028654f, kKappa = 0.044715f;
  for (int64_t i = 0; i < n; ++i) {
    const float x = gate[i];
    const float inner = kBeta * (x + kKappa * (x * x * x));
    out[i] = 0.5f * x * (1.0f + std::tanh(inner)) * up[i];
  }
}
void SoftCap(float* x, int64_t n, float cap) {
  const float inv = 1.0f / cap;
  for (int64_t i = 0; i < n; ++i) x[i] = std::tanh(x[i] * inv) * cap;
}
void Softmax(float* x, int64_t n) { KVFORK_DISPATCH(Softmax(x, n)); }
void EmbeddingLookup(const MatrixView& table, const int32_t* ids, int64_t n, float* out) {
  if (IsQuantized(table.dtype)) {
    for (int64_t t = 0; t < n; ++t)
      DequantizeRow(table.dtype, table.row(ids[t]), table.cols, out + t * table.cols);
    return;
  }
  KVFORK_DISPATCH(EmbeddingLookup(table, ids, n, out));
}
int64_t Argmax(const float* x, int64_t n) { KVFORK_DISPATCH(Argmax(x, n)); }
void WriteKv(const KvLayout& layout, int layer, uint8_t* const* blocks, int64_t start_pos,
             int64_t num_tokens, const float* k, const float* v) {
  // One row loop on every level, with the level's row functions: the same
  // stored bits everywhere (kv_q4_isa.h).
  if (IsQ4(layout.dtype))
    return WriteKvQ4(layout, layer, blocks, start_pos, num_tokens, k, v, ActiveQ4RowKernels());
  KVFORK_DISPATCH(WriteKv(layout, layer, blocks, start_pos, num_tokens, k, v));
}
void PagedAttention(const KvLayout& layout, int layer, int num_heads, float scale,
                    std::span<const AttentionSeq> seqs, ThreadPool& pool) {
  // The SIMD paths keep q, the accumulator and one block of scores in registers/stack.
  // Invariants: ParseModelConfig and Engine::Create refuse anything beyond.
  KVFORK_CHECK_MSG(layout.head_dim <= kMaxAttentionHeadDim, "PagedAttention: head_dim above 512");
  KVFORK_CHECK_MSG(layout.block_size <= kMaxAttentionBlockSize,
                   "PagedAttention: block_size above 1024");
  KVFORK_CHECK_MSG(
      num_heads % layout.num_kv_heads == 0 && num_heads / layout.num_kv_heads <= kMaxAttentionGroup,
      "PagedAttention: num_heads must be a multiple of num_kv_heads, at most 16x");
  KVFORK_CHECK_MSG(!IsQ4(layout.dtype) || layout.head_dim % kQ4Group == 0,
                   "PagedAttention: q4 KV needs head_dim a multiple of 32");
  if (layout.dtype == KvDType::kQ4r)
    return PagedAttentionRotated(layout, layer, num_heads, scale, seqs, pool);
  PagedAttentionLevel(layout, layer, num_heads, scale, seqs, pool);
}

#undef KVFORK_DISPATCH

}  // namespace kvfork
