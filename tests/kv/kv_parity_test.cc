// Parity gates (bitwise): on tiny random models (Llama, Qwen3, and Mistral
// with a sliding window shorter than the prompts) and
// each KV format, a request served from the cache produces exactly the
// logits (every generated step) and greedy tokens of the same request on a
// cold cache. Each gate also asserts how many prompt tokens were reused, so
// a gate cannot pass by reusing nothing. The greedy driver is local to the
// test (not the engine): admit, prefill the non-reused prompt tokens in one
// batched Forward, decode, release.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "core/thread_pool.h"
#include "kv/kv_cache.h"
#include "model/arch.h"
#include "model/model.h"
#include "model/random_model.h"

namespace kvfork {
namespace {

constexpr int kBlockSize = 16;
constexpr int64_t kVocab = 256;

struct Req {
  std::vector<int32_t> prompt;
  int max_new = 4;
  std::string salt;
};

struct Result {
  std::vector<std::vector<float>> logits;  // [steps][vocab]
  std::vector<int32_t> generated;
  int64_t reused = 0;
};

// Serves reqs together (one Forward per step for all of them); sequences are
// released at the end unless keep is set.
std::vector<Result> Serve(Model& model, KvCache& kv, const std::vector<Req>& reqs,
                          ThreadPool& pool) {
  const int64_t vocab = model.config().vocab_size;
  std::vector<Result> out(reqs.size());
  std::vector<SeqId> seqs;
  for (size_t i = 0; i < reqs.size(); ++i) {
    PrefixMatch m;
    auto s =
        kv.Admit(reqs[i].prompt, reqs[i].salt, static_cast<int64_t>(reqs[i].prompt.size()), &m);
    KVFORK_CHECK_MSG(s.ok(), s.status().ToString());
    seqs.push_back(*s);
    out[i].reused = m.num_reused_tokens;
  }
  // Next tokens to feed each sequence.
  std::vector<std::vector<int32_t>> feed(reqs.size());
  for (size_t i = 0; i < reqs.size(); ++i)
    feed[i].assign(reqs[i].prompt.begin() + out[i].reused, reqs[i].prompt.end());
  int max_steps = 0;
  for (const Req& r : reqs) max_steps = std::max(max_steps, r.max_new);
  for (int step = 0; step < max_steps; ++step) {
    ForwardBatch batch;
    std::vector<size_t> who;
    for (size_t i = 0; i < reqs.size(); ++i) {
      if (static_cast<int>(out[i].generated.size()) >= reqs[i].max_new) continue;
      int64_t start = kv.NumTokens(seqs[i]);
      Status r = kv.Reserve(seqs[i], start + static_cast<int64_t>(feed[i].size()));
      KVFORK_CHECK_MSG(r.ok(), r.ToString());
      who.push_back(i);
    }
    if (who.empty()) break;
    for (size_t i : who) {
      ForwardSeq fs;
      fs.num_tokens = static_cast<int64_t>(feed[i].size());
      fs.start_pos = kv.NumTokens(seqs[i]);
      fs.blocks = kv.BlockTable(seqs[i]);
      for (size_t g = 0; g < kv.kv_groups().size(); ++g)
        fs.group_blocks[g] = kv.GroupBlockTable(seqs[i], static_cast<int>(g));
      batch.seqs.push_back(fs);
      batch.tokens.insert(batch.tokens.end(), feed[i].begin(), feed[i].end());
    }
    batch.kv_groups = kv.kv_groups();
    std::vector<float> logits;
    Status f = model.Forward(batch, kv.layout(), pool, &logits);
    KVFORK_CHECK_MSG(f.ok(), f.ToString());
    for (size_t j = 0; j < who.size(); ++j) {
      size_t i = who[j];
      Status a = kv.Append(seqs[i], feed[i]);
      KVFORK_CHECK_MSG(a.ok(), a.ToString());
      std::vector<float> row(logits.begin() + j * vocab, logits.begin() + (j + 1) * vocab);
      int32_t next = 0;
      for (int64_t v = 1; v < vocab; ++v)
        if (row[v] > row[next]) next = static_cast<int32_t>(v);
      out[i].logits.push_back(std::move(row));
      out[i].generated.push_back(next);
      feed[i] = {next};
    }
    Status c = kv.Check();
    KVFORK_CHECK_MSG(c.ok(), c.ToString());
  }
  for (SeqId s : seqs) kv.Release(s);
  return out;
}

class Parity : public ::testing::TestWithParam<std::tuple<Architecture, KvDType>> {
 protected:
  void SetUp() override {
    auto [arch, dtype] = GetParam();
    dir_ = "/tmp/kvfork-kv-parity-" + std::to_string(getpid()) + "-" +
           std::to_string(static_cast<int>(arch)) + "-" + std::to_string(static_cast<int>(dtype));
    RandomModelOptions o;
    o.arch = arch;
    o.shape = "tiny";
    o.dtype = DType::kBf16;
    o.vocab_size = kVocab;
    o.seed = 11;
    // Gemma 3: 5 sliding layers (window 32) and a global one.
    if (arch == Architecture::kGemma3) o.num_layers = 6;
    // q4 and q4r take head_dim in multiples of 32 (tiny's is 16).
    if (IsQ4(dtype)) o.head_dim = 32;
    Status w = WriteRandomModel(o, dir_);
    ASSERT_TRUE(w.ok()) << w.ToString();
    ModelLoadOptions lo;
    lo.show_progress = false;
    auto m = Model::Load(dir_, lo);
    ASSERT_TRUE(m.ok()) << m.status().ToString();
    model_ = std::move(m).value();
    layout_ = model_->MakeKvLayout(dtype, kBlockSize);
    groups_ = model_->MakeKvGroups(dtype, kBlockSize);
  }
  void TearDown() override {
    std::error_code ec;
    std::filesystem::remove_all(dir_, ec);
  }

