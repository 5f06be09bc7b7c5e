// Parity with llama.cpp: a tiny random f32 model is exported to GGUF, run by
// llama.cpp (node-llama-cpp, tests/model/llamacpp/logits.mjs) and by
// kvfork's Model::Forward on the same token ids, and the two must agree:
//   - the greedy continuation of 32 tokens is identical;
//   - every row of logits (each prompt position and each greedy step) is
//     within kRelTol relative: max_i |kvfork_i - llama_i| / max_i |llama_i|.
// Both sides run f32 weights and an f32 KV cache (llama.cpp's default f16
// cache alone costs ~1e-3).
// Covers Llama (permuted Q/K, GQA, untied output), Llama with llama3 rope
// scaling (rope_freqs tensor), Qwen3 (NeoX RoPE, q/k norms, tied output),
// Qwen2 (q/k/v bias), SmolLM3 (a layer without RoPE), Phi3 (fused qkv and
// gate_up, partial rotary, longrope's factor tensors), Mistral (exported as
// llama.cpp does: a "llama" GGUF), Gemma 3 (sliding windows, (1 + w)
// norms, GELU-tanh, softcap) and Qwen3 MoE (router, top-k experts),
// in f32, and every block format through llama.cpp's mixes: the f32 model is
// quantized by `kvfork quantize` (byte for byte what llama-quantize writes:
// quantize_llamacpp_test) and both engines load that one file. Fixed seeds;
// llama.cpp always runs one thread: ctest runs two tests at a time on two
// cores, and llama.cpp's spinning threads against another test slowed each
// case to ~20 s in the optimized build, and under ASan to 19-66 s of node
// (gemma3 66 s; kvfork's side took 0.5-1.1 s there). The same gemma3 file
// beside other work: 44-49 s wall and 28-32 s of CPU on two threads, 10-14 s
// and 6-9 s on one, bit-identical logits (2026-12-06, machine loaded to 6).
// kvfork's forward keeps two threads under the sanitizers, so its thread
// pool's hand-offs stay under them (kKvforkThreads).
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <optional>
#include <sstream>

#include "core/thread_pool.h"
#include "model/gguf_export.h"
#include "model/gguf_quantize.h"
#include "model/gguf_reader.h"
#include "model/model.h"
#include "model/random_model.h"
#include "test_env.h"

