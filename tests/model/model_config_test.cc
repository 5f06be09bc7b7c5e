#include "model/model_config.h"

#include <cmath>

#include <gtest/gtest.h>

namespace kvfork {
namespace {

const char* kGood = R"({
  "architectures": ["LlamaForCausalLM"], "vocab_size": 1000, "hidden_size": 64,
  "intermediate_size": 128, "num_hidden_layers": 2, "num_attention_heads": 4,
  "num_key_value_heads": 2, "rms_norm_eps": 1e-5, "rope_theta": 500000.0,
  "tie_word_embeddings": true, "eos_token_id": [7, 9], "bos_token_id": 1,
  "rope_scaling": {"rope_type": "llama3", "factor": 32.0, "low_freq_factor": 1.0,
                   "high_freq_factor": 4.0, "original_max_position_embeddings": 8192}})";

TEST(ModelConfig, ParsesLlama) {
  auto c = ParseModelConfig(kGood, "config.json");
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->arch, Architecture::kLlama);
  EXPECT_EQ(c->head_dim, 16);
  EXPECT_EQ(c->num_kv_heads, 2);
  EXPECT_TRUE(c->tie_word_embeddings);
  EXPECT_EQ(c->eos_token_ids, (std::vector<int32_t>{7, 9}));
  EXPECT_EQ(c->bos_token_id, 1);
  EXPECT_EQ(c->rope_scaling.type, RopeScaling::Type::kLlama3);
  EXPECT_EQ(c->rope_scaling.original_max_position_embeddings, 8192);
}

std::string Replace(std::string s, const std::string& from, const std::string& to);
void ExpectError(const std::string& json, StatusCode code, const std::string& needle);

// MistralForCausalLM: Llama's fields plus sliding_window (an integer, or
// null / absent for none) on every layer; model_type "mistral" names it too.
TEST(ModelConfig, ParsesMistralSlidingWindow) {
  const std::string mistral = Replace(kGood, "LlamaForCausalLM", "MistralForCausalLM");
  for (const auto& [field, want] :
       {std::pair<std::string, int64_t>{"\"sliding_window\": 4096,", 4096},
        {"\"sliding_window\": null,", 0},
        {"", 0}}) {
    auto c = ParseModelConfig(Replace(mistral, "\"vocab_size\"", field + " \"vocab_size\""),
                              "config.json");
    ASSERT_TRUE(c.ok()) << c.status().ToString();
    EXPECT_EQ(c->arch, Architecture::kMistral);
    EXPECT_EQ(c->sliding_window, want) << field;
    EXPECT_EQ(c->LayerWindow(0), want);
    EXPECT_EQ(c->LayerWindow(1), want);
  }
  auto by_type = ParseModelConfig(Replace(Replace(mistral, "\"architectures\": [\"MistralForCausalLM\"],",
                                                  "\"model_type\": \"mistral\","),
                                          "\"vocab_size\"", "\"sliding_window\": 32, \"vocab_size\""),
                                  "config.json");
  ASSERT_TRUE(by_type.ok()) << by_type.status().ToString();
  EXPECT_EQ(by_type->arch, Architecture::kMistral);
  EXPECT_EQ(by_type->sliding_window, 32);
  // Llama has no window: the field is not read.
  auto llama = ParseModelConfig(Replace(kGood, "\"vocab_size\"", "\"sliding_window\": 32, \"vocab_size\""),
                                "config.json");
  ASSERT_TRUE(llama.ok());
  EXPECT_EQ(llama->LayerWindow(0), 0);
}