  // grouped: a table per layer group (what the engine runs a windowed model
  // on); else every layer in one block (the disk tier's way, and dense).
  std::unique_ptr<KvCache> Cache(KvBackend backend, int64_t blocks = 256, bool tail_copy = true,
                                 bool grouped = false, int64_t sliding_blocks = 0) {
    KvCacheOptions o;
    o.layout = layout_;
    if (grouped) o.groups = groups_;
    o.sliding_blocks = sliding_blocks;
    o.num_blocks = blocks;
    o.tail_copy = tail_copy;
    o.max_context = 256;
    auto c = KvCache::Create(backend, o);
    KVFORK_CHECK_MSG(c.ok(), c.status().ToString());
    return std::move(c).value();
  }

  // The request alone on a fresh paged cache.
  Result Cold(const Req& r) {
    auto kv = Cache(KvBackend::kPaged);
    Result res = Serve(*model_, *kv, {r}, pool_)[0];
    EXPECT_EQ(res.reused, 0);
    return res;
  }

  static void ExpectSame(const Result& warm, const Result& cold, const std::string& what) {
    ASSERT_EQ(warm.logits.size(), cold.logits.size()) << what;
    for (size_t s = 0; s < warm.logits.size(); ++s) {
      ASSERT_EQ(std::memcmp(warm.logits[s].data(), cold.logits[s].data(),
                            sizeof(float) * cold.logits[s].size()),
                0)
          << what << ": logits differ at step " << s;
    }
    EXPECT_EQ(warm.generated, cold.generated) << what;
  }

  static std::vector<int32_t> Tokens(int32_t seed, int n) {
    std::vector<int32_t> v(n);
    uint32_t x = static_cast<uint32_t>(seed) * 2654435761u + 1;
    for (int i = 0; i < n; ++i) {
      x = x * 1664525u + 1013904223u;
      v[i] = static_cast<int32_t>((x >> 8) % kVocab);
    }
    return v;
  }
  static std::vector<int32_t> Cat(std::vector<int32_t> a, const std::vector<int32_t>& b) {
    a.insert(a.end(), b.begin(), b.end());
    return a;
  }

