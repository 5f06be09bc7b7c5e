// Loading: a good model loads; every kind of bad model gives a clear error
// naming the file and field or tensor, and never crashes.
#include <cmath>
#include <fstream>
#include <sstream>

#include <gtest/gtest.h>

#include "core/bf16.h"
#include "model/decoder.h"
#include "model/model.h"
#include "model_test_util.h"
#include "proc_smaps.h"

namespace kvfork {
namespace {

using testing::ReadTensors;
using testing::TempDir;
using testing::TinyOptions;
namespace fs = std::filesystem;

ModelLoadOptions Quiet() {
  ModelLoadOptions o;
  o.show_progress = false;
  return o;
}

void ExpectLoadError(const std::string& dir, StatusCode code,
                     const std::vector<std::string>& needles) {
  auto m = Model::Load(dir, Quiet());
  ASSERT_FALSE(m.ok());
  EXPECT_EQ(m.status().code(), code) << m.status().ToString();
  for (const std::string& n : needles)
    EXPECT_NE(m.status().message().find(n), std::string::npos)
        << "missing \"" << n << "\" in " << m.status().ToString();
}

std::string WriteTiny(const TempDir& tmp, Architecture arch, bool tie, DType dtype = DType::kF32) {
  std::string dir = tmp.Sub("m");
  Status s = WriteRandomModel(TinyOptions(arch, dtype, tie, false), dir);
  KVFORK_CHECK_MSG(s.ok(), s.ToString());
  return dir;
}

std::vector<float> LastLogits(Model& m, const std::vector<int32_t>& ids) {
  KvLayout layout = m.MakeKvLayout(KvDType::kF32, 16);
  testing::LocalKv kv(layout, static_cast<int64_t>(ids.size()));
  ForwardBatch b;
  b.tokens = ids;
  b.seqs = {{static_cast<int64_t>(ids.size()), 0, kv.blocks.data(), false}};
  ThreadPool pool(1);
  std::vector<float> logits;
  Status s = m.Forward(b, layout, pool, &logits);
  KVFORK_CHECK_MSG(s.ok(), s.ToString());
  return logits;
}

TEST(ModelLoad, LoadsBothArchitecturesTiedAndUntied) {
  for (Architecture arch : {Architecture::kLlama, Architecture::kQwen3}) {
    for (bool tie : {false, true}) {
      TempDir tmp;
      std::string dir = WriteTiny(tmp, arch, tie);
      auto st = SafetensorsFile::Open(dir + "/model.safetensors");
      ASSERT_TRUE(st.ok());
      bool has_lm_head = false, has_qnorm = false;
      for (const TensorInfo& t : (*st)->tensors()) {
        has_lm_head |= t.name == "lm_head.weight";
        has_qnorm |= t.name == "model.layers.0.self_attn.q_norm.weight";
      }
      EXPECT_EQ(has_lm_head, !tie);
      EXPECT_EQ(has_qnorm, arch == Architecture::kQwen3);
      auto m = Model::Load(dir, Quiet());
      ASSERT_TRUE(m.ok()) << m.status().ToString();
      EXPECT_EQ((*m)->config().arch, arch);
      std::vector<float> logits = LastLogits(**m, {1, 2, 3});
      ASSERT_EQ(logits.size(), 256u);
      // Not near uniform: the random weights must shape the output.
      double mean = 0, var = 0;
      for (float v : logits) mean += v / logits.size();
      for (float v : logits) var += (v - mean) * (v - mean) / logits.size();
      EXPECT_GT(std::sqrt(var), 0.5);
    }
  }
}

// The writer pads the header so the tensor data starts on a cache line: the
// AMX MatMul loads 64-byte rows of W, and a row split over two lines slows
// the decode GEMV. mmap maps offset 0 to a page, so file offset = alignment.
TEST(ModelLoad, WrittenTensorsStartOnCacheLines) {
  for (DType dtype : {DType::kBf16, DType::kF32}) {
    TempDir tmp;
    std::string dir = WriteTiny(tmp, Architecture::kQwen3, false, dtype);
    auto st = SafetensorsFile::Open(dir + "/model.safetensors");
    ASSERT_TRUE(st.ok());
    int matrices = 0;
    for (const TensorInfo& t : (*st)->tensors()) {
      if (t.shape.size() != 2) continue;  // norms of odd sizes may follow any offset
      ++matrices;
      EXPECT_EQ(reinterpret_cast<uintptr_t>(t.data) % 64, 0u) << t.name;
    }
    EXPECT_GT(matrices, 8);
  }
}

// The weights are read whole every decode step: the mapping asks for 2 MB
// pages (VmFlags "hg" is MADV_HUGEPAGE), which cut a decode-like GEMV sweep
// from 49 to 46 ms (docs/kernels.md).
TEST(ModelLoad, WeightsMappingAdvisesHugePages) {
  if (!testing::KernelHasThp()) GTEST_SKIP() << "kernel without transparent huge pages";
  TempDir tmp;
  std::string dir = WriteTiny(tmp, Architecture::kQwen3, false, DType::kBf16);
  auto st = SafetensorsFile::Open(dir + "/model.safetensors");
  ASSERT_TRUE(st.ok());
  const std::string flags = testing::VmFlagsOf((*st)->tensors().front().data);
  ASSERT_FALSE(flags.empty()) << "no smaps entry for the mapping";
  EXPECT_NE(flags.find(" hg"), std::string::npos) << flags;
}

TEST(ModelLoad, MissingFiles) {
  ExpectLoadError("/nonexistent/model", StatusCode::kNotFound, {"/nonexistent/model"});
  TempDir tmp;
  std::string dir = WriteTiny(tmp, Architecture::kLlama, false);
  fs::remove(dir + "/model.safetensors");
  ExpectLoadError(dir, StatusCode::kNotFound, {"model.safetensors"});
  fs::remove(dir + "/config.json");
  ExpectLoadError(dir, StatusCode::kNotFound, {"config.json"});
}

TEST(ModelLoad, TruncatedFile) {
  TempDir tmp;
  std::string dir = WriteTiny(tmp, Architecture::kLlama, false);
  const std::string path = dir + "/model.safetensors";
  const auto size = fs::file_size(path);
  fs::resize_file(path, size - 100);
  ExpectLoadError(dir, StatusCode::kDataLoss, {path, "out of range", "truncated"});
  fs::resize_file(path, 200);  // inside the header
  ExpectLoadError(dir, StatusCode::kDataLoss, {path, "truncated"});
  fs::resize_file(path, 5);  // not even the length
  ExpectLoadError(dir, StatusCode::kDataLoss, {path, "truncated"});
}

TEST(ModelLoad, CorruptHeader) {
  TempDir tmp;
  std::string dir = WriteTiny(tmp, Architecture::kLlama, false);
  const std::string path = dir + "/model.safetensors";
  {
    std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(8);
    f.write("#garbage#", 9);
  }
  ExpectLoadError(dir, StatusCode::kDataLoss, {path, "corrupt header"});
  {
    std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
    const char huge[8] = {0, 0, 0, 0, 0, 0, 0, 0x10};
    f.write(huge, 8);
  }
  ExpectLoadError(dir, StatusCode::kDataLoss, {path, "corrupt header"});
}

// Rewrites the checkpoint after `edit` changes its tensor list.
template <typename Edit>
std::string EditTensors(const TempDir& tmp, Architecture arch, bool tie, Edit edit) {
  std::string dir = WriteTiny(tmp, arch, tie);
  auto tensors = ReadTensors(dir + "/model.safetensors");
  edit(&tensors);
  Status s = WriteSafetensors(dir + "/model.safetensors", tensors);
  KVFORK_CHECK_MSG(s.ok(), s.ToString());
  return dir;
}

TEST(ModelLoad, MissingTensor) {
  TempDir tmp;
  std::string dir = EditTensors(tmp, Architecture::kQwen3, false, [](auto* t) {
    std::erase_if(*t, [](const TensorToWrite& x) {
      return x.name == "model.layers.1.self_attn.k_norm.weight";
    });
  });
  ExpectLoadError(dir, StatusCode::kNotFound,
                  {"model.layers.1.self_attn.k_norm.weight", "missing", "[16]"});
}

TEST(ModelLoad, ExtraTensor) {
  TempDir tmp;
  std::string dir = EditTensors(tmp, Architecture::kLlama, false, [](auto* t) {
    t->push_back({"model.layers.0.self_attn.q_proj.bias", DType::kF32, {64},
                  std::vector<uint8_t>(256)});
  });
  ExpectLoadError(dir, StatusCode::kInvalidArgument,
                  {"unexpected tensor", "model.layers.0.self_attn.q_proj.bias"});
  // A Qwen3 norm in a Llama model is extra too.
  TempDir tmp2;
  dir = EditTensors(tmp2, Architecture::kLlama, false, [](auto* t) {
    t->push_back({"model.layers.0.self_attn.q_norm.weight", DType::kF32, {16},
                  std::vector<uint8_t>(64)});
  });
  ExpectLoadError(dir, StatusCode::kInvalidArgument, {"model.layers.0.self_attn.q_norm.weight"});
}

TEST(ModelLoad, WrongShape) {
  TempDir tmp;
  std::string dir = EditTensors(tmp, Architecture::kLlama, false, [](auto* t) {
    for (TensorToWrite& x : *t)
      if (x.name == "model.layers.1.mlp.up_proj.weight") x.shape = {64, 128};  // transposed
  });
  ExpectLoadError(dir, StatusCode::kInvalidArgument,
                  {"model.layers.1.mlp.up_proj.weight", "[64, 128]", "[128, 64]"});
}

TEST(ModelLoad, UntiedWithoutLmHeadIsMissing) {
  TempDir tmp;
  std::string dir = EditTensors(tmp, Architecture::kLlama, false, [](auto* t) {
    std::erase_if(*t, [](const TensorToWrite& x) { return x.name == "lm_head.weight"; });
  });
  ExpectLoadError(dir, StatusCode::kNotFound, {"lm_head.weight"});
}

TEST(ModelLoad, UnknownDtype) {
  TempDir tmp;
  std::string dir = WriteTiny(tmp, Architecture::kLlama, false);
  // A hand-written file whose only tensor is I8.
  std::string header = R"({"model.embed_tokens.weight":{"dtype":"I8","shape":[4],"data_offsets":[0,4]}})";
  std::ofstream f(dir + "/model.safetensors", std::ios::binary | std::ios::trunc);
  uint64_t n = header.size();
  f.write(reinterpret_cast<const char*>(&n), 8);
  f << header << "abcd";
  f.close();
  ExpectLoadError(dir, StatusCode::kUnimplemented, {"model.embed_tokens.weight", "I8"});
}

TEST(ModelLoad, UnsupportedArchitectureAndRope) {
  TempDir tmp;
  std::string dir = WriteTiny(tmp, Architecture::kLlama, false);
  auto rewrite = [&](const std::string& from, const std::string& to) {
    std::ifstream in(dir + "/config.json");
    std::stringstream ss;
    ss << in.rdbuf();
    std::string s = ss.str();
    size_t at = s.find(from);
    ASSERT_NE(at, std::string::npos);
    s.replace(at, from.size(), to);
    std::ofstream(dir + "/config.json", std::ios::trunc) << s;
  };
  rewrite("\"LlamaForCausalLM\"", "\"GPT2LMHeadModel\"");
  ExpectLoadError(dir, StatusCode::kUnimplemented, {"GPT2LMHeadModel", "config.json"});
  rewrite("\"GPT2LMHeadModel\"", "\"LlamaForCausalLM\"");
  rewrite("\"rope_scaling\": null", R"("rope_scaling": {"rope_type": "dynamic", "factor": 2.0})");
  ExpectLoadError(dir, StatusCode::kUnimplemented, {"dynamic", "config.json"});
}

// Peak resident memory of this process so far, in KiB (VmHWM).
int64_t PeakRssKiB() {
  std::ifstream status("/proc/self/status");
  std::string line;
  while (std::getline(status, line))
    if (line.rfind("VmHWM:", 0) == 0) return std::stoll(line.substr(6));
  return -1;
}

TEST(ModelLoad, HugeSizesAreRefusedBeforeAllocating) {
  TempDir tmp;
  std::string dir = WriteTiny(tmp, Architecture::kLlama, false);
  auto set_layers = [&](const std::string& from, const std::string& to) {
    std::ifstream in(dir + "/config.json");
    std::stringstream ss;
    ss << in.rdbuf();
    std::string s = ss.str();
    const size_t at = s.find(from);
    ASSERT_NE(at, std::string::npos);
    s.replace(at, from.size(), to);
    std::ofstream(dir + "/config.json", std::ios::trunc) << s;
  };
  const int64_t rss_before = PeakRssKiB();
  // 1e9 layers used to build 9e9 tensor names (hundreds of GB) first.
  set_layers("\"num_hidden_layers\": 2", "\"num_hidden_layers\": 1000000000");
  ExpectLoadError(dir, StatusCode::kInvalidArgument,
                  {"num_hidden_layers 1000000000 needs at least 9000000000 tensors",
                   "the checkpoint has"});
  EXPECT_LT(PeakRssKiB() - rss_before, 64 * 1024) << "KiB more at peak";
  set_layers("\"num_hidden_layers\": 1000000000", "\"num_hidden_layers\": 5000000000");
  ExpectLoadError(dir, StatusCode::kInvalidArgument,
                  {"\"num_hidden_layers\" is 5000000000, above 2147483647"});

  // A shape whose element count does not fit 64 bits.
  std::string header =
      R"({"model.embed_tokens.weight":{"dtype":"F32","shape":[4294967296,4294967296,16],"data_offsets":[0,4]}})";
  {
    std::ofstream f(dir + "/model.safetensors", std::ios::binary | std::ios::trunc);
    uint64_t n = header.size();
    f.write(reinterpret_cast<const char*>(&n), 8);
    f << header << "abcd";
  }
  set_layers("\"num_hidden_layers\": 5000000000", "\"num_hidden_layers\": 2");
  ExpectLoadError(dir, StatusCode::kDataLoss,
                  {"model.embed_tokens.weight", "has more elements than fit 64 bits"});
  // One that fits elements but not bytes: 2^62 f32 elements.
  header =
      R"({"model.embed_tokens.weight":{"dtype":"F32","shape":[4611686018427387904],"data_offsets":[0,4]}})";
  {
    std::ofstream f(dir + "/model.safetensors", std::ios::binary | std::ios::trunc);
    uint64_t n = header.size();
    f.write(reinterpret_cast<const char*>(&n), 8);
    f << header << "abcd";
  }
  ExpectLoadError(dir, StatusCode::kDataLoss, {"needs more than 2^64"});
}

TEST(ModelLoad, ShardedIndexAndMissingShard) {
  TempDir tmp;
  std::string dir = WriteTiny(tmp, Architecture::kQwen3, true);
  auto m1 = Model::Load(dir, Quiet());
  ASSERT_TRUE(m1.ok());
  std::vector<float> expect = LastLogits(**m1, {5, 6, 7, 8});
  auto tensors = ReadTensors(dir + "/model.safetensors");
  std::vector<TensorToWrite> a, b;
  for (size_t i = 0; i < tensors.size(); ++i) (i % 2 ? a : b).push_back(tensors[i]);
  ASSERT_TRUE(WriteSafetensors(dir + "/model-00001-of-00002.safetensors", a).ok());
  ASSERT_TRUE(WriteSafetensors(dir + "/model-00002-of-00002.safetensors", b).ok());
  fs::remove(dir + "/model.safetensors");
  {
    std::ofstream idx(dir + "/model.safetensors.index.json");
    idx << "{\"metadata\": {}, \"weight_map\": {";
    for (size_t i = 0; i < tensors.size(); ++i)
      idx << (i ? "," : "") << "\"" << tensors[i].name << "\": \"model-0000"
          << (i % 2 ? 1 : 2) << "-of-00002.safetensors\"";
    idx << "}}";
  }
  auto m2 = Model::Load(dir, Quiet());
  ASSERT_TRUE(m2.ok()) << m2.status().ToString();
  EXPECT_EQ(LastLogits(**m2, {5, 6, 7, 8}), expect);
  m2 = Model::Load(dir, Quiet());  // reload is fine
  ASSERT_TRUE(m2.ok());
  fs::remove(dir + "/model-00002-of-00002.safetensors");
  ExpectLoadError(dir, StatusCode::kNotFound, {"model-00002-of-00002.safetensors", "missing"});
}

TEST(ModelLoad, F16ConvertedAtLoad) {
  TempDir tmp;
  std::string dir = WriteTiny(tmp, Architecture::kLlama, false, DType::kF16);
  auto file = SafetensorsFile::Open(dir + "/model.safetensors");
  ASSERT_TRUE(file.ok());
  const TensorInfo* embed = nullptr;
  for (const TensorInfo& t : (*file)->tensors())
    if (t.name == "model.embed_tokens.weight") embed = &t;
  ASSERT_NE(embed, nullptr);
  ASSERT_EQ(embed->dtype, DType::kF16);
  const uint16_t* raw = reinterpret_cast<const uint16_t*>(embed->data);
  for (bool to_f32 : {false, true}) {
    ModelLoadOptions o = Quiet();
    o.f16_to_f32 = to_f32;
    auto m = Model::Load(dir, o);
    ASSERT_TRUE(m.ok()) << m.status().ToString();
    const ModelWeights& w = static_cast<Decoder&>(**m).weights();
    ASSERT_EQ(w.embed_tokens.dtype, to_f32 ? DType::kF32 : DType::kBf16);
    for (int64_t i = 0; i < *embed->NumElements(); ++i) {
      float want = F16ToF32(raw[i]);
      float got = to_f32 ? static_cast<const float*>(w.embed_tokens.data)[i]
                         : Bf16ToF32(static_cast<const uint16_t*>(w.embed_tokens.data)[i]);
      if (!to_f32) want = Bf16ToF32(F32ToBf16(want));
      ASSERT_EQ(got, want) << i;
    }
    EXPECT_EQ(LastLogits(**m, {1, 2}).size(), 256u);
  }
}

TEST(ModelLoad, ForwardRejectsBadBatch) {
  TempDir tmp;
  std::string dir = WriteTiny(tmp, Architecture::kLlama, false);
  auto m = Model::Load(dir, Quiet());
  ASSERT_TRUE(m.ok());
  KvLayout layout = (*m)->MakeKvLayout(KvDType::kBf16, 16);
  testing::LocalKv kv(layout, 16);
  ThreadPool pool(1);
  std::vector<float> logits;
  ForwardBatch b;
  b.tokens = {1, 256};
  b.seqs = {{2, 0, kv.blocks.data(), false}};
  Status s = (*m)->Forward(b, layout, pool, &logits);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("256"), std::string::npos) << s.ToString();
  b.tokens = {1, 2, 3};
  s = (*m)->Forward(b, layout, pool, &logits);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << s.ToString();
  KvLayout wrong = layout;
  wrong.num_layers = 3;
  b.tokens = {1, 2};
  s = (*m)->Forward(b, wrong, pool, &logits);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << s.ToString();
}

}  // namespace
}  // namespace kvfork