// Gemma3ForCausalLM (text): the window pattern from layer_types or
// sliding_window_pattern, Gemma3TextConfig's defaults, and its refusals.
TEST(ModelConfig, ParsesGemma3) {
  const std::string gemma = R"({
    "architectures": ["Gemma3ForCausalLM"], "vocab_size": 1000, "hidden_size": 64,
    "intermediate_size": 128, "num_hidden_layers": 7, "num_attention_heads": 4,
    "num_key_value_heads": 1, "head_dim": 32, "sliding_window": 16,
    "hidden_activation": "gelu_pytorch_tanh", "query_pre_attn_scalar": 24,
    "rope_local_base_freq": 20000.0, "final_logit_softcapping": 30.0})";
  auto c = ParseModelConfig(gemma, "config.json");
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->arch, Architecture::kGemma3);
  EXPECT_TRUE(c->tie_word_embeddings);  // Gemma3TextConfig's default
  EXPECT_EQ(c->rope_theta, 1000000.0);
  EXPECT_EQ(c->rope_local_theta, 20000.0);
  EXPECT_EQ(c->hidden_act, Activation::kGeluTanh);
  EXPECT_EQ(c->query_pre_attn_scalar, 24.0);
  EXPECT_EQ(c->final_logit_softcapping, 30.0);
  // sliding_window_pattern's default 6: layer 5 is global.
  for (int64_t l = 0; l < 7; ++l) EXPECT_EQ(c->LayerWindow(l), l == 5 ? 0 : 16) << l;
  EXPECT_NE(c->RopeLocalInvFreq(), c->RopeInvFreq());
  auto typed = ParseModelConfig(
      Replace(gemma, "\"sliding_window\": 16,",
              "\"sliding_window\": 16, \"layer_types\": [\"full_attention\", \"sliding_attention\", "
              "\"sliding_attention\", \"full_attention\", \"sliding_attention\", "
              "\"sliding_attention\", \"sliding_attention\"],"),
      "config.json");
  ASSERT_TRUE(typed.ok()) << typed.status().ToString();
  for (int64_t l = 0; l < 7; ++l) EXPECT_EQ(typed->LayerWindow(l), l == 0 || l == 3 ? 0 : 16) << l;
  auto pattern = ParseModelConfig(
      Replace(gemma, "\"sliding_window\": 16,", "\"sliding_window\": 16, \"sliding_window_pattern\": 2,"),
      "config.json");
  ASSERT_TRUE(pattern.ok());
  for (int64_t l = 0; l < 7; ++l) EXPECT_EQ(pattern->LayerWindow(l), l % 2 == 1 ? 0 : 16) << l;
  ExpectError(Replace(gemma, "gelu_pytorch_tanh", "silu"), StatusCode::kUnimplemented,
              "hidden_activation");
  ExpectError(Replace(gemma, "\"final_logit_softcapping\": 30.0",
                      "\"final_logit_softcapping\": 30.0, \"attn_logit_softcapping\": 50.0"),
              StatusCode::kUnimplemented, "attn_logit_softcapping");
  ExpectError(Replace(gemma, "\"sliding_window\": 16,",
                      "\"sliding_window\": 16, \"layer_types\": [\"full_attention\"],"),
              StatusCode::kInvalidArgument, "layer_types");
}

std::string Replace(std::string s, const std::string& from, const std::string& to) {
  size_t at = s.find(from);
  EXPECT_NE(at, std::string::npos) << from;
  return s.replace(at, from.size(), to);
}

void ExpectError(const std::string& json, StatusCode code, const std::string& needle) {
  auto c = ParseModelConfig(json, "/m/config.json");
  ASSERT_FALSE(c.ok()) << json;
  EXPECT_EQ(c.status().code(), code) << c.status().ToString();
  EXPECT_NE(c.status().message().find(needle), std::string::npos) << c.status().ToString();
  EXPECT_NE(c.status().message().find("/m/config.json"), std::string::npos);
}

