// The mixture-of-experts MLP (Qwen3 MoE; Hugging Face's
// Qwen3MoeSparseMoeBlock): a router picks num_experts_per_tok of
// num_experts SwiGLU experts per token and the layer adds their weighted
// sum to the residual stream.
//
// Batch invariance (DESIGN.md invariant 1): the tokens routed to an expert
// are gathered into one contiguous batch and that expert's GEMMs run on it;
// the kernels give each output row the same bits whatever the row count, so
// a token's result does not depend on which other tokens share the batch
// (and so share its experts). Each token's expert outputs are then summed in
// one fixed order: ascending expert index, as Hugging Face's loop over
// experts adds them.
//
// Thread affinity: one thread calls Add at a time (the decoder's); the pool
// runs inside the kernels. Owns scratch sized by the largest batch seen.
// Cost: the router GEMM, then num_experts_per_tok experts' three matrices per
// token; each expert's weights are read once per call however many of the
// batch's tokens chose it. At decode (quantized experts of few rows) every
// active expert's gate and up run as one parallel region and every down as
// another (MatMulGrouped), not one region per expert and matrix.
#pragma once

#include <cstdint>
#include <vector>

#include "core/thread_pool.h"
#include "kernels/ops.h"
#include "model/model_config.h"
#include "model/weights.h"

namespace kvfork {

// One token's routing, as Hugging Face computes it: softmax over the router
// logits in f32, the top k probabilities (a tie goes to the lower expert
// index, where torch.topk leaves the order unspecified), divided by their
// sum (in top-k order) when renormalize (norm_topk_prob). Writes the k
// chosen experts in ascending index order and their weights beside them.
// probs: [num_experts] scratch.
void RouteToken(const float* logits, int64_t num_experts, int64_t k, bool renormalize,
                float* probs, int32_t* experts, float* weights);

class MoeMlp {
 public:
  // x[t] += sum over token t's experts e of weight_e * down_e(silu(gate_e(h[t])) * up_e(h[t])),
  // for t < num_tokens. h, x: [num_tokens, hidden]; L holds the router and
  // the experts (LayerWeights).
  void Add(const ModelConfig& c, const LayerWeights& L, const float* h, int64_t num_tokens,
           float* x, ThreadPool& pool);

 private:
  std::vector<float> logits_;     // [tokens, num_experts] router logits
  std::vector<float> probs_;      // [tokens, num_experts] softmax scratch
  std::vector<int32_t> experts_;  // [tokens, k] chosen experts, ascending
  std::vector<float> weights_;    // [tokens, k] their weights
  std::vector<int64_t> slot_;     // [tokens, k] row of (token, j) in the grouped batch
  std::vector<int64_t> row_token_;  // [tokens * k] the token of each grouped row
  std::vector<int64_t> first_;    // [num_experts + 1] first grouped row of each expert
  std::vector<float> in_;         // [tokens * k, hidden] h rows grouped by expert
  std::vector<float> gate_;       // [tokens * k, moe_intermediate]
  std::vector<float> up_;         // [tokens * k, moe_intermediate]
  std::vector<float> out_;        // [tokens * k, hidden] expert outputs
  std::vector<MatMulGroup> groups_;  // one MatMulGrouped call's experts
};

}  // namespace kvfork
