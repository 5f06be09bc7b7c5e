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
    for (int64_t i = 0; i < T * k; ++i) slot_[i] = next[experts_[i]]++;
  }
  pool.ParallelForRows(T, [&](int64_t r0, int64_t r1) {
    for (int64_t i = r0 * k; i < r1 * k; ++i)
      std::memcpy(in_.data() + slot_[i] * H, h + (i / k) * H, H * sizeof(float));
  });
  if (T == 1) {
    // Decode of one token: its k experts' gate and up products share the
    // input row, so they stream as one MatMulShared pass (one sync instead
    // of k); MatMulShared + SiluMul has MatMulSiluMul's bits.
    targets_.clear();
    for (int64_t j = 0; j < k; ++j) {
      const int32_t e = experts_[j];
      const int64_t r = slot_[j];
      targets_.push_back({L.expert_gate[e], gate_.data() + r * I});
      targets_.push_back({L.expert_up[e], up_.data() + r * I});
    }
    MatMulShared(h, 1, targets_, pool);
    SiluMul(gate_.data(), up_.data(), k * I, gate_.data());
  }
  for (int64_t e = 0; e < E; ++e) {
    const int64_t r = first_[e], n = first_[e + 1] - first_[e];
    if (n == 0) continue;
    if (T > 1)
      MatMulSiluMul(in_.data() + r * H, n, {L.expert_gate[e], gate_.data() + r * I},
                    {L.expert_up[e], up_.data() + r * I}, pool);
    MatMul(gate_.data() + r * I, n, L.expert_down[e], out_.data() + r * H, pool);
  }
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