TEST(ModelConfig, ErrorsNameFileAndField) {
  ExpectError("{not json", StatusCode::kInvalidArgument, "not valid JSON");
  ExpectError(Replace(kGood, "\"hidden_size\": 64,", ""), StatusCode::kInvalidArgument,
              "\"hidden_size\" is missing");
  ExpectError(Replace(kGood, "\"hidden_size\": 64", "\"hidden_size\": \"64\""),
              StatusCode::kInvalidArgument, "\"hidden_size\" must be an integer");
  ExpectError(Replace(kGood, "\"num_key_value_heads\": 2", "\"num_key_value_heads\": 3"),
              StatusCode::kInvalidArgument, "num_key_value_heads");
  ExpectError(Replace(kGood, "LlamaForCausalLM", "FalconForCausalLM"),
              StatusCode::kUnimplemented, "FalconForCausalLM");
  ExpectError(Replace(Replace(kGood, "LlamaForCausalLM", "MistralForCausalLM"), "\"vocab_size\": 1000",
                      "\"vocab_size\": 1000, \"sliding_window\": 0"),
              StatusCode::kInvalidArgument, "\"sliding_window\" must be >= 1");
  ExpectError(Replace(kGood, "\"rope_type\": \"llama3\"", "\"rope_type\": \"yarn\""),
              StatusCode::kUnimplemented, "yarn");
  ExpectError(Replace(kGood, "\"factor\": 32.0,", ""), StatusCode::kInvalidArgument,
              "rope_scaling.factor");
  ExpectError(Replace(kGood, "\"vocab_size\": 1000", "\"vocab_size\": 1000, \"attention_bias\": true"),
              StatusCode::kUnimplemented, "attention_bias");
  ExpectError(Replace(kGood, "\"vocab_size\": 1000", "\"vocab_size\": 0"),
              StatusCode::kInvalidArgument, "vocab_size");
}

TEST(ModelConfig, AttentionKernelLimitsAreRefusedAtLoad) {
  ExpectError(Replace(kGood, "\"vocab_size\": 1000", "\"vocab_size\": 1000, \"head_dim\": 640"),
              StatusCode::kInvalidArgument,
              "\"head_dim\" is 640, above the attention kernels' limit of 512");
  auto at_limit = ParseModelConfig(
      Replace(kGood, "\"vocab_size\": 1000", "\"vocab_size\": 1000, \"head_dim\": 512"), "c");
  EXPECT_TRUE(at_limit.ok()) << at_limit.status().ToString();
  ExpectError(Replace(Replace(kGood, "\"num_attention_heads\": 4", "\"num_attention_heads\": 64"),
                      "\"num_key_value_heads\": 2", "\"num_key_value_heads\": 2, \"head_dim\": 16"),
              StatusCode::kInvalidArgument,
              "gives 32 query heads per KV head, above the attention kernels' limit of 16");
}

TEST(ModelConfig, SpecialTokenIdsMustBeInTheVocabulary) {
  ExpectError(Replace(kGood, "\"eos_token_id\": [7, 9]", "\"eos_token_id\": [7, 1000]"),
              StatusCode::kInvalidArgument,
              "\"eos_token_id\" has token id 1000, outside the vocabulary [0, 1000)");
  ExpectError(Replace(kGood, "\"eos_token_id\": [7, 9]", "\"eos_token_id\": 4294967303"),
              StatusCode::kInvalidArgument, "token id 4294967303");  // was truncated to 7
  ExpectError(Replace(kGood, "\"eos_token_id\": [7, 9]", "\"eos_token_id\": -2"),
              StatusCode::kInvalidArgument, "token id -2");
  ExpectError(Replace(kGood, "\"bos_token_id\": 1", "\"bos_token_id\": 2147483647"),
              StatusCode::kInvalidArgument, "\"bos_token_id\" has token id 2147483647");
  auto single =
      ParseModelConfig(Replace(kGood, "\"eos_token_id\": [7, 9]", "\"eos_token_id\": 999"), "c");
  ASSERT_TRUE(single.ok()) << single.status().ToString();
  EXPECT_EQ(single->eos_token_ids, (std::vector<int32_t>{999}));
}

TEST(ModelConfig, MissingFile) {
  auto c = LoadModelConfig("/nonexistent/config.json");
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().code(), StatusCode::kNotFound);
  EXPECT_NE(c.status().message().find("/nonexistent/config.json"), std::string::npos);
}

TEST(ModelConfig, Qwen3HeadDimDefaultsAsTransformers) {
  std::string j = Replace(kGood, "LlamaForCausalLM", "Qwen3ForCausalLM");
  auto c = ParseModelConfig(j, "config.json");
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(c->head_dim, 128);
  c = ParseModelConfig(Replace(j, "\"hidden_size\": 64", "\"hidden_size\": 64, \"head_dim\": 32"),
                       "config.json");
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(c->head_dim, 32);
}

