// The mixture-of-experts pieces alone: RouteToken against Hugging Face's
// routing worked by hand, and Qwen3MoeConfig's fields (defaults, the sparse
// layer pattern, the errors naming each field).
#include "model/moe.h"

#include <cmath>

#include <gtest/gtest.h>

#include "model/model_config.h"
#include "model/random_model.h"
#include "model/weights.h"

namespace kvfork {
namespace {

struct Routed {
  std::vector<int32_t> experts;
  std::vector<float> weights;
};

Routed Route(std::vector<float> logits, int64_t k, bool renormalize) {
  std::vector<float> probs(logits.size());
  Routed r{std::vector<int32_t>(k), std::vector<float>(k)};
  RouteToken(logits.data(), static_cast<int64_t>(logits.size()), k, renormalize, probs.data(),
             r.experts.data(), r.weights.data());
  return r;
}

TEST(RouteToken, SoftmaxTopKInAscendingExpertOrder) {
  // softmax([0, 3, 1, 2]) = e^x / (1 + e + e^2 + e^3); top 2 are experts 1 and 3.
  const double z = 1 + std::exp(1.0) + std::exp(2.0) + std::exp(3.0);
  Routed r = Route({0, 3, 1, 2}, 2, false);
  EXPECT_EQ(r.experts, (std::vector<int32_t>{1, 3}));
  EXPECT_NEAR(r.weights[0], std::exp(3.0) / z, 1e-6);
  EXPECT_NEAR(r.weights[1], std::exp(2.0) / z, 1e-6);
  // norm_topk_prob: divided by their sum, so e^3 / (e^3 + e^2).
  r = Route({0, 3, 1, 2}, 2, true);
  EXPECT_EQ(r.experts, (std::vector<int32_t>{1, 3}));
  EXPECT_NEAR(r.weights[0], std::exp(1.0) / (1 + std::exp(1.0)), 1e-6);
  EXPECT_NEAR(r.weights[0] + r.weights[1], 1.0, 1e-6);
}

TEST(RouteToken, TiesGoToTheLowerExpertIndex) {
  // Experts 2, 4 and 5 tie for the top; k = 2 takes 2 and 4.
  Routed r = Route({0, 1, 5, 1, 5, 5}, 2, true);
  EXPECT_EQ(r.experts, (std::vector<int32_t>{2, 4}));
  EXPECT_EQ(r.weights[0], r.weights[1]);
  EXPECT_EQ(r.weights[0], 0.5f);
  // All equal: the first k.
  r = Route({1, 1, 1, 1, 1, 1, 1, 1}, 3, false);
  EXPECT_EQ(r.experts, (std::vector<int32_t>{0, 1, 2}));
  EXPECT_EQ(r.weights[0], 0.125f);
}

TEST(RouteToken, LargeLogitsDoNotOverflow) {
  Routed r = Route({1000, -1000, 999, 0}, 2, true);
  EXPECT_EQ(r.experts, (std::vector<int32_t>{0, 2}));
  EXPECT_NEAR(r.weights[0], 1 / (1 + std::exp(-1.0)), 1e-6);
  EXPECT_TRUE(std::isfinite(r.weights[1]));
}

const char* kMoe = R"({
  "architectures": ["Qwen3MoeForCausalLM"], "vocab_size": 1000, "hidden_size": 64,
  "intermediate_size": 128, "num_hidden_layers": 4, "num_attention_heads": 4,
  "num_key_value_heads": 2, "head_dim": 16, "num_experts": 8, "num_experts_per_tok": 2,
  "moe_intermediate_size": 32, "norm_topk_prob": true EXTRA})";

std::string Config(const std::string& extra) {
  std::string s = kMoe;
  s.replace(s.find("EXTRA"), 5, extra);
  return s;
}

TEST(Qwen3MoeConfig, ParsesExpertsAndSparseLayers) {
  auto c = ParseModelConfig(Config(""), "config.json");
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->arch, Architecture::kQwen3Moe);
  EXPECT_EQ(c->num_experts, 8);
  EXPECT_EQ(c->num_experts_per_tok, 2);
  EXPECT_EQ(c->moe_intermediate_size, 32);
  EXPECT_TRUE(c->norm_topk_prob);
  for (int64_t l = 0; l < 4; ++l) EXPECT_TRUE(c->LayerIsMoe(l)) << l;
  // decoder_sparse_step 2: layers 1 and 3; mlp_only_layers drops 3.
  c = ParseModelConfig(Config(R"(, "decoder_sparse_step": 2, "mlp_only_layers": [3])"),
                       "config.json");
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_FALSE(c->LayerIsMoe(0));
  EXPECT_TRUE(c->LayerIsMoe(1));
  EXPECT_FALSE(c->LayerIsMoe(2));
  EXPECT_FALSE(c->LayerIsMoe(3));
  // Qwen3MoeConfig's defaults: 128 experts, 8 per token, 768 wide, no
  // renormalization; head_dim hidden / heads.
  c = ParseModelConfig(R"({"architectures": ["Qwen3MoeForCausalLM"], "vocab_size": 10,
      "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 1,
      "num_attention_heads": 4})",
                       "config.json");
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->num_experts, 128);
  EXPECT_EQ(c->num_experts_per_tok, 8);
  EXPECT_EQ(c->moe_intermediate_size, 768);
  EXPECT_FALSE(c->norm_topk_prob);
  EXPECT_EQ(c->head_dim, 16);
  // model_type alone names it too.
  c = ParseModelConfig(R"({"model_type": "qwen3_moe", "vocab_size": 10, "hidden_size": 64,
      "intermediate_size": 128, "num_hidden_layers": 1, "num_attention_heads": 4})",
                       "config.json");
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->arch, Architecture::kQwen3Moe);
}