namespace kvfork {
namespace {

namespace fs = std::filesystem;
using kvfork::testing::CacheDir;
using kvfork::testing::SourceDir;

constexpr int kSteps = 32;
constexpr int kLlamaCppThreads = 1;
constexpr int kKvforkThreads = testing::kSanitizedBuild ? 2 : 1;
// The brief asks 1e-3; with f32 weights and f32 KV on both sides we measure
// ~2e-6, so 1e-4 still leaves 50x headroom and catches subtler mistakes.
constexpr double kRelTol = 1e-4;
// Gemma 3 against llama.cpp: its GELU's f16 table (see the case) costs
// about 2^-11 relative per activation; measured 2.6e-4 on the tiny shape.
constexpr double kGemma3RelTol = 1e-3;

struct Case {
  std::string name;
  Architecture arch;
  bool rope_scaling;
  bool tied;
  uint64_t seed;
  // The llama.cpp mix the exported model is quantized to; none: f32.
  std::optional<QuantizeMix> mix = std::nullopt;
  // max |diff| / max |ref| per logits row. Quantized formats quantize each
  // activation row to int8 (q8_0 / q8_K) on both sides, the same codes and
  // f16 scales: measured 0 (q8_0) to 5e-7, so f32's 1e-4 bound holds.
  double rel_tol = kRelTol;
  // Mistral's sliding_window (0 = none). llama.cpp's converter writes a
  // Mistral as a "llama" GGUF without the window, so a windowed Mistral's
  // GGUF runs windowless in both engines: kvfork then loads that GGUF, not
  // the Hugging Face directory (whose window model_reference_test checks).
  int64_t sliding_window = 0;
};

fs::path WorkDir(const std::string& name) {
  fs::path d = fs::path(kvfork::testing::BuildDir()) / "test-data" / "llamacpp" / name;
  fs::create_directories(d);
  return d;
}

// Llama 3's for the llama-tokenizer families (and Phi3, whose o200k
// tokenizer is not here: the prompt is token ids, so only the vocab size
// matters), Qwen's for Qwen.
std::string TokenizerDir(Architecture arch) {
  return arch == Architecture::kQwen2 || arch == Architecture::kQwen3 ||
                 arch == Architecture::kQwen3Moe || arch == Architecture::kGemma3
             ? kvfork::testing::QwenTokenizerDir()
             : kvfork::testing::LlamaTokenizerDir();
}

RandomModelOptions Options(const Case& c) {
  RandomModelOptions o;
  o.arch = c.arch;
  // phi3-tiny: partial rotary 0.75 and longrope from a pretrained context of
  // 32, so the 43-token run is on the long factors in both engines (llama.cpp
  // picks them by its context of 64, kvfork by the model's 4096).
  o.shape = c.arch == Architecture::kPhi3 ? "phi3-tiny" : "tiny";
  // head_dim 32: llama.cpp's CPU kernels want head_dim >= 32.
  o.hidden_size = c.arch == Architecture::kQwen3 ? 64 : 128;
  o.intermediate_size = 192;
  // SmolLM3: 4 layers, so layer 3 runs without RoPE.
  o.num_layers = c.arch == Architecture::kSmolLM3 ? 4 : 2;
  o.num_heads = 4;
  o.num_kv_heads = 2;
  o.head_dim = 32;
  if (c.mix) {  // rows of whole 256-blocks, so the K formats are not replaced
    o.hidden_size = 256;
    o.intermediate_size = 512;
    o.head_dim = 64;
  }
  o.seed = c.seed;
  o.dtype = DType::kF32;
  o.tokenizer_dir = TokenizerDir(c.arch);
  o.tie_word_embeddings = c.tied;
  o.rope_scaling = c.rope_scaling;
  if (c.arch == Architecture::kMistral) o.sliding_window = c.sliding_window;
  // Gemma 3 (window 32 from the tiny shape, softcap 30): 7 layers, the
  // sixth global, as llama.cpp's default pattern of 6 has it.
  if (c.arch == Architecture::kGemma3) o.num_layers = 7;
  // Qwen3 MoE: tiny's 8 experts, 2 per token; experts 64 wide, or 256 so a
  // quantized ffn_down_exps has whole K blocks.
  if (c.arch == Architecture::kQwen3Moe) o.moe_intermediate_size = c.mix ? 256 : 64;
  return o;
}

struct Reference {
  int64_t vocab_size = 0;
  std::vector<int32_t> greedy;
  std::vector<float> logits;  // [prompt rows + steps - 1, vocab]
};

// Runs logits.mjs; the JSON and binary logits go to files in dir.
StatusOr<Reference> RunLlamaCpp(const fs::path& gguf, const std::vector<int32_t>& prompt,
                                const fs::path& dir) {
  std::string tokens;
  for (size_t i = 0; i < prompt.size(); ++i) tokens += (i ? "," : "") + std::to_string(prompt[i]);
  const fs::path json_path = dir / "llamacpp.json", bin_path = dir / "llamacpp.f32";
  const std::string cmd = "cd '" + kvfork::testing::NodeToolsDir() + "' && node '" + SourceDir() +
                          "/tests/model/llamacpp/logits.mjs' --model '" + gguf.string() +
                          "' --tokens " + tokens + " --steps " + std::to_string(kSteps) +
                          " --threads " + std::to_string(kLlamaCppThreads) + " --out '" +
                          json_path.string() + "' --logits-out '" + bin_path.string() + "'";
  if (std::system(cmd.c_str()) != 0) return InternalError("failed: " + cmd);
  std::ifstream jin(json_path);
  std::stringstream ss;
  ss << jin.rdbuf();
  nlohmann::json j = nlohmann::json::parse(ss.str(), nullptr, false);
  if (j.is_discarded()) return DataLossError(json_path.string() + ": not JSON");
  Reference r;
  r.vocab_size = j.value("vocab_size", 0);
  for (const auto& t : j.at("greedy")) r.greedy.push_back(t.get<int32_t>());
  const int64_t rows = j.value("num_rows", 0);
  r.logits.resize(static_cast<size_t>(rows * r.vocab_size));
  std::ifstream bin(bin_path, std::ios::binary);
  bin.read(reinterpret_cast<char*>(r.logits.data()),
           static_cast<std::streamsize>(r.logits.size() * 4));
  if (static_cast<size_t>(bin.gcount()) != r.logits.size() * 4)
    return DataLossError(bin_path.string() + ": short");
  return r;
}

// kvfork: prefill the prompt with all_logits, then greedy decode one token at
// a time, on one sequence with f32 KV. Returns the same rows as Reference.
struct Ours {
  std::vector<int32_t> greedy;
  std::vector<float> logits;
};

StatusOr<Ours> RunKvfork(const fs::path& model_path, const std::vector<int32_t>& prompt) {
  ModelLoadOptions lo;
  lo.show_progress = false;
  KVFORK_ASSIGN_OR_RETURN(std::unique_ptr<Model> model, Model::Load(model_path.string(), lo));
  const int64_t vocab = model->config().vocab_size;
  KvLayout layout = model->MakeKvLayout(KvDType::kF32, 16);
  const int64_t total = static_cast<int64_t>(prompt.size()) + kSteps;
  const int64_t num_blocks = (total + layout.block_size - 1) / layout.block_size;
  std::vector<std::vector<uint8_t>> storage(num_blocks, std::vector<uint8_t>(layout.BlockBytes()));
  std::vector<uint8_t*> table;
  for (auto& b : storage) table.push_back(b.data());
  ThreadPool pool(kKvforkThreads);

  Ours out;
  ForwardBatch batch;
  batch.tokens = prompt;
  batch.seqs.push_back({static_cast<int64_t>(prompt.size()), 0, table.data(), true});
  std::vector<float> logits;
  KVFORK_RETURN_IF_ERROR(model->Forward(batch, layout, pool, &logits));
  out.logits = logits;
  int64_t pos = static_cast<int64_t>(prompt.size());
  for (int k = 0; k < kSteps; ++k) {
    const float* last = out.logits.data() + (out.logits.size() - vocab);
    const int32_t tok = static_cast<int32_t>(std::max_element(last, last + vocab) - last);
    out.greedy.push_back(tok);
    if (k + 1 == kSteps) break;
    batch.tokens = {tok};
    batch.seqs[0] = {1, pos++, table.data(), false};
    KVFORK_RETURN_IF_ERROR(model->Forward(batch, layout, pool, &logits));
    out.logits.insert(out.logits.end(), logits.begin(), logits.end());
  }
  return out;
}

// Seconds since the last call (the first: since construction); the case
// prints where its time went, so a slow case says which side to look at.
class Lap {
 public:
  double Next() {
    const auto now = std::chrono::steady_clock::now();
    const double s = std::chrono::duration<double>(now - last_).count();
    last_ = now;
    return s;
  }