  std::string dir_;
  std::unique_ptr<Model> model_;
  KvLayout layout_;
  std::vector<KvGroup> groups_;
  ThreadPool pool_{2};
};

TEST_P(Parity, WholePrefixMatch) {
  Req r{Tokens(1, 40), 4, ""};
  Result cold = Cold(r);
  auto kv = Cache(KvBackend::kPaged);
  Serve(*model_, *kv, {r}, pool_);
  Result warm = Serve(*model_, *kv, {r}, pool_)[0];
  EXPECT_EQ(warm.reused, 39);
  ExpectSame(warm, cold, "whole-prefix match");
}

TEST_P(Parity, DivergentSibling) {
  auto common = Tokens(2, 37);
  Req a{Cat(common, Tokens(3, 9)), 3, ""};
  Req b{Cat(common, Tokens(4, 9)), 4, ""};
  ASSERT_NE(a.prompt[37], b.prompt[37]);
  Result cold = Cold(b);
  for (bool tail : {true, false}) {
    auto kv = Cache(KvBackend::kPaged, 256, tail);
    Serve(*model_, *kv, {a}, pool_);
    Result warm = Serve(*model_, *kv, {b}, pool_)[0];
    EXPECT_EQ(warm.reused, tail ? 37 : 32);
    ExpectSame(warm, cold, tail ? "divergent sibling, tail copy" : "divergent sibling, no tail");
  }
}

TEST_P(Parity, MultiturnContinuation) {
  Req t1{Tokens(5, 30), 6, ""};
  auto kv = Cache(KvBackend::kPaged);
  Result r1 = Serve(*model_, *kv, {t1}, pool_)[0];
  // Turn 2 = turn 1 + reply + new user text.
  Req t2{Cat(Cat(t1.prompt, r1.generated), Tokens(6, 12)), 4, ""};
  Result warm = Serve(*model_, *kv, {t2}, pool_)[0];
  // Everything turn 1 forwarded is reused: its prompt and all but the last
  // reply token (sampled, never fed back).
  EXPECT_EQ(warm.reused, 30 + 6 - 1);
  ExpectSame(warm, Cold(t2), "multiturn");
}

TEST_P(Parity, EightConcurrentSiblings) {
  auto prefix = Tokens(7, 48);
  auto kv = Cache(KvBackend::kPaged);
  Serve(*model_, *kv, {Req{Cat(prefix, Tokens(99, 5)), 1, ""}}, pool_);
  std::vector<Req> sibs;
  for (int i = 0; i < 8; ++i) sibs.push_back({Cat(prefix, Tokens(100 + i, 6 + i)), 3, ""});
  std::vector<Result> warm = Serve(*model_, *kv, sibs, pool_);
  for (int i = 0; i < 8; ++i) {
    EXPECT_EQ(warm[i].reused, 48) << "sibling " << i;
    ExpectSame(warm[i], Cold(sibs[i]), "sibling " + std::to_string(i));
  }
}

TEST_P(Parity, AfterEvictionOfPartOfThePrefix) {
  Req p{Tokens(8, 70), 2, ""};  // 71 tokens forwarded: 4 full blocks + a partial
  auto kv = Cache(KvBackend::kPaged, 12);
  Serve(*model_, *kv, {p}, pool_);
  ASSERT_EQ(kv->Stats().blocks_cached, 5);
  // Hold every free block plus two: evicts the two LRU leaves (the partial
  // block, then the fourth full block), never the chain's first three.
  int64_t take = kv->Stats().blocks_free + 2;
  auto hog = kv->Admit(Tokens(9, 1), "other", take * kBlockSize, nullptr);
  ASSERT_TRUE(hog.ok()) << hog.status().ToString();
  EXPECT_EQ(kv->Stats().evictions, 2);
  kv->Release(*hog);
  Req q{Cat(p.prompt, Tokens(10, 5)), 3, ""};
  Result warm = Serve(*model_, *kv, {q}, pool_)[0];
  EXPECT_EQ(warm.reused, 48);
  ExpectSame(warm, Cold(q), "after eviction");
}

TEST_P(Parity, PagedVersusDense) {
  auto common = Tokens(11, 41);
  Req a{Cat(common, Tokens(12, 7)), 3, ""};
  Req b{Cat(common, Tokens(13, 7)), 5, ""};
  Result cold_paged = Cold(b);
  auto dense = Cache(KvBackend::kDense);
  Result dense_cold = Serve(*model_, *dense, {b}, pool_)[0];
  EXPECT_EQ(dense_cold.reused, 0);
  ExpectSame(dense_cold, cold_paged, "dense cold vs paged cold");
  auto dense2 = Cache(KvBackend::kDense);
  Serve(*model_, *dense2, {a}, pool_);
  Result dense_warm = Serve(*model_, *dense2, {b}, pool_)[0];
  EXPECT_EQ(dense_warm.reused, 41);
  ExpectSame(dense_warm, cold_paged, "dense warm vs paged cold");
  auto paged = Cache(KvBackend::kPaged);
  Serve(*model_, *paged, {a}, pool_);
  Result paged_warm = Serve(*model_, *paged, {b}, pool_)[0];
  EXPECT_EQ(paged_warm.reused, 41);
  ExpectSame(paged_warm, dense_warm, "paged warm vs dense warm");
}

// Sliding windows in the paged cache (issue 24): a table per layer group,
// the blocks before the window given back while a sequence runs, and a
// prefix reused only where every group holds the window before the reuse
// point. Tiny shapes, window 32, block 16. Cold runs are grouped too, and
// equal the ungrouped cold run (no given-back block is ever read).
class WindowParity : public Parity {
 protected:
  std::unique_ptr<KvCache> Grouped(int64_t blocks = 256, bool tail_copy = true,
                                   int64_t sliding_blocks = 0) {
    auto kv = Cache(KvBackend::kPaged, blocks, tail_copy, /*grouped=*/true, sliding_blocks);
    KVFORK_CHECK(!kv->kv_groups().empty());
    return kv;
  }
  Result ColdGrouped(const Req& r) {
    auto kv = Grouped();
    Result res = Serve(*model_, *kv, {r}, pool_)[0];
    EXPECT_EQ(res.reused, 0);
    return res;
  }
};

TEST_P(WindowParity, GroupedColdEqualsOneTableCold) {
  Req r{Tokens(21, 100), 6, ""};
  ExpectSame(ColdGrouped(r), Cold(r), "grouped cold vs one-table cold");
}

TEST_P(WindowParity, WholePrefixLongerThanTheWindow) {
  Req r{Tokens(22, 100), 4, ""};
  auto kv = Grouped();
  Serve(*model_, *kv, {r}, pool_);
  // Released with 103 tokens: blocks 0-3 went out of the window while it
  // ran (cached, not held), 4-5 and the partial 6 are its last window.
  EXPECT_EQ(kv->Stats().sliding.at(0).blocks_used, 0);
  Result warm = Serve(*model_, *kv, {r}, pool_)[0];
  EXPECT_EQ(warm.reused, 99);
  ExpectSame(warm, ColdGrouped(r), "whole prefix, window 32 of 100");
}

TEST_P(WindowParity, SiblingsDivergingBeforeInsideAndAfterTheFirstWindow) {
  // Divergence at 20 (inside the first window: nothing given back yet), 45
  // (block 0 is before its window) and 90 (blocks 0-2 are): the first
  // request gave those back while it ran, but they stay cached, so each
  // sibling reuses the whole common prefix (tail copy) or its full blocks.
  for (int common_len : {20, 45, 90}) {
    auto common = Tokens(23, common_len);
    Req a{Cat(common, Tokens(24, 100 - common_len)), 3, ""};
    Req b{Cat(common, Tokens(25, 12)), 4, ""};
    ASSERT_NE(a.prompt[common_len], b.prompt[common_len]);
    Result cold = ColdGrouped(b);
    for (bool tail : {true, false}) {
      auto kv = Grouped(256, tail);
      Serve(*model_, *kv, {a}, pool_);
      Result warm = Serve(*model_, *kv, {b}, pool_)[0];
      const std::string what =
          "diverging at " + std::to_string(common_len) + (tail ? ", tail copy" : ", no tail");
      EXPECT_EQ(warm.reused, tail ? common_len : common_len / kBlockSize * kBlockSize) << what;
      ExpectSame(warm, cold, what);
    }
  }
}

TEST_P(WindowParity, ReuseNeedsOnlyTheWindowBeforeTheReusePoint) {
  Req a{Tokens(26, 100), 4, ""};  // 103 tokens held: 6 full blocks + 7
  // The global group has 12 blocks (Mistral's: ids only), the sliding one 9.
  auto kv = Grouped(12, true, 9);
  Serve(*model_, *kv, {a}, pool_);
  ASSERT_EQ(kv->Stats().sliding.at(0).blocks_cached, 7);
  ASSERT_EQ(kv->Stats().sliding.at(0).blocks_free, 2);
  // Take the sliding group's free blocks plus two: it evicts its two least
  // recently cached blocks (0 and 1, given back first while `a` ran); the
  // global group has room and evicts nothing.
  auto hog = kv->Admit(Tokens(27, 1), "other", 4 * kBlockSize, nullptr);
  ASSERT_TRUE(hog.ok()) << hog.status().ToString();
  EXPECT_EQ(kv->Stats().evictions, 0);
  EXPECT_EQ(kv->Stats().sliding.at(0).evictions, 2);
  kv->Release(*hog);
  // Diverging at 75: the window before 75 is blocks 2-4, all held: the
  // chain's holes (0, 1) do not matter.
  Req b{Cat(std::vector<int32_t>(a.prompt.begin(), a.prompt.begin() + 75), Tokens(28, 10)), 3, ""};
  Result warm = Serve(*model_, *kv, {b}, pool_)[0];
  EXPECT_EQ(warm.reused, 75);
  ExpectSame(warm, ColdGrouped(b), "reuse after the blocks before the window were evicted");
  // Diverging at 40: every reuse point up to 40 needs block 0 or 1 in the
  // window: nothing is reused, though the global group holds blocks 0-4.
  Req c{Cat(std::vector<int32_t>(a.prompt.begin(), a.prompt.begin() + 40), Tokens(29, 10)), 3, ""};
  Result none = Serve(*model_, *kv, {c}, pool_)[0];
  EXPECT_EQ(none.reused, 0);
  ExpectSame(none, ColdGrouped(c), "no reuse without the window");
}

TEST_P(WindowParity, MultiturnKeepsTheLastWindow) {
  Req t1{Tokens(30, 60), 6, ""};
  auto kv = Grouped();
  Result r1 = Serve(*model_, *kv, {t1}, pool_)[0];
  Req t2{Cat(Cat(t1.prompt, r1.generated), Tokens(31, 12)), 5, ""};
  Result w2 = Serve(*model_, *kv, {t2}, pool_)[0];
  EXPECT_EQ(w2.reused, 60 + 6 - 1);
  ExpectSame(w2, ColdGrouped(t2), "turn 2");
  Req t3{Cat(Cat(t2.prompt, w2.generated), Tokens(32, 9)), 3, ""};
  Result w3 = Serve(*model_, *kv, {t3}, pool_)[0];
  EXPECT_EQ(w3.reused, static_cast<int64_t>(t2.prompt.size()) + 5 - 1);
  ExpectSame(w3, ColdGrouped(t3), "turn 3");
}

TEST_P(WindowParity, EightConcurrentSiblings) {
  auto prefix = Tokens(33, 48);
  auto kv = Grouped();
  Serve(*model_, *kv, {Req{Cat(prefix, Tokens(34, 5)), 1, ""}}, pool_);
  std::vector<Req> sibs;
  for (int i = 0; i < 8; ++i) sibs.push_back({Cat(prefix, Tokens(200 + i, 30 + i)), 3, ""});
  std::vector<Result> warm = Serve(*model_, *kv, sibs, pool_);
  for (int i = 0; i < 8; ++i) {
    EXPECT_EQ(warm[i].reused, 48) << "sibling " << i;
    ExpectSame(warm[i], ColdGrouped(sibs[i]), "sibling " + std::to_string(i));
  }
}

TEST_P(WindowParity, ForwardRefusesGroupsOrTablesThatDoNotMatch) {
  auto kv = Grouped();
  auto seq = kv->Admit(Tokens(35, 4), "", 4, nullptr);
  ASSERT_TRUE(seq.ok());
  ForwardBatch batch;
  batch.tokens = Tokens(35, 4);
  ForwardSeq fs;
  fs.num_tokens = 4;
  fs.blocks = kv->BlockTable(*seq);
  for (size_t g = 0; g < kv->kv_groups().size(); ++g)
    fs.group_blocks[g] = kv->GroupBlockTable(*seq, static_cast<int>(g));
  batch.seqs.push_back(fs);
  std::vector<KvGroup> wrong(kv->kv_groups().begin(), kv->kv_groups().end());
  wrong.back().window += 1;
  batch.kv_groups = wrong;
  std::vector<float> logits;
  Status st = model_->Forward(batch, kv->layout(), pool_, &logits);
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("KV layer group"), std::string::npos) << st.ToString();
  batch.kv_groups = kv->kv_groups();
  batch.seqs[0].group_blocks[batch.kv_groups.size() - 1] = nullptr;
  st = model_->Forward(batch, kv->layout(), pool_, &logits);
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("no block table for KV layer group"), std::string::npos)
      << st.ToString();
  kv->Release(*seq);
}