// Qwen2ForCausalLM (Qwen2 / Qwen2.5): head_dim = hidden / heads, found by
// the architecture name or by model_type "qwen2"; sliding window refused.
TEST(ModelConfig, ParsesQwen2) {
  std::string j = Replace(kGood, "LlamaForCausalLM", "Qwen2ForCausalLM");
  auto c = ParseModelConfig(j, "config.json");
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->arch, Architecture::kQwen2);
  EXPECT_EQ(c->head_dim, 16);
  c = ParseModelConfig(
      Replace(kGood, "\"architectures\": [\"LlamaForCausalLM\"]", "\"model_type\": \"qwen2\""),
      "config.json");
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->arch, Architecture::kQwen2);
  ExpectError(
      Replace(j, "\"vocab_size\": 1000", "\"vocab_size\": 1000, \"use_sliding_window\": true"),
      StatusCode::kUnimplemented, "use_sliding_window");
  // An unknown architecture lists the supported ones.
  ExpectError(Replace(kGood, "LlamaForCausalLM", "GemmaForCausalLM"), StatusCode::kUnimplemented,
              "LlamaForCausalLM, Qwen2ForCausalLM, Qwen3ForCausalLM");
}

// transformers' _compute_llama3_parameters, written out for head_dim 128,
// theta 500000, factor 32, low 1, high 4, original 8192 (Llama 3.2).
TEST(ModelConfig, Llama3RopeScaling) {
  ModelConfig c;
  c.head_dim = 128;
  c.rope_theta = 500000.0;
  c.rope_scaling.type = RopeScaling::Type::kLlama3;
  c.rope_scaling.factor = 32;
  c.rope_scaling.low_freq_factor = 1;
  c.rope_scaling.high_freq_factor = 4;
  c.rope_scaling.original_max_position_embeddings = 8192;
  std::vector<float> f = c.RopeInvFreq();
  ASSERT_EQ(f.size(), 64u);
  int high = 0, medium = 0, low = 0;
  for (int i = 0; i < 64; ++i) {
    double inv = 1.0 / std::pow(500000.0, 2.0 * i / 128);
    double wavelen = 2 * M_PI / inv;
    double expect;
    if (wavelen < 8192 / 4.0) {
      expect = inv;
      ++high;
    } else if (wavelen > 8192 / 1.0) {
      expect = inv / 32;
      ++low;
    } else {
      double smooth = (8192 / wavelen - 1) / (4 - 1);
      expect = (1 - smooth) * inv / 32 + smooth * inv;
      ++medium;
    }
    EXPECT_NEAR(f[i], expect, 1e-7 * expect) << i;
  }
  EXPECT_GT(high, 0);
  EXPECT_GT(medium, 0);
  EXPECT_GT(low, 0);
  c.rope_scaling.type = RopeScaling::Type::kNone;
  f = c.RopeInvFreq();
  EXPECT_FLOAT_EQ(f[0], 1.0f);
  EXPECT_NEAR(f[63], 1.0 / std::pow(500000.0, 126.0 / 128), 1e-12);
}

// SmolLM3: no_rope_layers as written (1 = RoPE), else transformers' default
// of every no_rope_layer_interval-th layer without; bad lists name the field.
TEST(ModelConfig, ParsesSmolLM3NoRopeLayers) {
  std::string j = Replace(kGood, "LlamaForCausalLM", "SmolLM3ForCausalLM");
  j = Replace(j, "\"num_hidden_layers\": 2", "\"num_hidden_layers\": 8");
  auto c = ParseModelConfig(j, "config.json");
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->arch, Architecture::kSmolLM3);
  EXPECT_EQ(c->layer_uses_rope,
            (std::vector<bool>{true, true, true, false, true, true, true, false}));
  c = ParseModelConfig(
      Replace(j, "\"vocab_size\": 1000", "\"vocab_size\": 1000, \"no_rope_layer_interval\": 2"),
      "config.json");
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->layer_uses_rope,
            (std::vector<bool>{true, false, true, false, true, false, true, false}));
  c = ParseModelConfig(Replace(j, "\"vocab_size\": 1000",
                               "\"vocab_size\": 1000, \"no_rope_layers\": [0,1,1,1,1,1,1,1]"),
                       "config.json");
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_FALSE(c->LayerUsesRope(0));
  EXPECT_TRUE(c->LayerUsesRope(7));
  ExpectError(
      Replace(j, "\"vocab_size\": 1000", "\"vocab_size\": 1000, \"no_rope_layers\": [1, 0]"),
      StatusCode::kInvalidArgument, "no_rope_layers");
  ExpectError(Replace(j, "\"vocab_size\": 1000",
                      "\"vocab_size\": 1000, \"no_rope_layers\": [1,1,1,2,1,1,1,1]"),
              StatusCode::kInvalidArgument, "entry 3 must be 0 or 1");
  ExpectError(
      Replace(j, "\"vocab_size\": 1000", "\"vocab_size\": 1000, \"use_sliding_window\": true"),
      StatusCode::kUnimplemented, "use_sliding_window");
}

