#include "model/moe.h"

#include <algorithm>
#include <cstring>
#include <numeric>

#include "kernels/ops.h"
#include "kernels/reference.h"

namespace kvfork {

void RouteToken(const float* logits, int64_t num_experts, int64_t k, bool renormalize,
                float* probs, int32_t* experts, float* weights) {
  // softmax(dim=-1, dtype=float): exp(x - max) / sum with the sum in index
  // order, which the scalar reference kernel computes (the ISA kernels of
  // ops.h sum in lanes, another order than torch's on a CPU).
  std::copy(logits, logits + num_experts, probs);
  reference::Softmax(probs, num_experts);
  // Top k by probability, ties to the lower index: k passes of a max scan
  // (k and num_experts are small; 8 of 128 for Qwen3-30B-A3B).
  int32_t order[kMaxExpertsPerToken];
  for (int64_t j = 0; j < k; ++j) {
    int32_t best = -1;
    for (int64_t e = 0; e < num_experts; ++e) {
      bool taken = false;
      for (int64_t i = 0; i < j; ++i) taken |= order[i] == e;
      if (!taken && (best < 0 || probs[e] > probs[best])) best = static_cast<int32_t>(e);
    }
    order[j] = best;
  }
  float top_sum = 0.0f;
  for (int64_t j = 0; j < k; ++j) top_sum += probs[order[j]];  // torch sums topk's order
  std::sort(order, order + k);
  for (int64_t j = 0; j < k; ++j) {
    experts[j] = order[j];
    weights[j] = renormalize ? probs[order[j]] / top_sum : probs[order[j]];
  }
}

void MoeMlp::Add(const ModelConfig& c, const LayerWeights& L, const float* h, int64_t T, float* x,
                 ThreadPool& pool) {
  const int64_t E = c.num_experts, k = c.num_experts_per_tok;
  const int64_t H = c.hidden_size, I = c.moe_intermediate_size;
  logits_.resize(T * E);
  probs_.resize(T * E);
  experts_.resize(T * k);
  weights_.resize(T * k);
  slot_.resize(T * k);
  row_token_.resize(T * k);
  first_.assign(E + 1, 0);
  in_.resize(T * k * H);
  gate_.resize(T * k * I);
  up_.resize(T * k * I);
  out_.resize(T * k * H);

  MatMul(h, T, L.router, logits_.data(), pool);
  pool.ParallelForRows(T, [&](int64_t r0, int64_t r1) {
    for (int64_t t = r0; t < r1; ++t)
      RouteToken(logits_.data() + t * E, E, k, c.norm_topk_prob, probs_.data() + t * E,
                 experts_.data() + t * k, weights_.data() + t * k);
  });
  // Group the (token, expert) pairs by expert, tokens in batch order: expert
  // e's rows are [first_[e], first_[e + 1]).
  for (int64_t i = 0; i < T * k; ++i) ++first_[experts_[i] + 1];
  std::partial_sum(first_.begin(), first_.end(), first_.begin());
  {
    std::vector<int64_t> next(first_.begin(), first_.end() - 1);
    for (int64_t i = 0; i < T * k; ++i) {
      slot_[i] = next[experts_[i]]++;
      row_token_[slot_[i]] = i / k;
    }
  }
  pool.ParallelForRows(T, [&](int64_t r0, int64_t r1) {
    for (int64_t i = r0 * k; i < r1 * k; ++i)
      std::memcpy(in_.data() + slot_[i] * H, h + (i / k) * H, H * sizeof(float));
  });
  // An expert's input rows: a lone token's row of h itself (so at decode
  // every expert of the token shares one x, quantized once), else its
  // gathered rows.
  auto expert_x = [&](int64_t e) {
    const int64_t r = first_[e];
    return first_[e + 1] - r == 1 ? h + row_token_[r] * H : in_.data() + r * H;
  };
  // gate and up: experts with few rows (every expert at decode) in one
  // MatMulGrouped, so the quantized ones stream as one pass with one sync;
  // those with more rows (prefill) one MatMulSiluMul each. Both have the
  // bits of MatMulShared + SiluMul per expert (ops.h).
  groups_.clear();
  for (int64_t e = 0; e < E; ++e) {
    const int64_t r = first_[e], n = first_[e + 1] - first_[e];
    if (n == 0) continue;
    if (n <= kMatMulGroupedMaxRows) {
      groups_.push_back({expert_x(e), n, {L.expert_gate[e], gate_.data() + r * I}});
      groups_.push_back({expert_x(e), n, {L.expert_up[e], up_.data() + r * I}});
    } else {
      MatMulSiluMul(expert_x(e), n, {L.expert_gate[e], gate_.data() + r * I},
                    {L.expert_up[e], up_.data() + r * I}, pool);
    }
  }
  MatMulGrouped(groups_, pool);
  for (size_t i = 0; i < groups_.size(); i += 2) {
    float* g = groups_[i].target.y;
    SiluMul(g, groups_[i + 1].target.y, groups_[i].m * I, g);
  }
  // down: every expert's rows in one MatMulGrouped.
  groups_.clear();
  for (int64_t e = 0; e < E; ++e) {
    const int64_t r = first_[e], n = first_[e + 1] - first_[e];
    if (n > 0) groups_.push_back({gate_.data() + r * I, n, {L.expert_down[e], out_.data() + r * H}});
  }
  MatMulGrouped(groups_, pool);
  // Per token: sum of weight * output over its experts in ascending index
  // order, then the residual add (Hugging Face's index_add_ into zeros).
  pool.ParallelForRows(T, [&](int64_t r0, int64_t r1) {
    std::vector<float> acc(H);
    for (int64_t t = r0; t < r1; ++t) {
      std::fill(acc.begin(), acc.end(), 0.0f);
      for (int64_t j = 0; j < k; ++j) {
        const float w = weights_[t * k + j];
        const float* y = out_.data() + slot_[t * k + j] * H;
        for (int64_t d = 0; d < H; ++d) acc[d] += y[d] * w;
      }
      AddInPlace(x + t * H, acc.data(), H);
    }
  });
}

}  // namespace kvfork
