// Files quantized by llama.cpp's own llama-quantize load: a make-model
// directory (llama and qwen3, rows of 256 so the K-quants apply) exported by
// export-gguf and quantized to Q8_0, Q4_0, Q4_K_M and Q6_K binds every matrix
// in place in the file's block format (llama's Q/K rows un-permuted whole
// blocks at a time), with the config of the directory. Skipped where
// llama-quantize is not built (scripts/setup-llama-server.sh builds it with
// the tools). The forward pass on block formats is the kernels' test.
#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "model/decoder.h"
#include "model/gguf_checkpoint.h"
#include "model/gguf_export.h"
#include "model/model.h"
#include "model/model_test_util.h"
#include "model/weights.h"
#include "test_env.h"

namespace kvfork {
namespace {

namespace fs = std::filesystem;

std::string Quantizer() {
  return kvfork::testing::CacheDir() + "/llama-server/build/bin/llama-quantize";
}

const MatrixView* Bound(const ModelWeights& w, const ExpectedTensor& e) {
  switch (e.role) {
    case TensorRole::kEmbed:
      return &w.embed_tokens;
    case TensorRole::kLmHead:
      return &w.lm_head;
    case TensorRole::kQ:
      return &w.layers[e.layer].q_proj;
    case TensorRole::kK:
      return &w.layers[e.layer].k_proj;
    case TensorRole::kV:
      return &w.layers[e.layer].v_proj;
    case TensorRole::kO:
      return &w.layers[e.layer].o_proj;
    case TensorRole::kGate:
      return &w.layers[e.layer].gate_proj;
    case TensorRole::kUp:
      return &w.layers[e.layer].up_proj;
    case TensorRole::kDown:
      return &w.layers[e.layer].down_proj;
    default:
      return nullptr;
  }
}

class QuantizedLoad : public ::testing::TestWithParam<Architecture> {};

TEST_P(QuantizedLoad, EveryTypeBindsInPlace) {
  if (!fs::exists(Quantizer())) GTEST_SKIP() << Quantizer() << " not built";
  const Architecture arch = GetParam();
  kvfork::testing::TempDir tmp;
  RandomModelOptions o = kvfork::testing::TinyOptions(arch, DType::kF32, false, false, 256, 3);
  o.hidden_size = 256;
  o.intermediate_size = 512;
  o.num_heads = 4;
  o.num_kv_heads = 2;
  o.head_dim = 64;
  const std::string dir = tmp.Sub("m");
  ASSERT_TRUE(WriteRandomModel(o, dir).ok());
  {
    // export-gguf needs a tokenizer.json: a BPE vocabulary "t0".."t255".
    std::ostringstream j;
    j << R"({"model": {"type": "BPE", "vocab": {)";
    for (int i = 0; i < 256; ++i) j << (i ? ", " : "") << "\"t" << i << "\": " << i;
    j << R"(}, "merges": []}})";
    std::ofstream(dir + "/tokenizer.json") << j.str();
  }
  const std::string f32 = tmp.Sub("f32.gguf");
  ASSERT_TRUE(ExportGguf(dir, f32, {}).ok());
  ModelLoadOptions lo;
  lo.show_progress = false;
  auto hf = Model::Load(dir, lo);
  ASSERT_TRUE(hf.ok()) << hf.status().ToString();

  for (const char* type : {"Q8_0", "Q4_0", "Q4_K_M", "Q6_K"}) {
    SCOPED_TRACE(type);
    const std::string q = tmp.Sub(std::string(type) + ".gguf");
    const std::string cmd = Quantizer() + " " + f32 + " " + q + " " + type + " 2 > " +
                            tmp.Sub("quantize.log") + " 2>&1";
    ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd;
    auto m = Model::Load(q, lo);
    ASSERT_TRUE(m.ok()) << m.status().ToString();
    const ModelConfig& a = (*hf)->config();
    const ModelConfig& b = (*m)->config();
    EXPECT_EQ(b.arch, a.arch);
    EXPECT_EQ(b.vocab_size, a.vocab_size);
    EXPECT_EQ(b.hidden_size, a.hidden_size);
    EXPECT_EQ(b.num_layers, a.num_layers);
    EXPECT_EQ(b.head_dim, a.head_dim);
    EXPECT_EQ(b.num_kv_heads, a.num_kv_heads);
    EXPECT_EQ(b.RopeInvFreq(), a.RopeInvFreq());

    auto file = GgufCheckpoint::Open(q);
    ASSERT_TRUE(file.ok());
    const ModelWeights& w = dynamic_cast<Decoder&>(**m).weights();
    size_t decode_bytes = 0;
    int quantized = 0;
    for (const ExpectedTensor& e : ExpectedTensors(b, ArchFor(b.arch))) {
      const MatrixView* v = Bound(w, e);
      if (v == nullptr) continue;
      const TensorInfo* t = (*file)->Find(e.gguf_name);
      ASSERT_NE(t, nullptr) << e.gguf_name;
      EXPECT_EQ(v->dtype, t->dtype) << e.gguf_name;
      quantized += IsQuantized(v->dtype);
      const size_t row_bytes = v->row_bytes();
      ASSERT_EQ(row_bytes * v->rows, t->num_bytes) << e.gguf_name;
      if (e.role != TensorRole::kEmbed) decode_bytes += t->num_bytes;
      // Each bound row is the file's row (llama Q/K: the row the converter moved it to).
      std::vector<int64_t> hf_row(v->rows);
      for (int64_t r = 0; r < v->rows; ++r) hf_row[r] = r;
      if (e.gguf_rope_heads > 0)
        hf_row = LlamaRopePermutation(e.gguf_rope_heads, v->rows / e.gguf_rope_heads);
      for (int64_t g = 0; g < v->rows; ++g)
        ASSERT_EQ(std::memcmp(v->row(hf_row[g]), t->data + g * row_bytes, row_bytes), 0)
            << e.gguf_name << " row " << g;
    }
    EXPECT_GT(quantized, 8);
    EXPECT_EQ(w.decode_bytes_per_token, decode_bytes);
  }
}

INSTANTIATE_TEST_SUITE_P(Archs, QuantizedLoad,
                         ::testing::Values(Architecture::kLlama, Architecture::kQwen3),
                         [](const auto& info) {
                           return std::string(ArchFor(info.param).gguf_name);
                         });

}  // namespace
}  // namespace kvfork
