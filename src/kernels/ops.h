// The kernel API the model and the KV cache call. Each op checks nothing
// about input (callers validate shapes) and dispatches once per call on
// ActiveIsa() (core/cpu_features.h) to one implementation per ISA.
//
// Batch invariance (DESIGN.md invariant 1): for a given ISA, every output
// element is computed with one fixed reduction order that does not depend on
// the number of rows M, on how a sequence is chunked, or on the thread count.
// Tests compare bits between M=1 and M=N, and between 1 and N threads.
#pragma once

#include <cstdint>
#include <span>

#include "core/dtype.h"
#include "core/thread_pool.h"
#include "kernels/kv_layout.h"

namespace kvfork {

// A row-major matrix [rows, cols] in memory that the caller owns. For a
// block-quantized dtype each row is RowBytes(dtype, cols) bytes of blocks,
// scales inside (core/dtype.h).
struct MatrixView {
  DType dtype = DType::kF32;  // f16 is converted at load
  const void* data = nullptr;
  int64_t rows = 0;
  int64_t cols = 0;

  size_t row_bytes() const { return RowBytes(dtype, cols); }
  const uint8_t* row(int64_t r) const {
    return static_cast<const uint8_t*>(data) + static_cast<size_t>(r) * row_bytes();
  }
};

// y[m, n] = sum_k x[m, k] * w[n, k]  (x: [m, w.cols] f32, y: [m, w.rows] f32).
// With bf16 weights each x element is rounded to bf16 first (as llama.cpp
// does) and products are accumulated in f32; with f32 weights it is f32 FMA.
// With block-quantized weights (Q8_0, Q4_0/1, Q5_0/1, Q4_K, Q5_K, Q6_K) each
// x row is quantized to int8 per block as llama.cpp does (q8_0 against the
// 32-blocks, q8_K against the K formats; kernels/quant.h) and the products are
// exact integer sums scaled per block (quant_matmul.h). Every format runs on
// every level; the SIMD kernels (quant_isa.h) are AVX512-VNNI for all eight,
// AVX2 for Q8_0, Q4_0, Q4_K, Q5_K and Q6_K, and the scalar one elsewhere (AVX2
// without those, and the scalar level). The AMX level runs the AVX-512 ones.
void MatMul(const float* x, int64_t m, const MatrixView& w, float* y, ThreadPool& pool);

// One weight matrix of a MatMulShared call and where its product goes.
struct MatMulTarget {
  MatrixView w;
  float* y = nullptr;  // [m, w.rows]
};

// MatMul(x, m, t.w, t.y) for every target t, with the same bits (invariant 1),
// but x is rounded and packed once and the rows of all the matrices are
// shared among the threads in one ParallelFor: at decode, where every
// projection is a short read of its weights, q/k/v (or gate/up) then stream
// as one matrix, with one sync instead of three. Every w has x's cols;
// consecutive targets of one dtype share a pass, a change of dtype starts
// another.
void MatMulShared(const float* x, int64_t m, std::span<const MatMulTarget> targets,
                  ThreadPool& pool);

// One product of a MatMulGrouped call: its own input rows and its matrix.
struct MatMulGroup {
  const float* x = nullptr;  // [m, target.w.cols]
  int64_t m = 0;
  MatMulTarget target;
};

// Rows up to which a group of block-quantized weights joins MatMulGrouped's
// one shared pass (a decode step's few rows, whose products stream W).
inline constexpr int64_t kMatMulGroupedMaxRows = 4;

// MatMul(g.x, g.m, g.target.w, g.target.y) for every group g, with the same
// bits (invariant 1). A mixture of experts' decode multiplies each active
// expert's matrices by that expert's few rows; the groups of block-quantized
// weights with m <= kMatMulGroupedMaxRows share one ParallelFor over all
// their W rows (one sync for every expert instead of one per expert), and
// groups with the same x and m quantize it once. Every other group runs as
// its own MatMul.
void MatMulGrouped(std::span<const MatMulGroup> groups, ThreadPool& pool);

// The MLP's first half: gate.y = silu(x * gate.w^T) * (x * up.w^T), with the
// bits of MatMulShared over {gate, up} followed by SiluMul. up.y is scratch the
// call may overwrite: levels that run it as those two steps keep up's product
// there, while the AMX level applies the SiLU to each pair of C tiles before
// storing them, so neither product goes through memory. gate.w and up.w have
// the same shape.
void MatMulSiluMul(const float* x, int64_t m, const MatMulTarget& gate, const MatMulTarget& up,
                   ThreadPool& pool);

// A residual branch's last matrix: sum += x * product.w^T, with the bits of
// MatMul into product.y followed by AddInPlace(sum, product.y). product.y is
// scratch the call may overwrite: levels that run it as those two steps keep
// the product there, while the AMX level adds each C tile into sum as it
// stores it, so the product never goes through memory.
void MatMulAddTo(const float* x, int64_t m, const MatMulTarget& product, float* sum,
                 ThreadPool& pool);

// y[r] = x[r] / sqrt(mean(x[r]^2) + eps) * weight, for rows r < rows. In place is fine.
void RmsNorm(const float* x, const float* weight, int64_t rows, int64_t dim, float eps, float* y);

// Rotary embedding in Hugging Face's rotate-half layout, in two steps so a
// forward pass computes the angles once for all its layers. RopeAngles writes
// cos[t * half + i] and sin[t * half + i] for the angle positions[t] *
// inv_freq[i] (half = head_dim / 2; the angle in double, so large positions
// keep their precision). RopeRotate then rotates x in place:
// x: [num_tokens, num_heads, head_dim]; for pair i < half, (x[i], x[i + half])
// by token t's angle i, as the reference's mul/sub on every ISA level.
void RopeAngles(const int32_t* positions, int64_t num_tokens, const float* inv_freq, int64_t half,
                float* cos, float* sin);
void RopeRotate(float* x, int64_t num_tokens, int64_t num_heads, int64_t head_dim,
                const float* cos, const float* sin);

// out[i] = silu(gate[i]) * up[i]. out may alias gate.
void SiluMul(const float* gate, const float* up, int64_t n, float* out);

// out[i] = gelu_tanh(gate[i]) * up[i]: GELU's tanh approximation as
// PyTorch's gelu(approximate="tanh") (Gemma's "gelu_pytorch_tanh"), in f32
// with std::tanh. One portable version on every level (each element alone,
// so batch invariant). out may alias gate.
void GeluTanhMul(const float* gate, const float* up, int64_t n, float* out);

// x[i] = cap * tanh(x[i] / cap) (final logit softcapping), as llama.cpp
// computes it: x * (1 / cap), tanh, * cap, in f32.
void SoftCap(float* x, int64_t n, float cap);

// y[i] += x[i]
void AddInPlace(float* y, const float* x, int64_t n);

// x = softmax(x), in place.
void Softmax(float* x, int64_t n);

// out[t, :] = table[ids[t], :] as f32  (table: [vocab, dim]; a quantized
// table is dequantized row by row with DequantizeRow, kernels/quant.h).
void EmbeddingLookup(const MatrixView& table, const int32_t* ids, int64_t n, float* out);

// Index of the largest value; the lowest index wins ties.
int64_t Argmax(const float* x, int64_t n);

// Writes K and V of num_tokens consecutive positions starting at start_pos
// into a sequence's blocks for one layer, converting to the layout's dtype
// (int8: one f32 scale per token and head, absmax / 127, round to nearest
// even; q4 / q4r: kernels/kv_q4.h, the same code on every level;
// deterministic so recomputed and cached tokens agree bit for bit).
// blocks[i] is the base address of the sequence's i-th block.
// k, v: [num_tokens, num_kv_heads, head_dim] f32.
void WriteKv(const KvLayout& layout, int layer, uint8_t* const* blocks, int64_t start_pos,
             int64_t num_tokens, const float* k, const float* v);

// One sequence's share of an attention call.
struct AttentionSeq {
  const float* q = nullptr;  // [num_tokens, num_heads, head_dim]
  float* out = nullptr;      // [num_tokens, num_heads, head_dim]
  int64_t num_tokens = 0;    // new tokens (queries)
  int64_t start_pos = 0;     // position of the first query token
  uint8_t* const* blocks = nullptr;  // the sequence's block table (base addresses)
  // The layer's sliding window, 0 = none: the query at position p sees the
  // keys at positions k with p - k < window (Hugging Face's
  // sliding_window_overlay, kv_idx > q_idx - window; llama.cpp masks
  // p - k >= n_swa), so `window` keys counting its own.
  int64_t window = 0;
};

// The first key position the query at `pos` attends to under `window`.
inline int64_t AttentionWindowStart(int64_t pos, int64_t window) {
  return window > 0 && pos >= window ? pos - window + 1 : 0;
}

// What PagedAttention supports: its SIMD paths keep q, the accumulator and
// one block's scores on the stack. Model configs (head_dim, heads per KV
// head) and --kv-block-size are checked against these where they are set.
inline constexpr int kMaxAttentionHeadDim = 512;
inline constexpr int kMaxAttentionBlockSize = 1024;
inline constexpr int kMaxAttentionGroup = 16;  // query heads per KV head

// Causal attention over a block table: query t attends to positions
// [AttentionWindowStart(start_pos + t, window), start_pos + t]. K/V of the
// new tokens must already be written (and the blocks of the window, at
// least). Keys are reduced in position order with an online softmax, the same
// for every chunking: keys outside a row's window are masked to -inf, and a
// block (or key group) that a row sees none of leaves its state exactly as it
// was, so a row's bits do not depend on which rows share its tile. GQA: query head h reads kv head h / (num_heads / num_kv_heads).
// q4r: the queries are rotated into a scratch copy and each output row is
// rotated back in place (kv_layout.h), around the level's q4 kernel.
void PagedAttention(const KvLayout& layout, int layer, int num_heads, float scale,
                    std::span<const AttentionSeq> seqs, ThreadPool& pool);

}  // namespace kvfork
