// GGUF writer/reader round trip, the Llama Q/K permutation, and the export's
// metadata and tensor contents on a tiny random model (no llama.cpp needed).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "core/bf16.h"
#include "model/gguf_export.h"
#include "model/gguf_reader.h"
#include "model/gguf_writer.h"
#include "model/random_model.h"
#include "model/safetensors.h"
#include "test_env.h"

namespace kvfork {
namespace {

namespace fs = std::filesystem;

fs::path WorkDir(const std::string& name) {
  fs::path d = fs::path(kvfork::testing::BuildDir()) / "test-data" / "gguf" / name;
  fs::create_directories(d);
  return d;
}

TEST(GgufWriter, RoundTripsMetadataAndAlignedTensors) {
  const fs::path path = WorkDir("roundtrip") / "t.gguf";
  GgufWriter w;
  w.Set("general.architecture", GgufValue::String("llama"));
  w.Set("a.u32", GgufValue::U32(7));
  w.Set("a.f32", GgufValue::F32(0.5f));
  w.Set("a.strs", GgufValue::StringArray({"x", "", "yz"}));
  w.Set("a.i32s", GgufValue::I32Array({-1, 0, 7}));
  w.Set("a.empty", GgufValue::I32Array({}));
  w.Set("a.u32", GgufValue::U32(9));  // replaces, keeps its place
  std::vector<float> v = {1, 2, 3, 4, 5, 6};
  ASSERT_TRUE(w.AddTensor("t0", GgmlType::kF32, {3, 2}, [&](uint8_t* d) {
                 std::memcpy(d, v.data(), 24);
                 return OkStatus();
               }).ok());
  ASSERT_TRUE(w.AddTensor("t1", GgmlType::kBf16, {5}, [&](uint8_t* d) {
                 for (int i = 0; i < 5; ++i) {
                   bf16_t h = F32ToBf16(static_cast<float>(i));
                   std::memcpy(d + 2 * i, &h, 2);
                 }
                 return OkStatus();
               }).ok());
  EXPECT_FALSE(w.AddTensor("t1", GgmlType::kF32, {1}, nullptr).ok());
  ASSERT_TRUE(w.Write(path.string()).ok());

  auto r = GgufReader::Open(path.string());
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->version(), 3u);
  ASSERT_EQ(r->metadata().size(), 6u);
  EXPECT_EQ(r->metadata()[1].first, "a.u32");
  EXPECT_EQ(*r->GetU32("a.u32"), 9u);
  EXPECT_EQ(*r->GetF32("a.f32"), 0.5f);
  EXPECT_EQ(*r->GetString("general.architecture"), "llama");
  EXPECT_EQ(*r->GetStringArray("a.strs"), (std::vector<std::string>{"x", "", "yz"}));
  EXPECT_EQ(*r->GetArrayWords("a.i32s"), (std::vector<uint32_t>{0xffffffffu, 0, 7}));
  EXPECT_TRUE(r->GetArrayWords("a.empty")->empty());  // no memcpy into a null vector
  EXPECT_FALSE(r->GetArrayWords("a.strs").ok());      // strings are not 4-byte words
  EXPECT_FALSE(r->GetArrayWords("a.u32").ok());       // not an array
  EXPECT_FALSE(r->GetU32("a.f32").ok());
  EXPECT_FALSE(r->GetU32("missing").ok());
  ASSERT_EQ(r->tensors().size(), 2u);
  EXPECT_EQ(r->tensors()[0].ne, (std::vector<int64_t>{3, 2}));
  for (const auto& t : r->tensors()) EXPECT_EQ(t.offset % 32, 0u) << t.name;
  auto t0 = r->ReadTensor("t0");
  ASSERT_TRUE(t0.ok());
  EXPECT_EQ(std::memcmp(t0->data(), v.data(), 24), 0);
  auto t1 = r->ReadTensor("t1");
  ASSERT_TRUE(t1.ok());
  bf16_t h4;
  std::memcpy(&h4, t1->data() + 8, 2);
  EXPECT_EQ(Bf16ToF32(h4), 4.0f);
  EXPECT_EQ(fs::file_size(path) % 32, 0u);
}

TEST(GgufReader, RejectsGarbageAndTruncation) {
  const fs::path dir = WorkDir("bad");
  {
    std::ofstream(dir / "junk.gguf") << "not a gguf file at all";
  }
  EXPECT_FALSE(GgufReader::Open((dir / "junk.gguf").string()).ok());
  EXPECT_EQ(GgufReader::Open((dir / "absent.gguf").string()).status().code(), StatusCode::kNotFound);
  GgufWriter w;
  w.Set("k", GgufValue::StringArray({"abcdef", "ghijkl"}));
  ASSERT_TRUE(w.Write((dir / "full.gguf").string()).ok());
  fs::copy_file(dir / "full.gguf", dir / "cut.gguf", fs::copy_options::overwrite_existing);
  fs::resize_file(dir / "cut.gguf", 40);
  auto r = GgufReader::Open((dir / "cut.gguf").string());
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kDataLoss) << r.status().ToString();
}