 private:
  std::chrono::steady_clock::time_point last_ = std::chrono::steady_clock::now();
};

class LlamaCppParity : public ::testing::TestWithParam<Case> {};

TEST_P(LlamaCppParity, GreedyAndLogitsMatch) {
  const Case& c = GetParam();
  // The quantized cases repeat the float path with other kernels, which
  // kernels_quant_test covers under ASan (testing::kSanitizedBuild).
  if (c.mix && testing::kSanitizedBuild) GTEST_SKIP() << "quantized cases run in the optimized build";
  // Under the sanitizers, three float cases cover the export and forward
  // paths llama.cpp checks here (permuted RoPE, q/k norms, windows and
  // sandwich norms); every architecture's forward pass is run under ASan by
  // model_reference_test and its GGUF round trip by gguf_load_test.
  if (testing::kSanitizedBuild && c.name != "llama_rope_scaling" && c.name != "qwen3" &&
      c.name != "gemma3")
    GTEST_SKIP() << "this architecture's case runs in the optimized build";
  Lap lap;
  const fs::path dir = WorkDir(c.name);
  const fs::path model_dir = dir / "model";
  ASSERT_TRUE(WriteRandomModel(Options(c), model_dir.string()).ok());
  const fs::path gguf = dir / "model.gguf";
  Status st = ExportGguf(model_dir.string(), gguf.string(), GgufExportOptions());
  ASSERT_TRUE(st.ok()) << st.ToString();
  // What both engines run: the f32 export, or its quantization.
  fs::path file = gguf;
  if (c.mix) {
    file = dir / "model-quantized.gguf";
    QuantizeOptions qo;
    qo.mix = *c.mix;
    auto q = QuantizeModel(gguf.string(), file.string(), qo);
    ASSERT_TRUE(q.ok()) << q.status().ToString();
  }
  const double make_s = lap.Next();

  // The exported file says what llama.cpp will build.
  auto r = GgufReader::Open(gguf.string());
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->FindTensor("rope_freqs.weight") != nullptr,
            c.rope_scaling && c.arch != Architecture::kPhi3);
  EXPECT_EQ(r->FindTensor("rope_factors_long.weight") != nullptr,
            c.rope_scaling && c.arch == Architecture::kPhi3);
  EXPECT_EQ(r->FindTensor("blk.0.attn_qkv.weight") != nullptr, c.arch == Architecture::kPhi3);
  EXPECT_EQ(r->FindTensor("output.weight") != nullptr, !c.tied);
  EXPECT_EQ(r->FindTensor("blk.0.attn_q_norm.weight") != nullptr,
            c.arch == Architecture::kQwen3 || c.arch == Architecture::kQwen3Moe ||
                c.arch == Architecture::kGemma3);
  EXPECT_EQ(r->FindTensor("blk.0.ffn_gate_exps.weight") != nullptr,
            c.arch == Architecture::kQwen3Moe);
  if (c.arch == Architecture::kGemma3) {
    EXPECT_NE(r->Find("gemma3.attention.sliding_window"), nullptr);
    EXPECT_NE(r->FindTensor("blk.0.post_ffw_norm.weight"), nullptr);
  }
  if (c.arch == Architecture::kMistral) {
    auto arch = r->GetString("general.architecture");
    ASSERT_TRUE(arch.ok());
    EXPECT_EQ(*arch, "llama");
    EXPECT_EQ(r->Find("llama.attention.sliding_window"), nullptr);
  }

