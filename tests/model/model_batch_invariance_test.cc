// DESIGN.md invariant 1 at the model level: a sequence's logits are bitwise
// equal alone vs in a batch with 7 others, in one prefill chunk vs chunks of
// 1, 3 and 16, and at 1 vs 2 threads, on every ISA this CPU supports; for
// the mixture of experts too, whose experts see different token batches in
// each of those runs, with bf16 experts and with Q4_K_M ones (whose experts
// of few rows share one MatMulGrouped pass while those of many run alone).
#include <cstring>
#include <fstream>
#include <sstream>

#include <gtest/gtest.h>

#include "core/cpu_features.h"
#include "model/gguf_quantize.h"
#include "model_test_util.h"

namespace kvfork {
namespace {

constexpr int64_t kVocab = 256;

std::vector<int32_t> Tokens(int64_t n, int64_t salt) {
  std::vector<int32_t> t;
  for (int64_t i = 0; i < n; ++i) t.push_back(static_cast<int32_t>((i * 31 + salt * 17 + 3) % kVocab));
  return t;
}

// All logits of `ids` run in chunks of `chunk` tokens (0: one chunk), alone.
std::vector<float> RunChunked(Model& m, const KvLayout& layout, const std::vector<int32_t>& ids,
                              int64_t chunk, int threads) {
  testing::LocalKv kv(layout, static_cast<int64_t>(ids.size()));
  ThreadPool pool(threads);
  std::vector<float> all, logits;
  const int64_t n = static_cast<int64_t>(ids.size());
  if (chunk <= 0) chunk = n;
  for (int64_t start = 0; start < n; start += chunk) {
    const int64_t len = std::min(chunk, n - start);
    ForwardBatch b;
    b.tokens.assign(ids.begin() + start, ids.begin() + start + len);
    b.seqs = {{len, start, kv.blocks.data(), true}};
    Status s = m.Forward(b, layout, pool, &logits);
    KVFORK_CHECK_MSG(s.ok(), s.ToString());
    all.insert(all.end(), logits.begin(), logits.end());
  }
  return all;
}

// The same sequence as seq 3 of 8 in one batch, others of varied lengths,
// some with cached context (decode-like), some wanting only the last row.
std::vector<float> RunInBatch(Model& m, const KvLayout& layout, const std::vector<int32_t>& ids,
                              int threads) {
  ThreadPool pool(threads);
  std::vector<std::unique_ptr<testing::LocalKv>> kvs;
  std::vector<std::vector<int32_t>> seqs;
  std::vector<int64_t> start(8, 0);
  for (int s = 0; s < 8; ++s) {
    seqs.push_back(s == 3 ? ids : Tokens(1 + 9 * s % 23, s));
    kvs.push_back(std::make_unique<testing::LocalKv>(layout, 64));
  }
  // Give sequences 5 and 6 some context first, so they run as decode steps.
  for (int s : {5, 6}) {
    ForwardBatch pre;
    pre.tokens = Tokens(10 + s, 100 + s);
    pre.seqs = {{static_cast<int64_t>(pre.tokens.size()), 0, kvs[s]->blocks.data(), false}};
    std::vector<float> ignored;
    KVFORK_CHECK(m.Forward(pre, layout, pool, &ignored).ok());
    start[s] = static_cast<int64_t>(pre.tokens.size());
    seqs[s] = {static_cast<int32_t>(s)};
  }
  ForwardBatch b;
  int64_t row0 = 0;
  for (int s = 0; s < 8; ++s) {
    b.tokens.insert(b.tokens.end(), seqs[s].begin(), seqs[s].end());
    const bool all = s == 3 || s % 2 == 0;
    b.seqs.push_back({static_cast<int64_t>(seqs[s].size()), start[s], kvs[s]->blocks.data(), all});
    if (s < 3) row0 += all ? static_cast<int64_t>(seqs[s].size()) : 1;
  }
  std::vector<float> logits;
  Status st = m.Forward(b, layout, pool, &logits);
  KVFORK_CHECK_MSG(st.ok(), st.ToString());
  return std::vector<float>(logits.begin() + row0 * kVocab,
                            logits.begin() + (row0 + static_cast<int64_t>(ids.size())) * kVocab);
}

bool BitEqual(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

TEST(ModelBatchInvariance, AloneBatchedChunkedThreads) {
  // tiny's head_dim is 16; head_dim 32 puts bf16 KV on the amx level's tile
  // attention kernel (head_dim a multiple of 32), 16 needs the avx512 one.
  // q4 and q4r KV (head_dim a multiple of 32) run on the head_dim-32 model.
  for (auto [arch, head_dim] : {std::pair{Architecture::kLlama, int64_t{0}},
                                {Architecture::kQwen3, int64_t{0}},
                                {Architecture::kQwen3, int64_t{32}},
                                {Architecture::kQwen2, int64_t{0}},
                                {Architecture::kSmolLM3, int64_t{0}},
                                {Architecture::kPhi3, int64_t{0}},
                                // window 32 under a 40-token prompt
                                {Architecture::kMistral, int64_t{0}},
                                {Architecture::kMistral, int64_t{32}},
                                {Architecture::kGemma3, int64_t{0}},
                                {Architecture::kGemma3, int64_t{32}},
                                // 8 experts, 2 per token: each expert's batch
                                // changes with the batch mates and chunking
                                {Architecture::kQwen3Moe, int64_t{0}},
                                {Architecture::kQwen3Moe, int64_t{32}}}) {
    testing::TempDir tmp;
    RandomModelOptions options =
        testing::TinyOptions(arch, DType::kBf16, arch == Architecture::kQwen3, true, kVocab, 5);
    options.head_dim = head_dim;
    if (arch == Architecture::kGemma3) options.num_layers = 6;  // 5 sliding, 1 global
    ASSERT_TRUE(WriteRandomModel(options, tmp.Sub("m")).ok());
    ModelLoadOptions lo;
    lo.show_progress = false;
    auto model = Model::Load(tmp.Sub("m"), lo);
    ASSERT_TRUE(model.ok()) << model.status().ToString();
    const std::vector<int32_t> ids = Tokens(40, 1);
    for (Isa isa : {Isa::kScalar, Isa::kAvx2, Isa::kAvx512, Isa::kAmx}) {
      if (!IsaSupported(isa)) continue;
      SetActiveIsaForTesting(isa);
      for (KvDType kv : {KvDType::kBf16, KvDType::kF32, KvDType::kQ4, KvDType::kQ4r}) {
        KvLayout layout = (*model)->MakeKvLayout(kv, 16);
        if (IsQ4(kv) && layout.head_dim % kQ4Group != 0) continue;  // q4 needs multiples of 32
        const std::vector<float> base = RunChunked(**model, layout, ids, 0, 1);
        ASSERT_EQ(base.size(), ids.size() * kVocab);
        const std::string where = std::string(IsaName(isa)) + " kv " + KvDTypeName(kv) +
                                  " head_dim " + std::to_string(layout.head_dim);
        EXPECT_TRUE(BitEqual(base, RunChunked(**model, layout, ids, 0, 2))) << where << " 2 threads";
        for (int64_t chunk : {1, 3, 16})
          for (int threads : {1, 2})
            EXPECT_TRUE(BitEqual(base, RunChunked(**model, layout, ids, chunk, threads)))
                << where << " chunk " << chunk << " threads " << threads;
        for (int threads : {1, 2})
          EXPECT_TRUE(BitEqual(base, RunInBatch(**model, layout, ids, threads)))
              << where << " in a batch of 8, threads " << threads;
      }
    }
    SetActiveIsaForTesting(BestSupportedIsa());
  }
}

// The chunkings, batch and threads of AloneBatchedChunkedThreads on every
// ISA, for one model and KV dtype.
void ExpectInvariant(Model& m, KvDType kv) {
  const std::vector<int32_t> ids = Tokens(40, 1);
  for (Isa isa : {Isa::kScalar, Isa::kAvx2, Isa::kAvx512, Isa::kAmx}) {
    if (!IsaSupported(isa)) continue;
    SetActiveIsaForTesting(isa);
    const KvLayout layout = m.MakeKvLayout(kv, 16);
    const std::vector<float> base = RunChunked(m, layout, ids, 0, 1);
    ASSERT_EQ(base.size(), ids.size() * kVocab);
    const std::string where = IsaName(isa);
    EXPECT_TRUE(BitEqual(base, RunChunked(m, layout, ids, 0, 2))) << where << " 2 threads";
    for (int64_t chunk : {1, 3, 16})
      for (int threads : {1, 2})
        EXPECT_TRUE(BitEqual(base, RunChunked(m, layout, ids, chunk, threads)))
            << where << " chunk " << chunk << " threads " << threads;
    for (int threads : {1, 2})
      EXPECT_TRUE(BitEqual(base, RunInBatch(m, layout, ids, threads)))
          << where << " in a batch of 8, threads " << threads;
  }
  SetActiveIsaForTesting(BestSupportedIsa());
}

// Quantized experts: 256 wide so Q4_K_M gives them Q4_K and Q6_K. One chunk
// puts about 10 tokens on each expert (one MatMulSiluMul per expert), chunks
// of 1 and 3 and the decode-like batch mates put 1-3 (the grouped pass).
TEST(ModelBatchInvariance, QuantizedMoe) {
  testing::TempDir tmp;
  RandomModelOptions options =
      testing::TinyOptions(Architecture::kQwen3Moe, DType::kBf16, false, false, kVocab, 5);
  options.hidden_size = 256;
  options.moe_intermediate_size = 256;
  ASSERT_TRUE(WriteRandomModel(options, tmp.Sub("m")).ok());
  {
    // export needs a tokenizer.json: a BPE vocabulary "t0".."t255", no merges.
    std::ostringstream j;
    j << R"({"model": {"type": "BPE", "vocab": {)";
    for (int64_t i = 0; i < kVocab; ++i) j << (i ? ", " : "") << "\"t" << i << "\": " << i;
    j << R"(}, "merges": []}})";
    std::ofstream(tmp.Sub("m") + "/tokenizer.json") << j.str();
  }
  QuantizeOptions q;
  q.mix = QuantizeMix::kQ4_K_M;
  auto summary = QuantizeModel(tmp.Sub("m"), tmp.Sub("q.gguf"), q);
  ASSERT_TRUE(summary.ok()) << summary.status().ToString();
  ASSERT_GT(summary->tensors_by_type["Q4_K"], 0);
  ModelLoadOptions lo;
  lo.show_progress = false;
  auto model = Model::Load(tmp.Sub("q.gguf"), lo);
  ASSERT_TRUE(model.ok()) << model.status().ToString();
  ExpectInvariant(**model, KvDType::kBf16);
}

}  // namespace
}  // namespace kvfork