INSTANTIATE_TEST_SUITE_P(
    ArchAndFormat, WindowParity,
    ::testing::Combine(::testing::Values(Architecture::kMistral, Architecture::kGemma3),
                       ::testing::Values(KvDType::kBf16, KvDType::kF32, KvDType::kInt8)),
    [](const auto& info) {
      return std::string(ArchFor(std::get<0>(info.param)).ModelType()) + "_" +
             KvDTypeName(std::get<1>(info.param));
    });

// Parity, below, runs every layer in one block table: Mistral's tiny shape
// has a sliding window of 32 on every layer (Gemma 3's on five of six), so
// every gate's prompt (37 to 75 tokens) is longer than the window, every
// block is kept, and a warm request must still give the cold bits. Qwen3 MoE: the experts' batches
// differ between the cold and the warm run; the bits may not.
INSTANTIATE_TEST_SUITE_P(
    ArchAndFormat, Parity,
    ::testing::Combine(::testing::Values(Architecture::kLlama, Architecture::kQwen3,
                                         Architecture::kMistral, Architecture::kGemma3,
                                         Architecture::kQwen3Moe),
                       ::testing::Values(KvDType::kBf16, KvDType::kF32, KvDType::kInt8,
                                         KvDType::kQ4, KvDType::kQ4r)),
    [](const auto& info) {
      return std::string(ArchFor(std::get<0>(info.param)).ModelType()) + "_" +
             KvDTypeName(std::get<1>(info.param));
    });

}  // namespace
}  // namespace kvfork
