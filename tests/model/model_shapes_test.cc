// make-model's real shapes of issue 24's families: each config is the
// published one (the numbers below are the Hugging Face config.json's), and
// the tensor table it implies has the published parameter count where we
// know it exactly. Config only: the real weights are gigabytes.
#include <gtest/gtest.h>

#include "model/arch.h"
#include "model/random_model.h"
#include "model/weights.h"

namespace kvfork {
namespace {

ModelConfig Config(Architecture arch, const char* shape) {
  RandomModelOptions o;
  o.arch = arch;
  o.shape = shape;
  o.rope_scaling = std::nullopt;
  auto c = RandomModelConfig(o);
  EXPECT_TRUE(c.ok()) << c.status().ToString();
  return c.ok() ? *c : ModelConfig();
}

int64_t Params(const ModelConfig& c) {
  int64_t n = 0;
  for (const ExpectedTensor& t : ExpectedTensors(c, ArchFor(c.arch))) {
    int64_t e = 1;
    for (int64_t d : t.shape) e *= d;
    n += e;
  }
  return n;
}

TEST(ModelShapes, Qwen25HalfB) {
  const ModelConfig c = Config(Architecture::kQwen2, "qwen2.5-0.5b");
  EXPECT_EQ(c.hidden_size, 896);
  EXPECT_EQ(c.num_heads, 14);
  EXPECT_EQ(c.num_kv_heads, 2);
  EXPECT_EQ(c.head_dim, 64);
  EXPECT_TRUE(c.tie_word_embeddings);
  EXPECT_EQ(Params(c), 494032768);  // Qwen2.5-0.5B's 0.49B, q/k/v biases included
}

TEST(ModelShapes, SmolLM3ThreeB) {
  const ModelConfig c = Config(Architecture::kSmolLM3, "smollm3-3b");
  EXPECT_EQ(c.num_layers, 36);
  EXPECT_EQ(c.head_dim, 128);
  EXPECT_EQ(c.vocab_size, 128256);
  ASSERT_EQ(c.layer_uses_rope.size(), 36u);
  int no_rope = 0;
  for (int64_t l = 0; l < 36; ++l) no_rope += c.LayerUsesRope(l) ? 0 : 1;
  EXPECT_EQ(no_rope, 9);  // layers 3, 7, ..., 35
  EXPECT_FALSE(c.LayerUsesRope(35));
}

TEST(ModelShapes, Phi4Mini) {
  const ModelConfig c = Config(Architecture::kPhi3, "phi-4-mini");
  EXPECT_EQ(c.hidden_size, 3072);
  EXPECT_EQ(c.num_heads, 24);
  EXPECT_EQ(c.num_kv_heads, 8);
  EXPECT_EQ(c.head_dim, 128);
  EXPECT_EQ(c.RotaryDim(), 96);  // partial_rotary_factor 0.75
  ASSERT_EQ(c.rope_scaling.type, RopeScaling::Type::kLongRope);
  EXPECT_EQ(c.rope_scaling.original_max_position_embeddings, 4096);
  EXPECT_EQ(c.rope_scaling.short_factor.size(), 48u);
  EXPECT_EQ(c.rope_scaling.long_factor.size(), 48u);
  // Fused: 6 tensors a layer, the qkv one [3072 + 2 * 1024, 3072].
  const std::vector<ExpectedTensor> t = ExpectedTensors(c, ArchFor(c.arch));
  EXPECT_EQ(t.size(), 1 + 32 * 6 + 1u);
  EXPECT_EQ(t[2].gguf_name, "blk.0.attn_qkv.weight");
  EXPECT_EQ(t[2].shape, (std::vector<int64_t>{5120, 3072}));
  EXPECT_NEAR(static_cast<double>(Params(c)), 3.84e9, 0.01e9);  // "3.8B"
}

}  // namespace
}  // namespace kvfork