TEST(Qwen3MoeConfig, ErrorsNameTheField) {
  for (const auto& [extra, needle] :
       {std::pair<std::string, std::string>{R"(, "num_experts_per_tok": 9)",
                                            "\"num_experts_per_tok\" (9) must not exceed"},
        {R"(, "mlp_only_layers": [4])", "\"mlp_only_layers\" entry 4 is not a layer index"},
        {R"(, "mlp_only_layers": 1)", "\"mlp_only_layers\" must be a list"},
        {R"(, "decoder_sparse_step": 0)", "\"decoder_sparse_step\" must be >= 1"},
        {R"(, "norm_topk_prob": 1)", "\"norm_topk_prob\" must be true or false"},
        {R"(, "use_sliding_window": true)", "\"use_sliding_window\" = true is not supported"}}) {
    std::string text = Config(extra);
    // The case's num_experts_per_tok replaces the config's.
    if (extra.find("num_experts_per_tok") != std::string::npos)
      text.replace(text.find("\"num_experts_per_tok\": 2,"), 25, "");
    auto c = ParseModelConfig(text, "config.json");
    ASSERT_FALSE(c.ok()) << extra;
    EXPECT_NE(c.status().message().find(needle), std::string::npos)
        << extra << ": " << c.status().ToString();
  }
}

// make-model's real shape is Qwen3-30B-A3B's config.json (not generated
// here: 61 GB); the experts' tensors are per expert in HF, stacked in GGUF.
TEST(Qwen3MoeConfig, RealShapeAndTensorNames) {
  RandomModelOptions o;
  o.arch = Architecture::kQwen3Moe;
  o.shape = "qwen3-30b-a3b";
  auto c = RandomModelConfig(o);
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->hidden_size, 2048);
  EXPECT_EQ(c->num_layers, 48);
  EXPECT_EQ(c->num_heads, 32);
  EXPECT_EQ(c->num_kv_heads, 4);
  EXPECT_EQ(c->head_dim, 128);
  EXPECT_EQ(c->vocab_size, 151936);
  EXPECT_EQ(c->num_experts, 128);
  EXPECT_EQ(c->num_experts_per_tok, 8);
  EXPECT_EQ(c->moe_intermediate_size, 768);
  EXPECT_TRUE(c->norm_topk_prob);
  EXPECT_FALSE(c->tie_word_embeddings);
  int64_t params = 0;
  for (const ExpectedTensor& t : ExpectedTensors(*c, ArchFor(c->arch))) {
    int64_t n = 1;
    for (int64_t d : t.shape) n *= d;
    params += n;
  }
  // Qwen3-30B-A3B: 30.5B parameters.
  EXPECT_GT(params, 30'400'000'000);
  EXPECT_LT(params, 30'600'000'000);
  const std::vector<ExpectedTensor> t = ExpectedTensors(*c, ArchFor(c->arch));
  auto find = [&](const std::string& name) -> const ExpectedTensor* {
    for (const ExpectedTensor& e : t)
      if (e.name == name) return &e;
    return nullptr;
  };
  const ExpectedTensor* down = find("model.layers.47.mlp.experts.127.down_proj.weight");
  ASSERT_NE(down, nullptr);
  EXPECT_EQ(down->gguf_name, "blk.47.ffn_down_exps.weight");
  EXPECT_EQ(down->shape, (std::vector<int64_t>{2048, 768}));
  EXPECT_EQ(down->ShapeFor(/*gguf=*/true), (std::vector<int64_t>{128, 2048, 768}));
  EXPECT_EQ(down->expert, 127);
  const ExpectedTensor* router = find("model.layers.0.mlp.gate.weight");
  ASSERT_NE(router, nullptr);
  EXPECT_EQ(router->gguf_name, "blk.0.ffn_gate_inp.weight");
  EXPECT_EQ(router->shape, (std::vector<int64_t>{128, 2048}));
  EXPECT_EQ(find("model.layers.0.mlp.gate_proj.weight"), nullptr);
}

// A file whose expert count times its layers would list millions of expert
// matrices is refused before the list is built, naming the keys.
class ManyTensors final : public TensorSource {
 public:
  explicit ManyTensors(int n) {
    for (int i = 0; i < n; ++i) {
      const std::string name = "t" + std::to_string(i);
      tensors_[name].name = name;
    }
  }
  TensorNaming naming() const override { return TensorNaming::kGguf; }
  const std::string& path() const override { return path_; }
  const TensorInfo* Find(const std::string& name) const override {
    auto it = tensors_.find(name);
    return it == tensors_.end() ? nullptr : &it->second;
  }
  const std::map<std::string, TensorInfo>& tensors() const override { return tensors_; }

 private:
  std::string path_ = "big.gguf";
  std::map<std::string, TensorInfo> tensors_;
};

TEST(Qwen3MoeConfig, ExpertListIsBoundedBeforeItIsBuilt) {
  auto c = ParseModelConfig(Config(""), "config.json");
  ASSERT_TRUE(c.ok());
  c->num_experts = 4096;
  c->num_layers = 900;
  c->moe_layers.assign(900, true);
  ModelLoadOptions lo;
  lo.show_progress = false;
  auto w = BindWeights(*c, ArchFor(c->arch), std::make_unique<ManyTensors>(9000), lo);
  ASSERT_FALSE(w.ok());
  EXPECT_NE(w.status().message().find("big.gguf: keys qwen3moe.block_count and expert_count"),
            std::string::npos)
      << w.status().ToString();
}

}  // namespace
}  // namespace kvfork