  // Fixed prompt of ordinary (non-special) token ids; llama.cpp adds no BOS
  // to a token-id prompt, so both sides see exactly these.
  const std::vector<int32_t> prompt = {791, 6460, 14198, 38766, 11, 323, 264, 2697, 315, 1403, 13};
  lap.Next();
  auto ref = RunLlamaCpp(file, prompt, dir);
  ASSERT_TRUE(ref.ok()) << ref.status().ToString();
  const double llama_s = lap.Next();
  // f32: the Hugging Face directory (export and load are checked with it);
  // quantized: the file llama.cpp ran.
  auto ours = RunKvfork(c.mix || c.sliding_window > 0 ? file : model_dir, prompt);
  ASSERT_TRUE(ours.ok()) << ours.status().ToString();
  const double kvfork_s = lap.Next();

  const int64_t vocab = ref->vocab_size;
  const size_t rows = prompt.size() + kSteps - 1;
  ASSERT_EQ(ref->logits.size(), rows * vocab);
  ASSERT_EQ(ours->logits.size(), rows * vocab);
  EXPECT_EQ(ours->greedy, ref->greedy);

  // Rows are compared where both sides saw the same tokens: all prompt rows,
  // and greedy rows up to the first divergence (after it, inputs differ).
  // Row prompt.size() + k follows greedy token k.
  size_t compare_rows = prompt.size();
  for (size_t k = 0; k + 1 < static_cast<size_t>(kSteps); ++k) {
    if (k >= ours->greedy.size() || k >= ref->greedy.size() || ours->greedy[k] != ref->greedy[k])
      break;
    ++compare_rows;
  }
  double worst_rel = 0, worst_abs = 0, min_gap = 1e30;
  for (size_t row = 0; row < compare_rows; ++row) {
    const float* a = ours->logits.data() + row * vocab;
    const float* b = ref->logits.data() + row * vocab;
    double max_diff = 0, max_ref = 0, top1 = -1e30, top2 = -1e30;
    for (int64_t i = 0; i < vocab; ++i) {
      max_diff = std::max(max_diff, std::fabs(static_cast<double>(a[i]) - b[i]));
      max_ref = std::max(max_ref, std::fabs(static_cast<double>(b[i])));
      if (b[i] > top1) {
        top2 = top1;
        top1 = b[i];
      } else if (b[i] > top2) {
        top2 = b[i];
      }
    }
    const double rel = max_diff / std::max(max_ref, 1e-30);
    EXPECT_LE(rel, c.rel_tol) << "row " << row << " max |diff| " << max_diff << " max |ref| "
                              << max_ref;
    worst_rel = std::max(worst_rel, rel);
    worst_abs = std::max(worst_abs, max_diff);
    if (row + 1 >= prompt.size()) min_gap = std::min(min_gap, top1 - top2);
  }
  std::printf(
      "[%s] rows %zu vocab %lld: max |diff| %.3g, max rel %.3g, "
      "min top-1/top-2 gap on greedy rows %.3g; seconds: model %.1f, llama.cpp (node) %.1f, "
      "kvfork %.1f\n",
      c.name.c_str(), compare_rows, static_cast<long long>(vocab), worst_abs, worst_rel, min_gap,
      make_s, llama_s, kvfork_s);
}

INSTANTIATE_TEST_SUITE_P(
    Models, LlamaCppParity,
    ::testing::Values(
        Case{"llama", Architecture::kLlama, false, false, 11},
        Case{"llama_rope_scaling", Architecture::kLlama, true, true, 12},
        Case{"qwen3", Architecture::kQwen3, false, true, 13},
        Case{"qwen2", Architecture::kQwen2, false, false, 14},
        Case{"smollm3", Architecture::kSmolLM3, false, true, 15},
        Case{"phi3", Architecture::kPhi3, false, false, 16},
        Case{"phi3_longrope", Architecture::kPhi3, true, true, 17},
        // Mistral v0.2+ (no window) from its HF directory; a
        // windowed one (v0.1) through its windowless GGUF.
        Case{"mistral", Architecture::kMistral, false, false, 15},
        Case{"mistral_window_gguf", Architecture::kMistral, false, false, 16,
             std::nullopt, kRelTol, 32},
        // llama.cpp's GELU reads an f16 table at x rounded to
        // f16 (ggml's GGML_GELU_FP16), where kvfork computes
        // it in f32 as PyTorch does: kGemma3RelTol.
        Case{"gemma3", Architecture::kGemma3, false, true, 17, std::nullopt,
             kGemma3RelTol},
        // Qwen3 MoE (8 experts, 2 per token, stacked GGUF
        // experts, f32 router), untied and tied.
        Case{"qwen3moe", Architecture::kQwen3Moe, false, false, 18},
        Case{"qwen3moe_tied", Architecture::kQwen3Moe, false, true, 19},
        // The formats that agree with node-llama-cpp's build
        // (q8_0 1.8e-7, q6_k 5e-7 relative measured). On the
        // other formats its logits and ours differ by 1-3%
        // relative on some rows; not yet explained (issue 22).
        Case{"qwen3_q8_0", Architecture::kQwen3, false, true, 21, QuantizeMix::kQ8_0},
        Case{"llama_q6_k", Architecture::kLlama, false, false, 28, QuantizeMix::kQ6_K},
        // Issue 24's families quantized: greedy identical, but
        // logits only within 5e-2 (measured 1.07e-2 smollm3
        // q8_0, 1.33e-2 phi3 longrope q8_0, 1.16e-2 phi3
        // Q4_K_M). That is issue 22's open gap, not these
        // architectures: plain llama in q8_0 with 4 layers
        // measured 1.55e-2 against the same node-llama-cpp
        // build (and its greedy diverged), while every f32 case
        // above agrees to 3e-6. A wrong split, rotary width or
        // RoPE-less layer moves logits by O(1).
        Case{"smollm3_q8_0", Architecture::kSmolLM3, false, true, 29, QuantizeMix::kQ8_0, 5e-2},
        Case{"phi3_longrope_q8_0", Architecture::kPhi3, true, false, 30, QuantizeMix::kQ8_0, 5e-2},
        Case{"phi3_q4_k_m", Architecture::kPhi3, true, false, 31, QuantizeMix::kQ4_K_M, 5e-2},
        // Qwen3 MoE's Q4_K_M: the stacked experts in Q4_K / Q6_K,
        // 8 experts so attn_k / attn_v Q8_0 and attn_output Q5_K
        // (llama-quant.cpp's 8-expert rules; byte for byte what
        // llama-quantize writes: quantize_llamacpp_test).
        // Measured 4.4e-7: the f32 bound holds.
        Case{"qwen3moe_q4_k_m", Architecture::kQwen3Moe, false, false, 32, QuantizeMix::kQ4_K_M}),
    [](const ::testing::TestParamInfo<Case>& info) { return info.param.name; });

}  // namespace
}  // namespace kvfork
