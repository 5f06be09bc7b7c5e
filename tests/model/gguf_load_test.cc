// Loading GGUF models: a random HF directory exported by export-gguf loads
// from the .gguf (single and split) with bitwise the logits of the directory,
// for every architecture and f32/bf16; every kind of bad file is an error
// naming the file and the key or tensor, never a crash.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <fstream>
#include <functional>
#include <sstream>
#include <tuple>

#include "model/decoder.h"
#include "model/gguf_checkpoint.h"
#include "model/gguf_export.h"
#include "model/gguf_writer.h"
#include "model/arch.h"
#include "model/model.h"
#include "model_test_util.h"

namespace kvfork {
namespace {

using testing::TempDir;
using testing::TinyOptions;
namespace fs = std::filesystem;

constexpr int64_t kVocab = 256;

ModelLoadOptions Quiet() {
  ModelLoadOptions o;
  o.show_progress = false;
  return o;
}

// export-gguf needs a tokenizer.json: a BPE vocabulary "t0".."t255", no merges.
void WriteTokenizer(const std::string& dir) {
  std::ostringstream j;
  j << R"({"model": {"type": "BPE", "vocab": {)";
  for (int64_t i = 0; i < kVocab; ++i) j << (i ? ", " : "") << "\"t" << i << "\": " << i;
  j << R"(}, "merges": []}})";
  std::ofstream(dir + "/tokenizer.json") << j.str();
}

GgmlType GgmlOf(DType t) {
  return t == DType::kF32 ? GgmlType::kF32 : t == DType::kF16 ? GgmlType::kF16 : GgmlType::kBf16;
}

struct Exported {
  std::string dir;   // the HF directory
  std::string gguf;  // dir/model.gguf
};

Exported ExportTiny(const TempDir& tmp, Architecture arch, DType dtype, bool tie = false,
                    bool rope_scaling = false) {
  Exported e{tmp.Sub("m"), tmp.Sub("m") + "/model.gguf"};
  Status s = WriteRandomModel(TinyOptions(arch, dtype, tie, rope_scaling, kVocab), e.dir);
  KVFORK_CHECK_MSG(s.ok(), s.ToString());
  WriteTokenizer(e.dir);
  GgufExportOptions o;
  o.dtype = GgmlOf(dtype);
  s = ExportGguf(e.dir, e.gguf, o);
  KVFORK_CHECK_MSG(s.ok(), s.ToString());
  return e;
}

// Logits of every position of a 7-token prompt.
std::vector<float> AllLogits(Model& m) {
  const std::vector<int32_t> ids = {1, 17, 200, 3, 99, 4, 255};
  KvLayout layout = m.MakeKvLayout(KvDType::kF32, 16);
  testing::LocalKv kv(layout, static_cast<int64_t>(ids.size()));
  ForwardBatch b;
  b.tokens = ids;
  b.seqs = {{static_cast<int64_t>(ids.size()), 0, kv.blocks.data(), true}};
  ThreadPool pool(2);
  std::vector<float> logits;
  Status s = m.Forward(b, layout, pool, &logits);
  KVFORK_CHECK_MSG(s.ok(), s.ToString());
  return logits;
}

bool BitEqual(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

std::unique_ptr<Model> MustLoad(const std::string& path) {
  auto m = Model::Load(path, Quiet());
  KVFORK_CHECK_MSG(m.ok(), m.status().ToString());
  return std::move(m).value();
}

void ExpectLoadError(const std::string& path, StatusCode code,
                     const std::vector<std::string>& needles) {
  auto m = Model::Load(path, Quiet());
  ASSERT_FALSE(m.ok()) << path << " loaded";
  EXPECT_EQ(m.status().code(), code) << m.status().ToString();
  for (const std::string& n : needles)
    EXPECT_NE(m.status().message().find(n), std::string::npos)
        << "missing \"" << n << "\" in " << m.status().ToString();
}

// Writes a copy of a GGUF's metadata (edited by `edit_kv`) and of the
// tensors `keep` accepts, for the bad-file and split cases.
using KvList = std::vector<std::pair<std::string, GgufValue>>;
void Rewrite(const std::string& in, const std::string& out,
             const std::function<void(KvList*)>& edit_kv,
             const std::function<bool(const std::string&)>& keep = nullptr) {
  auto src = GgufCheckpoint::Open(in);
  KVFORK_CHECK_MSG(src.ok(), src.status().ToString());
  KvList kv = (*src)->metadata().metadata();
  if (edit_kv) edit_kv(&kv);
  GgufWriter w;
  for (auto& [k, v] : kv) w.Set(k, v);
  for (const auto& [name, t] : (*src)->tensors()) {
    if (keep && !keep(name)) continue;
    std::vector<int64_t> ne(t.shape.rbegin(), t.shape.rend());
    const TensorInfo* p = &t;
    Status s = w.AddTensor(name, GgmlOf(t.dtype), ne, [p](uint8_t* dst) {
      std::memcpy(dst, p->data, p->num_bytes);
      return OkStatus();
    });
    KVFORK_CHECK_MSG(s.ok(), s.ToString());
  }
  Status s = w.Write(out);
  KVFORK_CHECK_MSG(s.ok(), s.ToString());
}

void SetKey(KvList* kv, const std::string& key, GgufValue v) {
  for (auto& [k, value] : *kv)
    if (k == key) {
      value = std::move(v);
      return;
    }
  kv->emplace_back(key, std::move(v));
}

void DropKey(KvList* kv, const std::string& key) {
  std::erase_if(*kv, [&](const auto& p) { return p.first == key; });
}

GgufValue U16(uint16_t v) {
  GgufValue g;
  g.type = GgufType::kUint16;
  g.payload.resize(2);
  std::memcpy(g.payload.data(), &v, 2);
  return g;
}

// The tensor directory entry of `name` in a GGUF file's bytes:
// u64 length, name, u32 n_dims, u64 ne[n_dims], u32 type, u64 offset.
struct DirEntry {
  size_t ne_pos = 0, type_pos = 0, offset_pos = 0;
};
DirEntry FindEntry(const std::string& bytes, const std::string& name) {
  std::string key(8, '\0');
  const uint64_t n = name.size();
  std::memcpy(key.data(), &n, 8);
  key += name;
  const size_t at = bytes.rfind(key);  // the directory follows the metadata
  KVFORK_CHECK_MSG(at != std::string::npos, "no directory entry for " + name);
  DirEntry e;
  size_t p = at + key.size();
  uint32_t n_dims;
  std::memcpy(&n_dims, bytes.data() + p, 4);
  e.ne_pos = p + 4;
  e.type_pos = e.ne_pos + 8 * n_dims;
  e.offset_pos = e.type_pos + 4;
  return e;
}

std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

void WriteFile(const std::string& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary | std::ios::trunc) << bytes;
}

template <typename T>
void Poke(std::string* bytes, size_t pos, T v) {
  std::memcpy(bytes->data() + pos, &v, sizeof(T));
}

const char* ArchLabel(Architecture a) { return ArchFor(a).ModelType(); }

TEST(GgufLoad, SameLogitsAsTheHfDirectory) {
  // Gemma 3: its norms' +1 is added in f32 by the loader (HF) and by
  // export-gguf (baked, as llama.cpp's converter does), so the bits agree.
  // Qwen3 MoE: bitwise in f32; in bf16 / f16 the GGUF's router is f32.
  for (Architecture arch : {Architecture::kLlama, Architecture::kQwen3, Architecture::kQwen2,
                            Architecture::kSmolLM3, Architecture::kPhi3, Architecture::kGemma3,
                            Architecture::kQwen3Moe}) {
    // f16 is converted to bf16 at load from either file, the same way.
    for (DType dtype : {DType::kF32, DType::kBf16, DType::kF16}) {
      for (bool tie : {false, true}) {
        const std::string where =
            std::string(ArchLabel(arch)) + " " + DTypeName(dtype) + (tie ? " tied" : " untied");
        TempDir tmp;
        Exported e = ExportTiny(tmp, arch, dtype, tie);
        std::unique_ptr<Model> hf = MustLoad(e.dir);
        std::unique_ptr<Model> gguf = MustLoad(e.gguf);
        const ModelConfig& a = hf->config();
        const ModelConfig& b = gguf->config();
        EXPECT_EQ(b.arch, arch) << where;
        EXPECT_EQ(b.vocab_size, a.vocab_size) << where;
        EXPECT_EQ(b.hidden_size, a.hidden_size) << where;
        EXPECT_EQ(b.intermediate_size, a.intermediate_size) << where;
        EXPECT_EQ(b.num_layers, a.num_layers) << where;
        EXPECT_EQ(b.num_heads, a.num_heads) << where;
        EXPECT_EQ(b.num_kv_heads, a.num_kv_heads) << where;
        EXPECT_EQ(b.head_dim, a.head_dim) << where;
        EXPECT_EQ(b.max_position_embeddings, a.max_position_embeddings) << where;
        EXPECT_EQ(b.tie_word_embeddings, tie) << where;
        EXPECT_EQ(static_cast<float>(b.rms_norm_eps), static_cast<float>(a.rms_norm_eps)) << where;
        EXPECT_EQ(b.RopeInvFreq(), a.RopeInvFreq()) << where;
        EXPECT_EQ(b.RotaryDim(), a.RotaryDim()) << where;
        EXPECT_EQ(b.layer_uses_rope, a.layer_uses_rope) << where;
        EXPECT_EQ(b.RopeLocalInvFreq(), a.RopeLocalInvFreq()) << where;
        EXPECT_EQ(b.final_logit_softcapping, a.final_logit_softcapping) << where;
        EXPECT_EQ(b.hidden_act, a.hidden_act) << where;
        EXPECT_EQ(b.query_pre_attn_scalar, a.query_pre_attn_scalar) << where;
        EXPECT_EQ(b.num_experts, a.num_experts) << where;
        EXPECT_EQ(b.num_experts_per_tok, a.num_experts_per_tok) << where;
        EXPECT_EQ(b.moe_intermediate_size, a.moe_intermediate_size) << where;
        EXPECT_EQ(b.norm_topk_prob, a.norm_topk_prob) << where;
        for (int64_t l = 0; l < a.num_layers; ++l) {
          EXPECT_EQ(b.LayerWindow(l), a.LayerWindow(l)) << where << " layer " << l;
          EXPECT_EQ(b.LayerIsMoe(l), a.LayerIsMoe(l)) << where << " layer " << l;
        }
        const auto& wa = dynamic_cast<Decoder&>(*hf).weights();
        const auto& wb = dynamic_cast<Decoder&>(*gguf).weights();
        EXPECT_EQ(wb.num_params, wa.num_params) << where;
        EXPECT_EQ(wb.embed_tokens.dtype, dtype == DType::kF16 ? DType::kBf16 : dtype) << where;
        const std::vector<float> want = AllLogits(*hf);
        ASSERT_EQ(want.size(), 7u * kVocab);
        if (arch == Architecture::kQwen3Moe && dtype != DType::kF32) {
          // The converter keeps the router (ffn_gate_inp) f32 whatever the
          // dtype, so the GGUF's router product differs from the bf16
          // directory's (whose input is rounded to bf16): the same weights,
          // 2 more bytes each, logits close but not the same bits.
          const size_t router_bytes = static_cast<size_t>(a.num_layers * a.num_experts *
                                                          a.hidden_size) * 2;
          EXPECT_EQ(wb.decode_bytes_per_token, wa.decode_bytes_per_token + router_bytes) << where;
          const std::vector<float> got = AllLogits(*gguf);
          double worst = 0, scale = 0;
          for (size_t i = 0; i < want.size(); ++i) {
            worst = std::max(worst, static_cast<double>(std::abs(got[i] - want[i])));
            scale = std::max(scale, static_cast<double>(std::abs(want[i])));
          }
          EXPECT_LE(worst / scale, 2e-2) << where;
          continue;
        }
        EXPECT_EQ(wb.decode_bytes_per_token, wa.decode_bytes_per_token) << where;
        EXPECT_TRUE(BitEqual(AllLogits(*gguf), want)) << where;
      }
    }
  }
}

// export-gguf writes llama's Q and K rows in llama.cpp's interleaved order
// (what its converter does), and the loader puts them back.
TEST(GgufLoad, LlamaQkRowsArePermutedOnDiskAndRestoredOnLoad) {
  TempDir tmp;
  Exported e = ExportTiny(tmp, Architecture::kLlama, DType::kF32);
  auto gguf = GgufCheckpoint::Open(e.gguf);
  ASSERT_TRUE(gguf.ok()) << gguf.status().ToString();
  auto hf = SafetensorsCheckpoint::Open(e.dir);
  ASSERT_TRUE(hf.ok());
  std::unique_ptr<Model> loaded = MustLoad(e.gguf);
  const LayerWeights& L = dynamic_cast<Decoder&>(*loaded).weights().layers[0];
  for (const auto& [hf_name, gguf_name, view] :
       {std::tuple{"model.layers.0.self_attn.q_proj.weight", "blk.0.attn_q.weight", &L.q_proj},
        {"model.layers.0.self_attn.k_proj.weight", "blk.0.attn_k.weight", &L.k_proj}}) {
    const TensorInfo* h = (*hf)->Find(hf_name);
    const TensorInfo* g = (*gguf)->Find(gguf_name);
    ASSERT_TRUE(h && g);
    ASSERT_EQ(h->num_bytes, g->num_bytes);
    EXPECT_NE(std::memcmp(h->data, g->data, h->num_bytes), 0) << gguf_name << " not permuted";
    EXPECT_EQ(std::memcmp(h->data, view->data, h->num_bytes), 0) << gguf_name << " not restored";
  }
}

// llama3 rope scaling travels as llama.cpp's rope_freqs tensor (one factor
// per pair): the frequencies agree to float rounding, not bit for bit, as the
// factors are rounded to f32 once on the way.
TEST(GgufLoad, Llama3RopeScalingFromRopeFreqs) {
  TempDir tmp;
  Exported e = ExportTiny(tmp, Architecture::kLlama, DType::kF32, false, /*rope_scaling=*/true);
  std::unique_ptr<Model> hf = MustLoad(e.dir);
  std::unique_ptr<Model> gguf = MustLoad(e.gguf);
  EXPECT_EQ(gguf->config().rope_scaling.type, RopeScaling::Type::kFreqFactors);
  const std::vector<float> a = hf->config().RopeInvFreq(), b = gguf->config().RopeInvFreq();
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) EXPECT_NEAR(b[i], a[i], 3e-7 * a[i]) << "pair " << i;
  const std::vector<float> x = AllLogits(*hf), y = AllLogits(*gguf);
  ASSERT_EQ(x.size(), y.size());
  double max_diff = 0;
  for (size_t i = 0; i < x.size(); ++i)
    max_diff = std::max(max_diff, std::fabs(double(x[i]) - y[i]));
  EXPECT_LT(max_diff, 1e-4);
}

// phi3's longrope goes out as rope_factors_short / rope_factors_long (exact:
// the factors are f32 already) and rope.scaling.attn_factor (rounded to f32
// once), and comes back as the same scaling.
TEST(GgufLoad, Phi3LongRopeFromRopeFactors) {
  TempDir tmp;
  Exported e = ExportTiny(tmp, Architecture::kPhi3, DType::kF32, false, /*rope_scaling=*/true);
  std::unique_ptr<Model> hf = MustLoad(e.dir);
  std::unique_ptr<Model> gguf = MustLoad(e.gguf);
  const RopeScaling& a = hf->config().rope_scaling;
  const RopeScaling& b = gguf->config().rope_scaling;
  ASSERT_EQ(a.type, RopeScaling::Type::kLongRope);
  ASSERT_EQ(b.type, RopeScaling::Type::kLongRope);
  EXPECT_EQ(b.short_factor, a.short_factor);
  EXPECT_EQ(b.long_factor, a.long_factor);
  EXPECT_EQ(b.original_max_position_embeddings, 32);
  EXPECT_TRUE(a.use_long_factor);  // context 4096 > 32, on both
  EXPECT_TRUE(b.use_long_factor);
  EXPECT_EQ(static_cast<float>(b.attention_factor), static_cast<float>(a.attention_factor));
  EXPECT_EQ(gguf->config().RotaryDim(), 12);  // 16 * 0.75
  EXPECT_EQ(b.short_factor.size(), 6u);
  const std::vector<float> x = AllLogits(*hf), y = AllLogits(*gguf);
  ASSERT_EQ(x.size(), y.size());
  double max_diff = 0;
  for (size_t i = 0; i < x.size(); ++i)
    max_diff = std::max(max_diff, std::fabs(double(x[i]) - y[i]));
  EXPECT_LT(max_diff, 1e-4);
}

// llama.cpp hard-codes smollm3's RoPE-less layers (every 4th); a config with
// another pattern cannot be exported, and the loader restores that one.
TEST(GgufLoad, SmolLM3NoRopeLayers) {
  TempDir tmp;
  Exported e = ExportTiny(tmp, Architecture::kSmolLM3, DType::kF32);
  std::unique_ptr<Model> gguf = MustLoad(e.gguf);
  EXPECT_EQ(gguf->config().layer_uses_rope, (std::vector<bool>{true, true, true, false}));
  std::string cfg = ReadFile(e.dir + "/config.json");
  const std::string from = "\"no_rope_layers\": [\n    1,\n    1,\n    1,\n    0\n  ]";
  const size_t at = cfg.find(from);
  ASSERT_NE(at, std::string::npos) << cfg;
  WriteFile(e.dir + "/config.json",
            cfg.replace(at, from.size(), "\"no_rope_layers\": [1, 0, 1, 1]"));
  Status s = ExportGguf(e.dir, tmp.Sub("other.gguf"), GgufExportOptions());
  EXPECT_EQ(s.code(), StatusCode::kUnimplemented) << s.ToString();
  EXPECT_NE(s.message().find("no_rope_layers"), std::string::npos) << s.ToString();
}

TEST(GgufLoad, SplitFiles) {
  TempDir tmp;
  Exported e = ExportTiny(tmp, Architecture::kQwen3, DType::kBf16);
  const std::vector<float> want = AllLogits(*MustLoad(e.gguf));
  // Three parts as gguf-split writes them: the model's keys in the first,
  // split.no / split.count in each, the tensors shared out in order.
  const std::string prefix = tmp.Sub("split");
  auto src = GgufCheckpoint::Open(e.gguf);
  ASSERT_TRUE(src.ok());
  std::vector<std::string> names;
  for (const auto& [name, t] : (*src)->tensors()) names.push_back(name);
  const int kParts = 3;
  for (int part = 0; part < kParts; ++part) {
    auto in_part = [&](const std::string& name) {
      const size_t i = std::find(names.begin(), names.end(), name) - names.begin();
      return static_cast<int>(i * kParts / names.size()) == part;
    };
    Rewrite(
        e.gguf, GgufSplitPath(prefix, part, kParts),
        [&](KvList* kv) {
          if (part > 0) kv->clear();
          SetKey(kv, "split.no", U16(static_cast<uint16_t>(part)));
          SetKey(kv, "split.count", U16(kParts));
          GgufValue n = GgufValue::I32(static_cast<int32_t>(names.size()));
          SetKey(kv, "split.tensors.count", n);
        },
        in_part);
  }
  const std::string first = prefix + "-00001-of-00003.gguf";
  auto opened = GgufCheckpoint::Open(first);
  ASSERT_TRUE(opened.ok()) << opened.status().ToString();
  EXPECT_EQ((*opened)->files().size(), 3u);
  EXPECT_EQ((*opened)->tensors().size(), names.size());
  EXPECT_TRUE(BitEqual(AllLogits(*MustLoad(first)), want));
  // Any part names the model.
  EXPECT_TRUE(BitEqual(AllLogits(*MustLoad(prefix + "-00002-of-00003.gguf")), want));

  // A missing part names its file.
  fs::rename(prefix + "-00003-of-00003.gguf", tmp.Sub("away.gguf"));
  ExpectLoadError(first, StatusCode::kNotFound, {"split-00003-of-00003.gguf", "split 3 of 3"});
  fs::rename(tmp.Sub("away.gguf"), prefix + "-00003-of-00003.gguf");
  // A part that is not what its name says.
  fs::copy_file(prefix + "-00001-of-00003.gguf", prefix + "-00003-of-00003.gguf",
                fs::copy_options::overwrite_existing);
  ExpectLoadError(first, StatusCode::kDataLoss, {"split-00003-of-00003.gguf", "split.no"});
  // split.count without the NAME-0000K-of-0000N.gguf name.
  fs::copy_file(first, tmp.Sub("renamed.gguf"));
  ExpectLoadError(tmp.Sub("renamed.gguf"), StatusCode::kInvalidArgument,
                  {"renamed.gguf", "split.count"});
}

TEST(GgufLoad, TruncatedFileNamesTheFile) {
  TempDir tmp;
  Exported e = ExportTiny(tmp, Architecture::kQwen3, DType::kF32);
  const std::string bytes = ReadFile(e.gguf);
  const std::string cut = tmp.Sub("cut.gguf");
  // In the header, in the tensor directory, in the data, one byte short.
  for (size_t size : {size_t{0}, size_t{7}, size_t{100}, bytes.size() / 2, bytes.size() - 1}) {
    WriteFile(cut, bytes.substr(0, size));
    auto m = Model::Load(cut, Quiet());
    ASSERT_FALSE(m.ok()) << size;
    EXPECT_EQ(m.status().code(), StatusCode::kDataLoss) << size << ": " << m.status().ToString();
    EXPECT_NE(m.status().message().find("cut.gguf"), std::string::npos) << m.status().ToString();
  }
  // Cut in the data: the error names the tensor that runs past the end.
  WriteFile(cut, bytes.substr(0, bytes.size() - 1));
  ExpectLoadError(cut, StatusCode::kDataLoss, {"cut.gguf", "tensor \"", "past the end"});
}

TEST(GgufLoad, UnknownTensorTypeNamesTensorAndId) {
  TempDir tmp;
  Exported e = ExportTiny(tmp, Architecture::kQwen3, DType::kF32);
  std::string bytes = ReadFile(e.gguf);
  Poke<uint32_t>(&bytes, FindEntry(bytes, "blk.1.attn_v.weight").type_pos, 99);
  const std::string bad = tmp.Sub("type.gguf");
  WriteFile(bad, bytes);
  ExpectLoadError(bad, StatusCode::kUnimplemented, {"type.gguf", "blk.1.attn_v.weight", "99"});
}

TEST(GgufLoad, TensorOffsetPastTheEnd) {
  TempDir tmp;
  Exported e = ExportTiny(tmp, Architecture::kLlama, DType::kF32);
  std::string bytes = ReadFile(e.gguf);
  const DirEntry d = FindEntry(bytes, "blk.0.ffn_up.weight");
  const std::string bad = tmp.Sub("offset.gguf");
  for (uint64_t offset : {uint64_t{1} << 40, ~uint64_t{0} - 31, uint64_t{bytes.size()} / 32 * 32}) {
    Poke<uint64_t>(&bytes, d.offset_pos, offset);
    WriteFile(bad, bytes);
    ExpectLoadError(bad, StatusCode::kDataLoss, {"offset.gguf", "blk.0.ffn_up.weight"});
  }
  // A huge shape is refused before anything is read or allocated.
  bytes = ReadFile(e.gguf);
  Poke<uint64_t>(&bytes, FindEntry(bytes, "blk.0.ffn_up.weight").ne_pos + 8, uint64_t{1} << 62);
  WriteFile(bad, bytes);
  ExpectLoadError(bad, StatusCode::kDataLoss, {"blk.0.ffn_up.weight", "larger than the file"});
}

TEST(GgufLoad, MissingOrBadMetadata) {
  TempDir tmp;
  Exported e = ExportTiny(tmp, Architecture::kQwen3, DType::kF32);
  const std::string bad = tmp.Sub("bad.gguf");
  for (const char* key : {"qwen3.block_count", "qwen3.embedding_length", "qwen3.context_length",
                          "qwen3.attention.head_count", "qwen3.feed_forward_length",
                          "qwen3.attention.layer_norm_rms_epsilon", "general.architecture"}) {
    Rewrite(e.gguf, bad, [&](KvList* kv) { DropKey(kv, key); });
    ExpectLoadError(bad, StatusCode::kNotFound, {"bad.gguf", key});
  }
  Rewrite(e.gguf, bad,
          [](KvList* kv) { SetKey(kv, "general.architecture", GgufValue::String("mamba")); });
  ExpectLoadError(bad, StatusCode::kUnimplemented, {"general.architecture", "mamba", "qwen3"});
  Rewrite(e.gguf, bad, [](KvList* kv) { SetKey(kv, "qwen3.block_count", GgufValue::F32(2)); });
  ExpectLoadError(bad, StatusCode::kInvalidArgument, {"qwen3.block_count"});
  Rewrite(e.gguf, bad, [](KvList* kv) { SetKey(kv, "qwen3.vocab_size", GgufValue::U32(7)); });
  ExpectLoadError(bad, StatusCode::kInvalidArgument, {"qwen3.vocab_size", "token_embd"});
  Rewrite(e.gguf, bad,
          [](KvList* kv) { SetKey(kv, "qwen3.rope.scaling.type", GgufValue::String("yarn")); });
  ExpectLoadError(bad, StatusCode::kUnimplemented, {"qwen3.rope.scaling.type", "yarn"});
  Rewrite(e.gguf, bad, nullptr, [](const std::string& n) { return n != "blk.1.ffn_up.weight"; });
  ExpectLoadError(bad, StatusCode::kNotFound, {"bad.gguf", "blk.1.ffn_up.weight"});
  Rewrite(e.gguf, bad,
          [](KvList* kv) { SetKey(kv, "qwen3.feed_forward_length", GgufValue::U32(96)); });
  ExpectLoadError(bad, StatusCode::kInvalidArgument,
                  {"blk.0.ffn_gate.weight", "[128, 64]", "[96, 64]"});
  Rewrite(e.gguf, bad,
          [](KvList* kv) { SetKey(kv, "tokenizer.ggml.eos_token_id", GgufValue::U32(256)); });
  ExpectLoadError(bad, StatusCode::kInvalidArgument, {"tokenizer.ggml.eos_token_id", "256"});
}

// issue 24's keys and tensors: a bad rotary width, a window the context
// exceeds, half of longrope's factor pair, a bad attention factor, each named.
TEST(GgufLoad, Phi3AndSmolLM3BadMetadata) {
  TempDir tmp;
  Exported e = ExportTiny(tmp, Architecture::kPhi3, DType::kF32, false, /*rope_scaling=*/true);
  const std::string bad = tmp.Sub("bad.gguf");
  Rewrite(e.gguf, bad,
          [](KvList* kv) { SetKey(kv, "phi3.rope.dimension_count", GgufValue::U32(11)); });
  ExpectLoadError(bad, StatusCode::kUnimplemented, {"phi3.rope.dimension_count", "11"});
  Rewrite(e.gguf, bad,
          [](KvList* kv) { SetKey(kv, "phi3.attention.sliding_window", GgufValue::U32(2047)); });
  ExpectLoadError(bad, StatusCode::kUnimplemented, {"phi3.attention.sliding_window", "2047"});
  Rewrite(e.gguf, bad, nullptr,
          [](const std::string& n) { return n != "rope_factors_long.weight"; });
  ExpectLoadError(bad, StatusCode::kInvalidArgument, {"rope_factors_short.weight", "pair"});
  Rewrite(e.gguf, bad,
          [](KvList* kv) { SetKey(kv, "phi3.rope.scaling.attn_factor", GgufValue::F32(-1)); });
  ExpectLoadError(bad, StatusCode::kInvalidArgument, {"phi3.rope.scaling.attn_factor"});
  // Llama's permuted Q/K has no partial form.
  TempDir tmp2;
  Exported l = ExportTiny(tmp2, Architecture::kSmolLM3, DType::kF32);
  const std::string bad2 = tmp2.Sub("bad.gguf");
  Rewrite(l.gguf, bad2,
          [](KvList* kv) { SetKey(kv, "smollm3.rope.dimension_count", GgufValue::U32(8)); });
  ExpectLoadError(bad2, StatusCode::kUnimplemented, {"smollm3.rope.dimension_count", "8"});
}

// Qwen3 MoE: the experts stacked in one tensor per projection, as llama.cpp's
// converter writes them, the router kept f32 whatever the dtype; each
// expert key's absence or bad value named.
TEST(GgufLoad, Qwen3MoeStackedExpertsAndKeys) {
  TempDir tmp;
  Exported e = ExportTiny(tmp, Architecture::kQwen3Moe, DType::kBf16);
  auto file = GgufCheckpoint::Open(e.gguf);
  ASSERT_TRUE(file.ok()) << file.status().ToString();
  const TensorInfo* gate = (*file)->Find("blk.1.ffn_gate_exps.weight");
  ASSERT_NE(gate, nullptr);
  EXPECT_EQ(gate->shape, (std::vector<int64_t>{8, 64, 64}));
  EXPECT_EQ(gate->dtype, DType::kBf16);
  const TensorInfo* down = (*file)->Find("blk.1.ffn_down_exps.weight");
  ASSERT_NE(down, nullptr);
  EXPECT_EQ(down->shape, (std::vector<int64_t>{8, 64, 64}));
  const TensorInfo* router = (*file)->Find("blk.0.ffn_gate_inp.weight");
  ASSERT_NE(router, nullptr);
  EXPECT_EQ(router->shape, (std::vector<int64_t>{8, 64}));
  EXPECT_EQ(router->dtype, DType::kF32);
  EXPECT_EQ((*file)->Find("blk.0.ffn_gate.weight"), nullptr);

  const std::string bad = tmp.Sub("bad.gguf");
  for (const char* key : {"qwen3moe.expert_count", "qwen3moe.expert_used_count",
                          "qwen3moe.expert_feed_forward_length"}) {
    Rewrite(e.gguf, bad, [&](KvList* kv) { DropKey(kv, key); });
    ExpectLoadError(bad, StatusCode::kNotFound, {"bad.gguf", key});
  }
  Rewrite(e.gguf, bad,
          [](KvList* kv) { SetKey(kv, "qwen3moe.expert_used_count", GgufValue::U32(9)); });
  ExpectLoadError(bad, StatusCode::kInvalidArgument, {"qwen3moe.expert_used_count", "9"});
  Rewrite(e.gguf, bad,
          [](KvList* kv) { SetKey(kv, "qwen3moe.expert_count", GgufValue::U32(4)); });
  ExpectLoadError(bad, StatusCode::kInvalidArgument,
                  {"blk.0.ffn_gate_inp.weight", "[8, 64]", "[4, 64]"});
  Rewrite(e.gguf, bad, [](KvList* kv) {
    SetKey(kv, "qwen3moe.expert_feed_forward_length", GgufValue::U32(32));
  });
  ExpectLoadError(bad, StatusCode::kInvalidArgument,
                  {"blk.0.ffn_gate_exps.weight", "[8, 64, 64]", "[8, 32, 64]"});
  Rewrite(e.gguf, bad, nullptr,
          [](const std::string& n) { return n != "blk.1.ffn_up_exps.weight"; });
  ExpectLoadError(bad, StatusCode::kNotFound, {"bad.gguf", "blk.1.ffn_up_exps.weight"});
}

// What llama.cpp's qwen3moe cannot run is refused at export, naming why.
TEST(GgufLoad, Qwen3MoeExportRefusesWhatLlamaCppCannotExpress) {
  for (const auto& [from, to, needle] :
       {std::tuple<std::string, std::string, std::string>{
            "\"norm_topk_prob\": true", "\"norm_topk_prob\": false", "norm_topk_prob"},
        {"\"mlp_only_layers\": []", "\"mlp_only_layers\": [1]", "layer 1 has a dense MLP"}}) {
    TempDir tmp;
    const std::string dir = tmp.Sub("m");
    ASSERT_TRUE(WriteRandomModel(TinyOptions(Architecture::kQwen3Moe, DType::kF32, false, false,
                                             kVocab),
                                 dir)
                    .ok());
    WriteTokenizer(dir);
    std::string config = ReadFile(dir + "/config.json");
    const size_t at = config.find(from);
    ASSERT_NE(at, std::string::npos) << from;
    config.replace(at, from.size(), to);
    WriteFile(dir + "/config.json", config);
    // The HF directory itself loads: kvfork runs both (a dense layer 1, or
    // weights not renormalized) from safetensors.
    if (needle == "norm_topk_prob") {
      EXPECT_FALSE(MustLoad(dir)->config().norm_topk_prob);
    }
    GgufExportOptions o;
    Status s = ExportGguf(dir, tmp.Sub("x.gguf"), o);
    EXPECT_EQ(s.code(), StatusCode::kUnimplemented) << s.ToString();
    EXPECT_NE(s.message().find(needle), std::string::npos) << s.ToString();
  }
}

// The attention kernels' limits are refused at load, naming the limit.
TEST(GgufLoad, KernelLimitsRejectedAtLoad) {
  TempDir tmp;
  Exported e = ExportTiny(tmp, Architecture::kQwen3, DType::kF32);
  const std::string bad = tmp.Sub("limits.gguf");
  Rewrite(e.gguf, bad, [](KvList* kv) {
    SetKey(kv, "qwen3.attention.key_length", GgufValue::U32(1024));
    SetKey(kv, "qwen3.attention.value_length", GgufValue::U32(1024));
  });
  ExpectLoadError(bad, StatusCode::kInvalidArgument, {"qwen3.attention.key_length", "1024", "512"});
  Rewrite(e.gguf, bad, [](KvList* kv) {
    SetKey(kv, "qwen3.attention.head_count", GgufValue::U32(34));
    SetKey(kv, "qwen3.attention.head_count_kv", GgufValue::U32(2));
  });
  ExpectLoadError(bad, StatusCode::kInvalidArgument, {"qwen3.attention.head_count_kv", "17", "16"});
}

// A block-quantized tensor binds in place as a MatrixView of its ggml
// blocks (the kernels that multiply it are another slice); decode bytes
// count its row bytes.
TEST(GgufLoad, QuantizedTensorBindsInPlace) {
  TempDir tmp;
  Exported e = ExportTiny(tmp, Architecture::kQwen3, DType::kF32);
  // blk.0.attn_v.weight is [32, 64] f32. Rewrite it as f16 [32, 34] (68 bytes
  // a row), then relabel it q8_0 [32, 64]: two 34-byte blocks a row.
  const std::string mid = tmp.Sub("mid.gguf"), q8 = tmp.Sub("q8.gguf");
  {
    auto src = GgufCheckpoint::Open(e.gguf);
    ASSERT_TRUE(src.ok());
    GgufWriter w;
    for (const auto& [k, v] : (*src)->metadata().metadata()) w.Set(k, v);
    for (const auto& [name, t] : (*src)->tensors()) {
      const TensorInfo* p = &t;
      if (name == "blk.0.attn_v.weight") {
        ASSERT_TRUE(w.AddTensor(name, GgmlType::kF16, {34, 32}, [](uint8_t* dst) {
                       for (int i = 0; i < 32 * 68; ++i) dst[i] = static_cast<uint8_t>(i * 7);
                       return OkStatus();
                     }).ok());
        continue;
      }
      ASSERT_TRUE(
          w.AddTensor(name, GgmlOf(t.dtype), {t.shape.rbegin(), t.shape.rend()}, [p](uint8_t* dst) {
             std::memcpy(dst, p->data, p->num_bytes);
             return OkStatus();
           }).ok());
    }
    ASSERT_TRUE(w.Write(mid).ok());
  }
  std::string bytes = ReadFile(mid);
  const DirEntry d = FindEntry(bytes, "blk.0.attn_v.weight");
  Poke<uint64_t>(&bytes, d.ne_pos, 64);
  Poke<uint32_t>(&bytes, d.type_pos, Traits(DType::kQ8_0).ggml_type);
  WriteFile(q8, bytes);

  std::unique_ptr<Model> m = MustLoad(q8);
  const ModelWeights& w = dynamic_cast<Decoder&>(*m).weights();
  const MatrixView& v = w.layers[0].v_proj;
  EXPECT_EQ(v.dtype, DType::kQ8_0);
  EXPECT_EQ(v.rows, 32);
  EXPECT_EQ(v.cols, 64);
  EXPECT_EQ(v.row_bytes(), 68u);
  const uint8_t* row1 = v.row(1);
  for (int i = 0; i < 68; ++i) ASSERT_EQ(row1[i], static_cast<uint8_t>((68 + i) * 7)) << i;
  std::unique_ptr<Model> f32 = MustLoad(e.gguf);
  EXPECT_EQ(w.decode_bytes_per_token,
            dynamic_cast<Decoder&>(*f32).weights().decode_bytes_per_token - 32 * 64 * 4 + 32 * 68);

  // A row that is not whole blocks is refused, naming the tensor.
  Poke<uint64_t>(&bytes, d.ne_pos, 48);
  WriteFile(q8, bytes);
  ExpectLoadError(q8, StatusCode::kDataLoss, {"blk.0.attn_v.weight", "q8_0"});
  // A quantized norm weight is refused.
  std::string norm = ReadFile(e.gguf);
  Poke<uint32_t>(&norm, FindEntry(norm, "blk.0.attn_norm.weight").type_pos,
                 Traits(DType::kQ8_0).ggml_type);
  Poke<uint64_t>(&norm, FindEntry(norm, "blk.0.attn_norm.weight").ne_pos, 64);
  WriteFile(q8, norm);
  ExpectLoadError(q8, StatusCode::kInvalidArgument, {"blk.0.attn_norm.weight", "q8_0"});
}

TEST(GgufLoad, NotAGgufFile) {
  TempDir tmp;
  WriteFile(tmp.Sub("junk.gguf"), std::string(4096, 'x'));
  ExpectLoadError(tmp.Sub("junk.gguf"), StatusCode::kInvalidArgument, {"junk.gguf", "not a GGUF"});
  ExpectLoadError(tmp.Sub("absent.gguf"), StatusCode::kNotFound, {"absent.gguf"});
}

}  // namespace
}  // namespace kvfork
