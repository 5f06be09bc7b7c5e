// QuantizeRecipe against llama-quantize's rules (src/llama-quant.cpp),
// worked out by hand for real shapes: which tensors of a 28-layer
// qwen3-0.6b and a 16-layer llama-3.2-1b get which type under each mix.
#include "model/quantize_recipe.h"

#include <gtest/gtest.h>

#include <set>

#include "model/gguf_writer.h"

namespace kvfork {
namespace {

QuantizeModelInfo Qwen3_0_6B() {  // tied embeddings, 28 layers, hidden 1024
  return {"qwen3", 28, 16, 8, /*has_output=*/false};
}
QuantizeModelInfo Llama3_2_1B() {  // untied here (the real one ties), 16 layers
  return {"llama", 16, 32, 8, /*has_output=*/true};
}

GgmlType TypeOf(const QuantizeRecipe& r, const std::string& name, std::vector<int64_t> ne) {
  return r.TypeFor(name, ne, ne.size() == 1 ? GgmlType::kF32 : GgmlType::kBf16);
}

std::string Layer(int i, const char* tensor) { return "blk." + std::to_string(i) + "." + tensor; }

TEST(QuantizeRecipe, Q4_K_MGivesQ6_KToAttnVAndFfnDownOnUseMoreBitsLayers) {
  const QuantizeRecipe r(QuantizeMix::kQ4_K_M, Qwen3_0_6B());
  // use_more_bits(i, 28): i < 3, i >= 24, or (i - 3) % 3 == 2.
  const std::set<int> more = {0, 1, 2, 5, 8, 11, 14, 17, 20, 23, 24, 25, 26, 27};
  for (int i = 0; i < 28; ++i) {
    const GgmlType want = more.count(i) ? GgmlType::kQ6_K : GgmlType::kQ4_K;
    EXPECT_EQ(TypeOf(r, Layer(i, "attn_v.weight"), {1024, 1024}), want) << i;
    EXPECT_EQ(TypeOf(r, Layer(i, "ffn_down.weight"), {3072, 1024}), want) << i;
    EXPECT_EQ(TypeOf(r, Layer(i, "attn_k.weight"), {1024, 1024}), GgmlType::kQ4_K) << i;
    EXPECT_EQ(TypeOf(r, Layer(i, "attn_q.weight"), {1024, 2048}), GgmlType::kQ4_K) << i;
    EXPECT_EQ(TypeOf(r, Layer(i, "attn_output.weight"), {2048, 1024}), GgmlType::kQ4_K) << i;
    EXPECT_EQ(TypeOf(r, Layer(i, "ffn_gate.weight"), {1024, 3072}), GgmlType::kQ4_K) << i;
    EXPECT_EQ(TypeOf(r, Layer(i, "ffn_up.weight"), {1024, 3072}), GgmlType::kQ4_K) << i;
    EXPECT_EQ(TypeOf(r, Layer(i, "attn_norm.weight"), {1024}), GgmlType::kF32) << i;
    EXPECT_EQ(TypeOf(r, Layer(i, "attn_q_norm.weight"), {128}), GgmlType::kF32) << i;
  }
  // Tied: token_embd is the output projection, so it is typed as output.
  EXPECT_EQ(TypeOf(r, "token_embd.weight", {1024, 151936}), GgmlType::kQ6_K);
  EXPECT_EQ(TypeOf(r, "output_norm.weight", {1024}), GgmlType::kF32);
}

TEST(QuantizeRecipe, UntiedEmbeddingsKeepTheMixTypeAndOutputGetsQ6_K) {
  const QuantizeRecipe r(QuantizeMix::kQ4_K_M, Llama3_2_1B());
  EXPECT_EQ(TypeOf(r, "token_embd.weight", {2048, 128256}), GgmlType::kQ4_K);
  EXPECT_EQ(TypeOf(r, "output.weight", {2048, 128256}), GgmlType::kQ6_K);
  EXPECT_EQ(TypeOf(r, "rope_freqs.weight", {32}), GgmlType::kF32);
  // use_more_bits(i, 16): i < 2, i >= 14, or (i - 2) % 3 == 2.
  const std::set<int> more = {0, 1, 4, 7, 10, 13, 14, 15};
  for (int i = 0; i < 16; ++i)
    EXPECT_EQ(TypeOf(r, Layer(i, "ffn_down.weight"), {8192, 2048}),
              more.count(i) ? GgmlType::kQ6_K : GgmlType::kQ4_K)
        << i;
}

TEST(QuantizeRecipe, OutputTypeByMix) {
  for (QuantizeMix mix : AllQuantizeMixes()) {
    const QuantizeRecipe r(mix, Llama3_2_1B());
    const GgmlType want = mix == QuantizeMix::kQ8_0 ? GgmlType::kQ8_0 : GgmlType::kQ6_K;
    EXPECT_EQ(TypeOf(r, "output.weight", {2048, 128256}), want) << QuantizeMixName(mix);
  }
  // Every mix but q8_0 gives q6_k to output, even q4_0; a row width that is
  // not whole blocks of the mix's type gives q8_0 instead, and f16 when
  // not whole 32-blocks either.
  EXPECT_EQ(
      TypeOf(QuantizeRecipe(QuantizeMix::kQ4_K_M, Llama3_2_1B()), "output.weight", {288, 100}),
      GgmlType::kQ8_0);
  EXPECT_EQ(TypeOf(QuantizeRecipe(QuantizeMix::kQ4_0, Llama3_2_1B()), "output.weight", {48, 100}),
            GgmlType::kF16);
}

TEST(QuantizeRecipe, SMixesAndFlatMixes) {
  const QuantizeRecipe s4(QuantizeMix::kQ4_K_S, Llama3_2_1B());
  for (int i = 0; i < 16; ++i) {
    EXPECT_EQ(TypeOf(s4, Layer(i, "attn_v.weight"), {2048, 512}),
              i < 4 ? GgmlType::kQ5_K : GgmlType::kQ4_K)
        << i;
    EXPECT_EQ(TypeOf(s4, Layer(i, "ffn_down.weight"), {8192, 2048}),
              i < 2 ? GgmlType::kQ5_K : GgmlType::kQ4_K)
        << i;
  }
  const QuantizeRecipe s5(QuantizeMix::kQ5_K_S, Llama3_2_1B());
  EXPECT_EQ(TypeOf(s5, Layer(0, "attn_v.weight"), {2048, 512}), GgmlType::kQ5_K);
  EXPECT_EQ(TypeOf(s5, Layer(0, "ffn_down.weight"), {8192, 2048}), GgmlType::kQ5_K);
  const QuantizeRecipe m5(QuantizeMix::kQ5_K_M, Llama3_2_1B());
  EXPECT_EQ(TypeOf(m5, Layer(0, "attn_v.weight"), {2048, 512}), GgmlType::kQ6_K);
  EXPECT_EQ(TypeOf(m5, Layer(2, "attn_v.weight"), {2048, 512}), GgmlType::kQ5_K);
  for (QuantizeMix flat : {QuantizeMix::kQ8_0, QuantizeMix::kQ4_0, QuantizeMix::kQ4_1,
                           QuantizeMix::kQ5_0, QuantizeMix::kQ5_1, QuantizeMix::kQ6_K}) {
    const QuantizeRecipe r(flat, Llama3_2_1B());
    EXPECT_EQ(TypeOf(r, Layer(0, "attn_v.weight"), {2048, 512}), r.default_type())
        << QuantizeMixName(flat);
    EXPECT_EQ(TypeOf(r, Layer(0, "ffn_down.weight"), {8192, 2048}), r.default_type())
        << QuantizeMixName(flat);
    EXPECT_EQ(TypeOf(r, "token_embd.weight", {2048, 128256}), r.default_type())
        << QuantizeMixName(flat);
  }
}

TEST(QuantizeRecipe, RowWidthsThatAreNotWholeBlocksFallBack) {
  const QuantizeRecipe m4(QuantizeMix::kQ4_K_M, Llama3_2_1B());
  // 288 = 9 x 32: q4_k -> q5_0, q6_k -> q8_0 (layer 0 is a use_more_bits one).
  EXPECT_EQ(TypeOf(m4, Layer(3, "ffn_down.weight"), {288, 256}), GgmlType::kQ5_0);
  EXPECT_EQ(TypeOf(m4, Layer(0, "ffn_down.weight"), {288, 256}), GgmlType::kQ8_0);
  EXPECT_EQ(TypeOf(QuantizeRecipe(QuantizeMix::kQ5_K_S, Llama3_2_1B()), Layer(3, "ffn_down.weight"),
                   {288, 256}),
            GgmlType::kQ5_1);
  // 272 is not whole 32-blocks either: f16.
  EXPECT_EQ(TypeOf(m4, Layer(3, "ffn_down.weight"), {272, 256}), GgmlType::kF16);
  EXPECT_EQ(TypeOf(QuantizeRecipe(QuantizeMix::kQ8_0, Llama3_2_1B()), Layer(3, "ffn_down.weight"),
                   {272, 256}),
            GgmlType::kF16);
}

TEST(QuantizeRecipe, Llama70BGivesQ5_KToAttnV) {
  const QuantizeRecipe r(QuantizeMix::kQ4_K_M, {"llama", 80, 64, 8, true});
  EXPECT_EQ(TypeOf(r, Layer(40, "attn_v.weight"), {8192, 1024}),
            GgmlType::kQ5_K);  // not use_more_bits
  EXPECT_EQ(TypeOf(r, Layer(0, "attn_v.weight"), {8192, 1024}), GgmlType::kQ6_K);
  EXPECT_EQ(TypeOf(r, Layer(40, "attn_q.weight"), {8192, 8192}), GgmlType::kQ4_K);
}

TEST(QuantizeRecipe, ParsesLlamaQuantizeNames) {
  EXPECT_EQ(*ParseQuantizeMix("Q4_K_M"), QuantizeMix::kQ4_K_M);
  EXPECT_EQ(static_cast<uint32_t>(*ParseQuantizeMix("q8_0")), 7u);  // LLAMA_FTYPE_MOSTLY_Q8_0
  auto bad = ParseQuantizeMix("q3_k_m");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("--type"), std::string::npos);
  EXPECT_NE(bad.status().message().find("q4_k_m"), std::string::npos);
}

TEST(GgmlType, EveryWrittenTypeIsARowOfTheDTypeTable) {
  for (GgmlType t : {GgmlType::kF32, GgmlType::kF16, GgmlType::kBf16, GgmlType::kQ4_0,
                     GgmlType::kQ4_1, GgmlType::kQ5_0, GgmlType::kQ5_1, GgmlType::kQ8_0,
                     GgmlType::kQ4_K, GgmlType::kQ5_K, GgmlType::kQ6_K})
    EXPECT_EQ(GgmlTypeOf(DTypeOfGgml(t)), t) << GgmlTypeName(t);
}

// Mixture of experts: the stacked experts (ne {cols, rows, experts}) follow
// their dense names' rules (ffn_down_exps is ffn_down), the router
// ffn_gate_inp stays as it is, and with exactly 8 experts llama-quant.cpp's
// Mixtral rules give attn_v and attn_k Q8_0 and attn_output Q5_K (Q4_K_M).
TEST(QuantizeRecipe, ExpertsAndTheEightExpertRules) {
  QuantizeModelInfo moe{"qwen3moe", 48, 32, 4, /*has_output=*/true};
  moe.num_experts = 128;  // Qwen3-30B-A3B: no 8-expert rules
  const QuantizeRecipe r(QuantizeMix::kQ4_K_M, moe);
  // use_more_bits(i, 48): i < 6, i >= 42, or (i - 6) % 3 == 2.
  for (int i : {0, 8, 42}) {
    EXPECT_EQ(TypeOf(r, Layer(i, "ffn_down_exps.weight"), {768, 2048, 128}), GgmlType::kQ6_K) << i;
    EXPECT_EQ(TypeOf(r, Layer(i, "attn_v.weight"), {2048, 512}), GgmlType::kQ6_K) << i;
  }
  for (int i : {6, 7, 9}) {
    EXPECT_EQ(TypeOf(r, Layer(i, "ffn_down_exps.weight"), {768, 2048, 128}), GgmlType::kQ4_K) << i;
    EXPECT_EQ(TypeOf(r, Layer(i, "attn_v.weight"), {2048, 512}), GgmlType::kQ4_K) << i;
  }
  EXPECT_EQ(TypeOf(r, Layer(3, "ffn_gate_exps.weight"), {2048, 768, 128}), GgmlType::kQ4_K);
  EXPECT_EQ(TypeOf(r, Layer(3, "ffn_up_exps.weight"), {2048, 768, 128}), GgmlType::kQ4_K);
  EXPECT_EQ(TypeOf(r, Layer(3, "attn_k.weight"), {2048, 512}), GgmlType::kQ4_K);
  EXPECT_EQ(TypeOf(r, Layer(3, "attn_output.weight"), {4096, 2048}), GgmlType::kQ4_K);
  EXPECT_EQ(r.TypeFor(Layer(3, "ffn_gate_inp.weight"), {2048, 128}, GgmlType::kF32),
            GgmlType::kF32);

  moe.num_experts = 8;
  const QuantizeRecipe eight(QuantizeMix::kQ4_K_M, moe);
  EXPECT_EQ(TypeOf(eight, Layer(0, "attn_v.weight"), {2048, 512}), GgmlType::kQ8_0);
  EXPECT_EQ(TypeOf(eight, Layer(7, "attn_v.weight"), {2048, 512}), GgmlType::kQ8_0);
  EXPECT_EQ(TypeOf(eight, Layer(7, "attn_k.weight"), {2048, 512}), GgmlType::kQ8_0);
  EXPECT_EQ(TypeOf(eight, Layer(7, "attn_output.weight"), {4096, 2048}), GgmlType::kQ5_K);
  EXPECT_EQ(TypeOf(eight, Layer(7, "attn_q.weight"), {2048, 4096}), GgmlType::kQ4_K);
  // Q8_0 and Q6_K mixes: attn_output keeps the mix type; attn_k, attn_v Q8_0.
  const QuantizeRecipe q6(QuantizeMix::kQ6_K, moe);
  EXPECT_EQ(TypeOf(q6, Layer(7, "attn_output.weight"), {4096, 2048}), GgmlType::kQ6_K);
  EXPECT_EQ(TypeOf(q6, Layer(7, "attn_k.weight"), {2048, 512}), GgmlType::kQ8_0);
}

}  // namespace
}  // namespace kvfork