TEST(LlamaRopePermutation, MatchesConverterReshapeSwapaxes) {
  // n_head 2, head_dim 6: per head, rows [0 1 2 | 3 4 5] (two halves)
  // interleave to [0 3 1 4 2 5].
  std::vector<int64_t> p = LlamaRopePermutation(2, 6);
  EXPECT_EQ(p, (std::vector<int64_t>{0, 3, 1, 4, 2, 5, 6, 9, 7, 10, 8, 11}));
}

class GgufExportTest : public ::testing::TestWithParam<Architecture> {};

TEST_P(GgufExportTest, MetadataNamesAndPermutedRows) {
  const Architecture arch = GetParam();
  const bool llama = arch == Architecture::kLlama;
  const fs::path dir = WorkDir(llama ? "export_llama" : "export_qwen3");
  RandomModelOptions o;
  o.arch = arch;
  o.hidden_size = 64;
  o.intermediate_size = 96;
  o.num_layers = 2;
  o.num_heads = 2;
  o.num_kv_heads = 1;
  o.head_dim = 32;
  o.dtype = DType::kF32;
  o.seed = 5;
  o.tokenizer_dir =
      llama ? kvfork::testing::LlamaTokenizerDir() : kvfork::testing::QwenTokenizerDir();
  o.tie_word_embeddings = !llama;
  o.rope_scaling = llama;
  ASSERT_TRUE(WriteRandomModel(o, (dir / "model").string()).ok());
  GgufExportOptions eo;
  eo.dtype = GgmlType::kBf16;
  Status st = ExportGguf((dir / "model").string(), (dir / "m.gguf").string(), eo);
  ASSERT_TRUE(st.ok()) << st.ToString();

  auto r = GgufReader::Open((dir / "m.gguf").string());
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  const std::string a = llama ? "llama" : "qwen3";
  EXPECT_EQ(*r->GetString("general.architecture"), a);
  EXPECT_EQ(*r->GetU32(a + ".block_count"), 2u);
  EXPECT_EQ(*r->GetU32(a + ".embedding_length"), 64u);
  EXPECT_EQ(*r->GetU32(a + ".feed_forward_length"), 96u);
  EXPECT_EQ(*r->GetU32(a + ".attention.head_count"), 2u);
  EXPECT_EQ(*r->GetU32(a + ".attention.head_count_kv"), 1u);
  EXPECT_EQ(*r->GetU32(a + ".attention.key_length"), 32u);
  EXPECT_EQ(*r->GetU32(a + ".attention.value_length"), 32u);
  EXPECT_TRUE(r->GetF32(a + ".rope.freq_base").ok());
  EXPECT_TRUE(r->GetF32(a + ".attention.layer_norm_rms_epsilon").ok());
  EXPECT_EQ(*r->GetU32("general.file_type"), 32u);
  const uint32_t vocab = *r->GetU32(a + ".vocab_size");
  EXPECT_EQ(*r->GetArrayLength("tokenizer.ggml.tokens"), vocab);
  EXPECT_EQ(*r->GetArrayLength("tokenizer.ggml.token_type"), vocab);
  EXPECT_GT(*r->GetArrayLength("tokenizer.ggml.merges"), 100000u);
  EXPECT_EQ(*r->GetString("tokenizer.ggml.model"), "gpt2");
  EXPECT_EQ(*r->GetString("tokenizer.ggml.pre"), llama ? "llama-bpe" : "qwen2");
  auto tokens = *r->GetStringArray("tokenizer.ggml.tokens");
  if (llama) {
    EXPECT_EQ(*r->GetU32("tokenizer.ggml.bos_token_id"), 128000u);
    EXPECT_EQ(tokens[128000], "<|begin_of_text|>");
  } else {
    EXPECT_EQ(*r->GetU32("tokenizer.ggml.eos_token_id"), 151645u);  // <|im_end|>
    EXPECT_EQ(tokens[151667], "<think>");
  }
  EXPECT_TRUE(r->Find("tokenizer.chat_template") != nullptr);

  EXPECT_EQ(r->FindTensor("output.weight") != nullptr, llama);
  EXPECT_EQ(r->FindTensor("rope_freqs.weight") != nullptr, llama);
  EXPECT_EQ(r->FindTensor("blk.1.attn_k_norm.weight") != nullptr, !llama);
  const GgufTensorInfo* q = r->FindTensor("blk.1.attn_q.weight");
  ASSERT_NE(q, nullptr);
  EXPECT_EQ(q->ne, (std::vector<int64_t>{64, 64}));
  EXPECT_EQ(q->ggml_type, static_cast<uint32_t>(GgmlType::kBf16));
  EXPECT_EQ(r->FindTensor("blk.1.attn_norm.weight")->ggml_type,
            static_cast<uint32_t>(GgmlType::kF32));
  EXPECT_EQ(r->FindTensor("token_embd.weight")->ne, (std::vector<int64_t>{64, vocab}));

  // Row content: GGUF attn_k row (2i + j) of the head is HF row (j*16 + i)
  // for llama, the same row for qwen3; values are bf16-rounded f32.
  auto ckpt = SafetensorsCheckpoint::Open((dir / "model").string());
  ASSERT_TRUE(ckpt.ok()) << ckpt.status().ToString();
  const TensorInfo* hf = (*ckpt)->Find("model.layers.1.self_attn.k_proj.weight");
  ASSERT_NE(hf, nullptr);
  auto k = r->ReadTensor("blk.1.attn_k.weight");
  ASSERT_TRUE(k.ok());
  for (int64_t row = 0; row < 32; ++row) {
    const int64_t src = llama ? (row % 2) * 16 + row / 2 : row;
    for (int64_t col = 0; col < 64; col += 21) {
      float want;
      std::memcpy(&want, hf->data + 4 * (src * 64 + col), 4);
      bf16_t got;
      std::memcpy(&got, k->data() + 2 * (row * 64 + col), 2);
      EXPECT_EQ(got, F32ToBf16(want)) << "row " << row << " col " << col;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Arch, GgufExportTest,
                         ::testing::Values(Architecture::kLlama, Architecture::kQwen3),
                         [](const auto& info) {
                           return info.param == Architecture::kLlama ? "llama" : "qwen3";
                         });

// phi3 as Phi3MiniModel writes it: no key/value length or vocab_size keys,
// the partial rotary dims, the pretrained context, sliding_window 0, the
// fused tensors as attn_qkv / ffn_up (gate rows first, unpermuted), and
// longrope's factors as two f32 tensors plus rope.scaling.attn_factor.
TEST(GgufExport, Phi3AsItsConverter) {
  const fs::path dir = WorkDir("export_phi3");
  RandomModelOptions o;
  o.arch = Architecture::kPhi3;
  o.shape = "phi3-tiny";  // hidden 64, 4 heads of 16, rotary 12, original 32
  o.dtype = DType::kF32;
  o.seed = 6;
  o.rope_scaling = true;
  o.tokenizer_dir = kvfork::testing::LlamaTokenizerDir();
  ASSERT_TRUE(WriteRandomModel(o, (dir / "model").string()).ok());
  Status st = ExportGguf((dir / "model").string(), (dir / "m.gguf").string(), GgufExportOptions());
  ASSERT_TRUE(st.ok()) << st.ToString();
  auto r = GgufReader::Open((dir / "m.gguf").string());
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(*r->GetString("general.architecture"), "phi3");
  EXPECT_EQ(*r->GetU32("phi3.rope.dimension_count"), 12u);
  EXPECT_EQ(*r->GetU32("phi3.rope.scaling.original_context_length"), 32u);
  EXPECT_EQ(*r->GetU32("phi3.attention.sliding_window"), 0u);
  EXPECT_EQ(r->Find("phi3.attention.key_length"), nullptr);
  EXPECT_EQ(r->Find("phi3.vocab_size"), nullptr);
  // sqrt(1 + ln(4096 / 32) / ln(32)), transformers' and the converter's.
  EXPECT_FLOAT_EQ(*r->GetF32("phi3.rope.scaling.attn_factor"),
                  static_cast<float>(std::sqrt(1 + std::log(128.0) / std::log(32.0))));
  EXPECT_EQ(*r->GetString("tokenizer.ggml.pre"), "gpt-4o");
  // ne is ggml order: [cols, rows].
  const GgufTensorInfo* qkv = r->FindTensor("blk.0.attn_qkv.weight");
  ASSERT_NE(qkv, nullptr);
  EXPECT_EQ(qkv->ne, (std::vector<int64_t>{64, 64 + 2 * 32}));
  const GgufTensorInfo* up = r->FindTensor("blk.0.ffn_up.weight");
  ASSERT_NE(up, nullptr);
  EXPECT_EQ(up->ne, (std::vector<int64_t>{64, 2 * 128}));
  EXPECT_EQ(r->FindTensor("blk.0.ffn_gate.weight"), nullptr);
  EXPECT_EQ(r->FindTensor("blk.0.attn_q.weight"), nullptr);
  for (const char* name : {"rope_factors_short.weight", "rope_factors_long.weight"}) {
    const GgufTensorInfo* f = r->FindTensor(name);
    ASSERT_NE(f, nullptr) << name;
    EXPECT_EQ(f->ggml_type, static_cast<uint32_t>(GgmlType::kF32));
    EXPECT_EQ(f->ne, (std::vector<int64_t>{6}));
  }
}

TEST(GgufExport, ErrorsNameWhatIsWrong) {
  const fs::path dir = WorkDir("errors");
  Status st = ExportGguf((dir / "nonexistent").string(), (dir / "x.gguf").string(), {});
  EXPECT_FALSE(st.ok());
  EXPECT_NE(st.message().find("config.json"), std::string::npos) << st.ToString();

  RandomModelOptions o;
  o.arch = Architecture::kQwen3;
  o.hidden_size = 64;
  o.intermediate_size = 96;
  o.num_layers = 1;
  o.num_heads = 2;
  o.num_kv_heads = 1;
  o.head_dim = 32;
  o.dtype = DType::kF32;
  o.tokenizer_dir = kvfork::testing::QwenTokenizerDir();
  ASSERT_TRUE(WriteRandomModel(o, (dir / "model").string()).ok());
  GgufExportOptions eo;
  // The Llama 3 vocab file has 128256 tokens, this Qwen3 model 151669, and
  // llama.cpp sizes token_embd by the token list: copying must refuse.
  eo.vocab_gguf = kvfork::testing::LlamaCppSourceDir() + "/models/ggml-vocab-llama-bpe.gguf";
  st = ExportGguf((dir / "model").string(), (dir / "x.gguf").string(), eo);
  EXPECT_FALSE(st.ok());
  EXPECT_NE(st.message().find("vocab_size"), std::string::npos) << st.ToString();
}

}  // namespace
}  // namespace kvfork
