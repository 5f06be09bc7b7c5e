// The decoder shared by every architecture: a pre-norm transformer with GQA,
// rotary embeddings and a gated MLP (SiLU, or Gemma's GELU-tanh; or a
// mixture of experts, model/moe.h), per-layer
// sliding windows, and Gemma's output norms; arch.h supplies the differences.
//
// Thread affinity: Forward from one thread at a time; it owns scratch
// buffers sized by the largest batch seen. Cost: one pass over every weight
// per call, plus attention over each sequence's context.
#pragma once

#include <memory>
#include <vector>

#include "kernels/ops.h"
#include "model/arch.h"
#include "model/model.h"
#include "model/moe.h"
#include "model/weights.h"

namespace kvfork {

class Decoder final : public Model {
 public:
  Decoder(ModelConfig config, const ArchSpec& arch, std::unique_ptr<ModelWeights> weights);

  const ModelConfig& config() const override { return config_; }
  const ModelWeights& weights() const { return *weights_; }

  Status Forward(const ForwardBatch& batch, const KvLayout& layout, ThreadPool& pool,
                 std::vector<float>* logits) override;

 private:
  Status Validate(const ForwardBatch& batch, const KvLayout& layout) const;
  // x_ += in * w^T, the product RMS-normed by out_norm first where it is
  // not null (Gemma's post-attention / post-feedforward norms).
  void AddBranch(const float* in, int64_t T, const MatrixView& w, const float* out_norm,
                 ThreadPool& pool);

  ModelConfig config_;
  const ArchSpec& arch_;
  std::unique_ptr<ModelWeights> weights_;
  std::vector<float> inv_freq_;  // [head_dim / 2]
  std::vector<float> local_inv_freq_;  // [head_dim / 2] sliding layers' (Gemma 3); else empty
  KvGroupMap kv_map_;  // each layer's group and plane when the cache keeps layer groups

  // Scratch, resized per call (capacity kept).
  std::vector<int32_t> positions_;       // [tokens]
  std::vector<float> rope_cos_, rope_sin_;  // [tokens, head_dim / 2] RoPE angles
  std::vector<float> local_cos_, local_sin_;  // the same for local_inv_freq_
  std::vector<float> x_;                 // [tokens, hidden] residual stream
  std::vector<float> h_;                 // [tokens, hidden] normed
  std::vector<float> q_;                 // [tokens, num_heads, head_dim]
  std::vector<float> k_;                 // [tokens, num_kv_heads, head_dim]
  std::vector<float> v_;                 // [tokens, num_kv_heads, head_dim]
  std::vector<float> attn_;              // [tokens, num_heads, head_dim]
  std::vector<float> gate_;              // [tokens, intermediate]
  std::vector<float> up_;                // [tokens, intermediate]
  std::vector<float> out_;               // [tokens, hidden]
  std::vector<float> rows_;              // [logit rows, hidden]
  std::vector<AttentionSeq> attn_seqs_;  // [sequences]
  MoeMlp moe_;                           // the experts' scratch
};

}  // namespace kvfork