// Phi3: partial rotary, longrope (factors, the attention factor from the
// two contexts as _compute_longrope_parameters), and the refusals.
const char* kPhi3 = R"({
  "architectures": ["Phi3ForCausalLM"], "vocab_size": 1000, "hidden_size": 64,
  "intermediate_size": 128, "num_hidden_layers": 2, "num_attention_heads": 4,
  "num_key_value_heads": 2, "rms_norm_eps": 1e-5, "rope_theta": 10000.0,
  "max_position_embeddings": 131072, "original_max_position_embeddings": 4096,
  "partial_rotary_factor": 0.75, "sliding_window": 262144,
  "rope_scaling": {"type": "longrope", "short_factor": [1, 1, 1, 1, 1, 2],
                   "long_factor": [1, 2, 4, 8, 16, 32]}})";

TEST(ModelConfig, ParsesPhi3LongRopeAndPartialRotary) {
  auto c = ParseModelConfig(kPhi3, "config.json");
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->arch, Architecture::kPhi3);
  EXPECT_EQ(c->head_dim, 16);
  EXPECT_EQ(c->RotaryDim(), 12);
  ASSERT_EQ(c->rope_scaling.type, RopeScaling::Type::kLongRope);
  EXPECT_EQ(c->rope_scaling.original_max_position_embeddings, 4096);
  EXPECT_NEAR(c->rope_scaling.attention_factor, std::sqrt(1 + std::log(32.0) / std::log(4096.0)),
              1e-15);
  // Short factors until Model::Load picks the long ones for a long context.
  std::vector<float> f = c->RopeInvFreq();
  ASSERT_EQ(f.size(), 6u);
  EXPECT_FLOAT_EQ(f[5], static_cast<float>(1.0 / std::pow(10000.0, 10.0 / 12) / 2));
  c->rope_scaling.use_long_factor = true;
  f = c->RopeInvFreq();
  EXPECT_FLOAT_EQ(f[5], static_cast<float>(1.0 / std::pow(10000.0, 10.0 / 12) / 32));
  EXPECT_FLOAT_EQ(f[1], static_cast<float>(1.0 / std::pow(10000.0, 2.0 / 12) / 2));

  ExpectError(Replace(kPhi3, "[1, 2, 4, 8, 16, 32]", "[1, 2]"), StatusCode::kInvalidArgument,
              "rope_scaling.long_factor");
  ExpectError(Replace(kPhi3, "[1, 1, 1, 1, 1, 2]", "[1, 1, 1, 1, 1, -2]"),
              StatusCode::kInvalidArgument, "rope_scaling.short_factor");
  ExpectError(Replace(kPhi3, "\"sliding_window\": 262144", "\"sliding_window\": 2047"),
              StatusCode::kUnimplemented, "sliding_window");
  ExpectError(Replace(kPhi3, "\"partial_rotary_factor\": 0.75", "\"partial_rotary_factor\": 0.7"),
              StatusCode::kInvalidArgument, "partial_rotary_factor");
  // longrope and partial rotary are Phi3's only.
  std::string llama = Replace(kPhi3, "Phi3ForCausalLM", "LlamaForCausalLM");
  ExpectError(llama, StatusCode::kInvalidArgument, "partial_rotary_factor");
  ExpectError(Replace(llama, "\"partial_rotary_factor\": 0.75", "\"partial_rotary_factor\": 1.0"),
              StatusCode::kUnimplemented, "longrope");
}

}  // namespace
}  // namespace kvfork
