// End-to-end engine tests on a tiny random-weight Qwen3 with the real Qwen3
// tokenizer: batch invariance under chunking and preemption, seeded
// sampling, cancellation at every stage, stop strings, bad requests. The
// parity tests (cold = warm = batched = preempted, bitwise) run on the bf16
// model and on a Q4_K_M GGUF of a small Qwen3 (EngineFormatTest).
#include "engine/engine.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <mutex>
#include <nlohmann/json.hpp>
#include <random>
#include <thread>

#include "engine/model_tokenizer.h"
#include "engine/tiny_model_suite.h"
#include "engine/warmup.h"
#include "kv/block_hash.h"
#include "kv/disk_block_file.h"
#include "kv/model_files_fingerprint.h"
#include "model/gguf_quantize.h"
#include "model/model.h"
#include "model/model_test_util.h"
#include "model/random_model.h"
#include "test_env.h"
#include "tokenizer/tokenizer.h"

namespace kvfork {
namespace {

struct Result {
  std::map<int64_t, std::vector<int32_t>> tokens;  // per choice
  std::map<int64_t, std::string> text;
  std::map<int64_t, std::vector<std::string>> deltas;
  std::map<int64_t, FinishReason> finish;
  std::map<int64_t, std::vector<float>> logprobs;  // chosen token's, then the top ones
  Usage usage;
  bool done = false;
  Status error;
};

Result Drain(RequestStream& s) {
  Result r;
  for (;;) {
    std::optional<RequestEvent> e = s.Pop(60000);
    if (!e) {
      r.error = InternalError("timed out waiting for an event");
      return r;
    }
    switch (e->kind) {
      case RequestEvent::Kind::kToken:
        r.tokens[e->choice].push_back(e->token);
        r.text[e->choice] += e->text_delta;
        r.deltas[e->choice].push_back(e->text_delta);
        if (e->logprob) r.logprobs[e->choice].push_back(e->logprob->logprob);
        for (const TokenLogprob& t : e->top_logprobs) {
          r.logprobs[e->choice].push_back(static_cast<float>(t.token));
          r.logprobs[e->choice].push_back(t.logprob);
        }
        break;
      case RequestEvent::Kind::kFinish:
        r.finish[e->choice] = e->finish_reason;
        break;
      case RequestEvent::Kind::kPromptLogprobs:  // no test here asks
        break;
      case RequestEvent::Kind::kDone:
        r.usage = e->usage;
        r.done = true;
        return r;
      case RequestEvent::Kind::kError:
        r.error = e->error;
        return r;
    }
  }
}

// The request most tests submit: greedy (temperature 0), at most max_tokens
// tokens, and with ignore_eos exactly that many.
Request GreedyRequest(std::string id, std::vector<int32_t> prompt, int64_t max_tokens,
                      bool ignore_eos = false) {
  Request r;
  r.id = std::move(id);
  r.prompt_tokens = std::move(prompt);
  r.sampling.temperature = 0;
  r.sampling.max_tokens = max_tokens;
  r.sampling.ignore_eos = ignore_eos;
  return r;
}

// Nothing held: no block in use, every block free or cached, no request left.
void ExpectAllReleased(const Engine& e) {
  EngineStats s = e.Stats();
  EXPECT_EQ(s.blocks_used, 0);
  EXPECT_EQ(s.blocks_free + s.blocks_cached, s.blocks_total);
  EXPECT_EQ(s.requests_running, 0);
  EXPECT_EQ(s.requests_waiting, 0);
}

class EngineTest : public TinyModelSuite<5> {
 protected:
  static EngineOptions SmallOptions() {
    EngineOptions o;
    o.threads = 2;
    o.kv_blocks = 256;
    o.kv_backend = "paged";
    return o;
  }

  std::unique_ptr<Engine> Make(EngineOptions o) {
    auto e = Engine::Create(o, *model_, *tokenizer_);
    EXPECT_TRUE(e.ok()) << e.status().ToString();
    return std::move(e).value();
  }

  // A tiny Gemma 3 (five sliding layers of window 32, one global: two KV
  // layer groups) with random weights of `seed`, made under the suite's
  // model directory as `name`.
  std::unique_ptr<Model> TinyGemma3(const std::string& name, uint64_t seed) {
    const std::string dir = model_dir_->Sub(name);
    RandomModelOptions mo;
    mo.arch = Architecture::kGemma3;
    mo.shape = "tiny";
    mo.num_layers = 6;
    mo.seed = seed;
    mo.tokenizer_dir = testing::QwenTokenizerDir();
    const Status written = WriteRandomModel(mo, dir);
    EXPECT_TRUE(written.ok()) << written.ToString();
    ModelLoadOptions lo;
    lo.show_progress = false;
    auto model = Model::Load(dir, lo);
    EXPECT_TRUE(model.ok()) << model.status().ToString();
    if (!model.ok()) return nullptr;
    EXPECT_EQ((*model)->MakeKvGroups(KvDType::kBf16, 16).size(), 2u);
    return std::move(model).value();
  }

  static std::vector<int32_t> RandomPrompt(std::mt19937& rng, int len) {
    // Ordinary BPE ids (well below the added special tokens).
    std::uniform_int_distribution<int32_t> d(100, 100000);
    std::vector<int32_t> p(len);
    for (auto& t : p) t = d(rng);
    return p;
  }
};

// The parity tests once per weight format: "bf16" is the fixture's tiny
// model; "q4_k_m" a Qwen3 with rows of 256 (the K formats' block) written by
// kvfork quantize with llama-quantize's Q4_K_M mix (q4_K and q6_K matrices,
// the tied embedding q6_K), loaded from the GGUF file with its tokenizer.
class EngineFormatTest : public EngineTest, public ::testing::WithParamInterface<const char*> {
 protected:
  static void SetUpTestSuite() {
    EngineTest::SetUpTestSuite();
    bf16_model_ = model_;
    bf16_tokenizer_ = tokenizer_;
    if (testing::kSanitizedBuild) return;  // no q4_k_m variant there
    const std::string dir = model_dir_->Sub("q4km-src");
    RandomModelOptions o;
    o.shape = "tiny";
    o.hidden_size = 256;
    o.intermediate_size = 512;
    o.num_heads = 4;
    o.num_kv_heads = 2;
    o.head_dim = 64;
    o.seed = 6;
    o.tokenizer_dir = testing::QwenTokenizerDir();
    Status w = WriteRandomModel(o, dir);
    ASSERT_TRUE(w.ok()) << w.ToString();
    const std::string gguf = model_dir_->Sub("q4km.gguf");
    QuantizeOptions qo;
    qo.mix = QuantizeMix::kQ4_K_M;
    auto q = QuantizeModel(dir, gguf, qo);
    ASSERT_TRUE(q.ok()) << q.status().ToString();
    ASSERT_GT(q->tensors_by_type.count("Q4_K"), 0u);
    ModelLoadOptions lo;
    lo.show_progress = false;
    auto m = Model::Load(gguf, lo);
    ASSERT_TRUE(m.ok()) << m.status().ToString();
    q4km_model_ = std::move(m).value().release();
    auto t = LoadModelTokenizer(gguf);
    ASSERT_TRUE(t.ok()) << t.status().ToString();
    q4km_tokenizer_ = std::move(t).value().release();
  }
  static void TearDownTestSuite() {
    model_ = bf16_model_;
    tokenizer_ = bf16_tokenizer_;
    delete q4km_model_;
    delete q4km_tokenizer_;
    q4km_model_ = nullptr;
    q4km_tokenizer_ = nullptr;
    EngineTest::TearDownTestSuite();
  }
  void SetUp() override {
    const bool q4km = std::string(GetParam()) == "q4_k_m";
    model_path_ = model_dir_->Sub(q4km ? "q4km.gguf" : "model");
    model_ = q4km ? q4km_model_ : bf16_model_;
    tokenizer_ = q4km ? q4km_tokenizer_ : bf16_tokenizer_;
    ASSERT_NE(model_, nullptr);
  }

  std::string model_path_;  // the files of model_ (the disk tier's fingerprint)
  static Model* bf16_model_;
  static Tokenizer* bf16_tokenizer_;
  static Model* q4km_model_;
  static Tokenizer* q4km_tokenizer_;
};

Model* EngineFormatTest::bf16_model_ = nullptr;
Tokenizer* EngineFormatTest::bf16_tokenizer_ = nullptr;
Model* EngineFormatTest::q4km_model_ = nullptr;
Tokenizer* EngineFormatTest::q4km_tokenizer_ = nullptr;

// q4_k_m only in the optimized builds (testing::kSanitizedBuild says why).
std::vector<const char*> FormatsForThisBuild() {
  if (testing::kSanitizedBuild) return {"bf16"};
  return {"bf16", "q4_k_m"};
}

INSTANTIATE_TEST_SUITE_P(Formats, EngineFormatTest, ::testing::ValuesIn(FormatsForThisBuild()),
                         [](const ::testing::TestParamInfo<const char*>& i) {
                           return std::string(i.param);
                         });

// Records every logits row per (request, choice) and the KV Check() of every step.
struct Recorder {
  std::mutex mu;
  std::map<std::string, std::vector<std::vector<float>>> rows;
  int64_t steps = 0;
  int64_t bad_checks = 0;
  std::string first_bad;

  void Attach(EngineOptions* o) {
    o->on_logits_for_testing = [this](const std::string& id, int64_t choice,
                                      std::span<const float> row) {
      std::lock_guard<std::mutex> lock(mu);
      rows[id + "/" + std::to_string(choice)].emplace_back(row.begin(), row.end());
    };
    o->on_step_for_testing = [this](const Status& s) {
      std::lock_guard<std::mutex> lock(mu);
      ++steps;
      if (!s.ok() && bad_checks++ == 0) first_bad = s.ToString();
    };
  }
};

bool BitwiseEqual(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

// Every logits row two recorders hold for one (request, choice) id, bitwise.
void ExpectSameLogitRows(Recorder& x, Recorder& y, const std::string& id) {
  ASSERT_EQ(x.rows[id].size(), y.rows[id].size()) << id;
  for (size_t i = 0; i < x.rows[id].size(); ++i)
    EXPECT_TRUE(BitwiseEqual(x.rows[id][i], y.rows[id][i])) << id << " logits row " << i;
}

// Both runs of a batch invariance test and the shared engine's stats.
struct InvarianceRun {
  std::map<std::string, Result> alone;  // by request id
  std::vector<Result> together;         // in the order of the requests
  int64_t steps = 0;                    // of the shared engine
  EngineStats stats;                    // of the shared engine, after the drain
};

// Each request alone on a cold one-thread engine of model (one chunk, big
// pool), then all of them on one engine with options `together`, submitted
// with pause() after each. Expects every request's tokens and every logits
// row bitwise equal to its run alone, the KV Check() clean on every step and
// every block released at the end.
void RunAloneThenTogether(Model& model, const Tokenizer& tokenizer,
                          const EngineOptions& alone_options, const std::vector<Request>& reqs,
                          EngineOptions together, const std::function<void()>& pause,
                          InvarianceRun* out) {
  Recorder ref;
  for (const Request& r : reqs) {
    EngineOptions o = alone_options;
    o.threads = 1;
    ref.Attach(&o);
    auto e = Engine::Create(o, model, tokenizer);
    ASSERT_TRUE(e.ok()) << e.status().ToString();
    auto s = (*e)->Submit(r);
    ASSERT_TRUE(s.ok()) << s.status().ToString();
    out->alone[r.id] = Drain(**s);
    ASSERT_TRUE(out->alone[r.id].done) << out->alone[r.id].error.ToString();
    (*e)->Shutdown();
  }

  Recorder rec;
  rec.Attach(&together);
  auto e = Engine::Create(together, model, tokenizer);
  ASSERT_TRUE(e.ok()) << e.status().ToString();
  std::vector<std::shared_ptr<RequestStream>> streams;
  for (const Request& r : reqs) {
    auto s = (*e)->Submit(r);
    ASSERT_TRUE(s.ok()) << s.status().ToString();
    streams.push_back(*s);
    pause();
  }
  for (size_t i = 0; i < reqs.size(); ++i) {
    out->together.push_back(Drain(*streams[i]));
    const Result& got = out->together.back();
    ASSERT_TRUE(got.done) << reqs[i].id << ": " << got.error.ToString();
    EXPECT_EQ(got.tokens, out->alone[reqs[i].id].tokens) << reqs[i].id;
    const std::string key = reqs[i].id + "/0";
    // The engine thread is still recording the other requests' rows.
    std::lock_guard<std::mutex> lock(rec.mu);
    ASSERT_EQ(rec.rows[key].size(), ref.rows[key].size()) << key;
    for (size_t k = 0; k < rec.rows[key].size(); ++k)
      EXPECT_TRUE(BitwiseEqual(rec.rows[key][k], ref.rows[key][k])) << key << " step " << k;
  }
  {
    std::lock_guard<std::mutex> lock(rec.mu);
    EXPECT_EQ(rec.bad_checks, 0) << rec.first_bad;
    out->steps = rec.steps;
  }
  out->stats = (*e)->Stats();
  ExpectAllReleased(**e);
  (*e)->Shutdown();
}

TEST_P(EngineFormatTest, BatchInvarianceUnderChunkingPrefixSharingAndPreemption) {
  std::mt19937 rng(1234);
  std::vector<Request> reqs;
  const std::vector<int32_t> shared = RandomPrompt(rng, 40);
  for (int i = 0; i < 16; ++i) {
    Request r;
    r.id = "r" + std::to_string(i);
    std::uniform_int_distribution<int> len(3, 110);
    r.prompt_tokens = RandomPrompt(rng, len(rng));
    if (i % 4 == 1) {  // a quarter share a 40-token prefix
      std::vector<int32_t> p = shared;
      p.insert(p.end(), r.prompt_tokens.begin(), r.prompt_tokens.begin() + 5);
      r.prompt_tokens = p;
    }
    r.sampling.temperature = 0.0;
    r.sampling.ignore_eos = true;
    r.sampling.max_tokens = std::uniform_int_distribution<int>(1, 40)(rng);
    reqs.push_back(r);
  }

  // All together: small chunks, 16-token blocks, a pool too small for all
  // of them at once, random arrival.
  EngineOptions o = SmallOptions();
  o.max_num_batched_tokens = 24;
  o.max_num_seqs = 8;
  o.kv_blocks = 12;  // 192 tokens: the largest request fits alone, eight do not
  std::uniform_int_distribution<int> gap_us(0, 3000);
  InvarianceRun run;
  RunAloneThenTogether(
      *model_, *tokenizer_, SmallOptions(), reqs, o,
      [&] { std::this_thread::sleep_for(std::chrono::microseconds(gap_us(rng))); }, &run);
  ASSERT_EQ(run.together.size(), reqs.size());
  for (size_t i = 0; i < reqs.size(); ++i) {
    EXPECT_EQ(run.together[i].text, run.alone[reqs[i].id].text) << reqs[i].id;
    EXPECT_EQ(run.together[i].usage.completion_tokens, reqs[i].sampling.max_tokens);
  }
  EXPECT_GT(run.steps, 16);
  EXPECT_GT(run.stats.preemptions, 0) << "the pool was meant to force preemption";
}

// A sliding-window model (tiny Gemma 3: five layers of window 32, one
// global) runs on the paged cache's layer groups (issue 24): the sliding
// blocks before each window are given back while requests run. Together,
// chunked, sharing a prefix longer than the window and preempted, every
// request gives bitwise its logits alone, and Check() holds every step.
TEST_F(EngineTest, SlidingWindowModelOnLayerGroupsIsBatchInvariant) {
  std::unique_ptr<Model> model = TinyGemma3("gemma3", 8);
  ASSERT_NE(model, nullptr);
  std::mt19937 rng(77);
  const std::vector<int32_t> shared = RandomPrompt(rng, 70);
  std::vector<Request> reqs;
  for (int i = 0; i < 10; ++i) {
    Request r;
    r.id = "w" + std::to_string(i);
    r.prompt_tokens = RandomPrompt(rng, std::uniform_int_distribution<int>(3, 100)(rng));
    if (i % 3 == 1) {  // a third share a 70-token prefix, longer than the window
      std::vector<int32_t> p = shared;
      p.insert(p.end(), r.prompt_tokens.begin(), r.prompt_tokens.begin() + 3);
      r.prompt_tokens = p;
    }
    r.sampling.temperature = 0.0;
    r.sampling.ignore_eos = true;
    r.sampling.max_tokens = std::uniform_int_distribution<int>(1, 45)(rng);
    reqs.push_back(r);
  }
  EngineOptions o = SmallOptions();
  o.max_num_batched_tokens = 24;
  o.max_num_seqs = 6;
  o.kv_blocks = 16;
  InvarianceRun run;
  RunAloneThenTogether(*model, *tokenizer_, SmallOptions(), reqs, o, [] {}, &run);
  // The global group got the bytes the sliding layers did not need: more
  // blocks than the 16 of every layer the budget names.
  EXPECT_GT(run.stats.blocks_total, 16);
}

TEST_P(EngineFormatTest, PreemptionLosesNothing) {
  std::mt19937 rng(99);
  std::vector<Request> reqs;
  for (int i = 0; i < 4; ++i) {
    Request r;
    r.id = "p" + std::to_string(i);
    r.prompt_tokens = RandomPrompt(rng, 20 + 7 * i);
    r.sampling.temperature = 0.7;
    r.sampling.seed = 1000 + i;
    r.sampling.ignore_eos = true;
    r.sampling.max_tokens = 40;
    reqs.push_back(r);
  }
  auto run = [&](int64_t blocks, int64_t* preemptions) {
    EngineOptions o = SmallOptions();
    o.kv_blocks = blocks;
    Recorder rec;
    rec.Attach(&o);
    auto e = Make(o);
    std::vector<std::shared_ptr<RequestStream>> streams;
    for (const Request& r : reqs) streams.push_back(*e->Submit(r));
    std::vector<Result> out;
    for (auto& s : streams) out.push_back(Drain(*s));
    {
      std::lock_guard<std::mutex> lock(rec.mu);
      EXPECT_EQ(rec.bad_checks, 0) << rec.first_bad;
    }
    *preemptions = e->Stats().preemptions;
    ExpectAllReleased(*e);
    return out;
  };
  int64_t pre_big = 0, pre_small = 0;
  std::vector<Result> big = run(256, &pre_big);
  std::vector<Result> small = run(8, &pre_small);  // 128 tokens: one or two at a time
  EXPECT_EQ(pre_big, 0);
  EXPECT_GT(pre_small, 0);
  for (size_t i = 0; i < reqs.size(); ++i) {
    ASSERT_TRUE(big[i].done && small[i].done);
    EXPECT_EQ(big[i].tokens, small[i].tokens) << reqs[i].id;
    EXPECT_EQ(big[i].text, small[i].text) << reqs[i].id;
  }
}

TEST_P(EngineFormatTest, SeededSamplingSameAloneAndBatched) {
  std::mt19937 rng(7);
  Request target;
  target.id = "seeded";
  target.prompt_tokens = RandomPrompt(rng, 30);
  target.sampling.temperature = 0.9;
  target.sampling.top_p = 0.95;
  target.sampling.top_k = 50;
  target.sampling.seed = 4242;
  target.sampling.max_tokens = 20;
  target.sampling.ignore_eos = true;

  auto e1 = Make(SmallOptions());
  Result alone = Drain(**e1->Submit(target));
  e1->Shutdown();

  auto e2 = Make(SmallOptions());
  std::vector<std::shared_ptr<RequestStream>> others;
  for (int i = 0; i < 5; ++i) {
    Request r = target;
    r.id = "other" + std::to_string(i);
    r.prompt_tokens = RandomPrompt(rng, 10 + 9 * i);
    r.sampling.seed = i;
    others.push_back(*e2->Submit(r));
  }
  Result batched = Drain(**e2->Submit(target));
  for (auto& s : others) Drain(*s);
  ASSERT_TRUE(alone.done && batched.done);
  EXPECT_EQ(alone.tokens, batched.tokens);

  // A different seed gives a different continuation; n = 2 forks and its
  // choice 0 is the n = 1 run.
  Request n2 = target;
  n2.id = "n2";
  n2.sampling.n = 2;
  Result forked = Drain(**e2->Submit(n2));
  ASSERT_TRUE(forked.done) << forked.error.ToString();
  EXPECT_EQ(forked.tokens[0], alone.tokens[0]);
  EXPECT_NE(forked.tokens[1], alone.tokens[0]);
  EXPECT_EQ(forked.usage.completion_tokens, 40);
  EXPECT_EQ(forked.finish[1], FinishReason::kLength);
  ExpectAllReleased(*e2);
}

TEST_P(EngineFormatTest, ParallelSamplingSameAsSequential) {
  // Requests that sample every way at once, on a 3-thread pool (choices of a
  // step sampled in parallel), against each alone on one thread.
  std::mt19937 rng(21);
  std::vector<Request> reqs;
  for (int i = 0; i < 7; ++i) {
    Request r;
    r.id = "s" + std::to_string(i);
    r.prompt_tokens = RandomPrompt(rng, 5 + 11 * i);
    r.sampling.seed = 900 + i;
    r.sampling.max_tokens = 12 + i;
    r.sampling.ignore_eos = true;
    r.sampling.temperature = 0.4 + 0.2 * i;
    if (i % 3 == 0) r.sampling.top_p = 0.8;
    if (i % 3 == 1) r.sampling.min_p = 0.02;
    if (i == 2) r.sampling.top_k = 20;
    if (i == 3) r.sampling.top_logprobs = 3;
    if (i == 4) r.sampling.n = 3;
    if (i == 5) r.sampling.temperature = 0;
    if (i == 6) r.sampling.frequency_penalty = 0.5;
    reqs.push_back(r);
  }
  std::vector<Result> alone;
  for (const Request& r : reqs) {
    EngineOptions o = SmallOptions();
    o.threads = 1;
    auto e = Make(o);
    alone.push_back(Drain(**e->Submit(r)));
    ASSERT_TRUE(alone.back().done) << alone.back().error.ToString();
  }
  EngineOptions o = SmallOptions();
  o.threads = 3;
  auto e = Make(o);
  std::vector<std::shared_ptr<RequestStream>> streams;
  for (const Request& r : reqs) streams.push_back(*e->Submit(r));
  for (size_t i = 0; i < reqs.size(); ++i) {
    Result got = Drain(*streams[i]);
    ASSERT_TRUE(got.done) << got.error.ToString();
    EXPECT_EQ(got.tokens, alone[i].tokens) << reqs[i].id;
    EXPECT_EQ(got.logprobs, alone[i].logprobs) << reqs[i].id;
  }
  EXPECT_EQ(alone[3].logprobs[0].size(), 7u * reqs[3].sampling.max_tokens);
  EXPECT_EQ(alone[4].tokens.size(), 3u);

  // Step timing: every token came from a step that ran a forward, and the
  // parts of a step fit in it.
  EngineStats st = e->Stats();
  EXPECT_GT(st.steps, 0);
  EXPECT_GT(st.decode_steps, 0);
  EXPECT_LT(st.decode_steps, st.steps);  // the first step prefills
  EXPECT_GT(st.forward_ns, 0);
  EXPECT_GT(st.sample_ns, 0);
  EXPECT_GE(st.step_ns, st.forward_ns + st.sample_ns);
  EXPECT_GE(st.decode_step_ns, st.decode_forward_ns + st.decode_sample_ns);
  EXPECT_LE(st.decode_step_ns, st.step_ns);
  EXPECT_LE(st.decode_forward_ns, st.forward_ns);
  ExpectAllReleased(*e);
}

TEST_P(EngineFormatTest, CachedTokensCountReusedPrompt) {
  std::mt19937 rng(3);
  auto e = Make(SmallOptions());
  Request a = GreedyRequest("a", RandomPrompt(rng, 100), 4);
  Result ra = Drain(**e->Submit(a));
  EXPECT_EQ(ra.usage.cached_tokens, 0);
  Request b = a;
  b.id = "b";
  b.prompt_tokens.push_back(7);
  b.prompt_tokens.push_back(8);
  Result rb = Drain(**e->Submit(b));
  EXPECT_GE(rb.usage.cached_tokens, 96);
  EXPECT_LE(rb.usage.cached_tokens, 101);
  EXPECT_EQ(rb.usage.prompt_tokens, 102);
  EXPECT_GT(e->Stats().prefix_hits_tokens, 0);
}

// Issue 25: the disk tier. A clean shutdown writes the cached blocks, the
// partial tail block too; a new engine on the same directory reads them back
// (cached_tokens, disk hits) and gives bitwise the same logits and tokens as
// the run that computed them (invariant 1 across a restart). The next turn
// of the conversation (its prompt ends past the first turn's last block)
// reuses after the restart exactly the tokens the warm engine reuses, the
// partial block's included. A truncated block file, or a partial one with a
// flipped byte, is detected, deleted and recomputed: still the same logits,
// fewer cached tokens. The restarted engine warms up first
// (EngineOptions::warmup), the damaged ones do not.
TEST_P(EngineFormatTest, DiskTierRestartGivesBitwiseSameLogits) {
  testing::TempDir disk;
  testing::TempDir warm_disk;
  auto fp = ModelFilesFingerprint(model_path_);
  ASSERT_TRUE(fp.ok()) << fp.status().ToString();
  std::mt19937 rng(11);
  Request r = GreedyRequest("r", RandomPrompt(rng, 100), 6);
  auto run = [&](const std::string& dir, Recorder* rec, EngineStats* stats,
                 const std::vector<Request>& requests, bool warmup = false) {
    EngineOptions o = SmallOptions();
    o.warmup = warmup;
    o.kv_disk_dir = dir;
    o.kv_disk_gib = 1;
    o.kv_model_fingerprint = *fp;
    rec->Attach(&o);
    auto e = Make(o);
    std::vector<Result> res;
    for (const Request& q : requests) {
      res.push_back(Drain(**e->Submit(q)));
      EXPECT_TRUE(res.back().error.ok()) << res.back().error.ToString();
    }
    *stats = e->Stats();
    EXPECT_TRUE(stats->kv_disk_enabled);
    e->Shutdown();
    return res;
  };
  Recorder cold, warm, restarted, damaged, partial_damaged, warm_engine;
  EngineStats s_cold, s_warm, s_restarted, s_damaged, s_partial_damaged, s_warm_engine;
  Result a = run(disk.path(), &cold, &s_cold, {r})[0];
  EXPECT_EQ(a.usage.cached_tokens, 0);
  EXPECT_EQ(s_cold.kv_disk.scanned_files, 0);
  // r's sequence ends at 100 + 5 tokens: 6 full blocks and a partial one of 9.
  Result b = run(disk.path(), &warm, &s_warm, {r}, /*warmup=*/true)[0];
  EXPECT_EQ(s_warm.kv_disk.scanned_files, 7) << "6 full blocks of 16 and the partial one";
  EXPECT_EQ(s_warm.kv_disk.partial_blocks, 1);
  EXPECT_EQ(b.usage.cached_tokens, 99) << "6 blocks and 3 tokens of the partial one (len - 1)";
  EXPECT_EQ(s_warm.kv_disk_hit_blocks, 7) << "the partial block counts as one";
  EXPECT_EQ(b.tokens, a.tokens);
  ExpectSameLogitRows(warm, cold, "r/0");
  // The next turn: the first turn's prompt and answer, then 4 new tokens.
  Request next = r;
  next.id = "next";
  const std::vector<int32_t>& answer = a.tokens.at(0);
  next.prompt_tokens.insert(next.prompt_tokens.end(), answer.begin(), answer.end());
  for (int i = 0; i < 4; ++i) next.prompt_tokens.push_back(RandomPrompt(rng, 1)[0]);
  // Warm: one engine runs both turns (its own directory, same answers).
  std::vector<Result> w = run(warm_disk.path(), &warm_engine, &s_warm_engine, {r, next});
  const int64_t warm_cached = w[1].usage.cached_tokens;
  EXPECT_EQ(warm_cached, 105) << "the first turn's 6 blocks and its partial tail of 9";
  // Restarted: the directory the first turn's engines wrote.
  Result n = run(disk.path(), &restarted, &s_restarted, {next}, /*warmup=*/true)[0];
  EXPECT_EQ(n.usage.cached_tokens, warm_cached) << "the restart reuses what the warm engine does";
  EXPECT_EQ(n.tokens, w[1].tokens);
  ExpectSameLogitRows(restarted, warm_engine, "next/0");
  // Truncate the 4th block's file: 3 blocks come from disk, the rest is computed.
  std::string sub;
  for (const auto& d : std::filesystem::directory_iterator(disk.path())) sub = d.path().string();
  uint64_t h = RootBlockHashSeed(0);
  for (int blk = 0; blk < 4; ++blk)
    h = ChainBlockHash(h, std::span<const int32_t>(r.prompt_tokens.data() + 16 * blk, 16));
  char name[32];
  std::snprintf(name, sizeof(name), "/%016llx.kvb", static_cast<unsigned long long>(h));
  ASSERT_TRUE(std::filesystem::exists(sub + name));
  std::filesystem::resize_file(sub + name, 100);
  Result c = run(disk.path(), &damaged, &s_damaged, {r})[0];
  EXPECT_EQ(c.usage.cached_tokens, 48);
  EXPECT_EQ(s_damaged.kv_disk.corrupt_blocks, 1);
  EXPECT_EQ(c.tokens, a.tokens);
  ExpectSameLogitRows(damaged, cold, "r/0");
  // Flip a byte of the partial block's payload: 6 blocks from disk, its 3
  // tokens computed (and the block written again, whole, at shutdown). (The
  // damaged run wrote the 4th block again; the partial block's parent is
  // the 6th.)
  for (int blk = 4; blk < 6; ++blk)
    h = ChainBlockHash(h, std::span<const int32_t>(r.prompt_tokens.data() + 16 * blk, 16));
  std::vector<int32_t> tail(r.prompt_tokens.begin() + 96, r.prompt_tokens.end());
  tail.insert(tail.end(), answer.begin(), answer.begin() + 5);
  std::snprintf(name, sizeof(name), "/%016llx.kvp",
                static_cast<unsigned long long>(DiskPartialKey(h, tail)));
  ASSERT_TRUE(std::filesystem::exists(sub + name));
  {
    std::fstream f(sub + name, std::ios::in | std::ios::out | std::ios::binary);
    f.seekg(-7, std::ios::end);
    char byte = 0;
    f.read(&byte, 1);
    byte = static_cast<char>(byte ^ 0x01);
    f.seekp(-7, std::ios::end);
    f.write(&byte, 1);
  }
  Result d = run(disk.path(), &partial_damaged, &s_partial_damaged, {r})[0];
  EXPECT_EQ(d.usage.cached_tokens, 96);
  EXPECT_EQ(s_partial_damaged.kv_disk.corrupt_blocks, 1);
  EXPECT_EQ(d.tokens, a.tokens);
  ExpectSameLogitRows(partial_damaged, cold, "r/0");
  EXPECT_EQ(cold.bad_checks + warm.bad_checks + restarted.bad_checks + damaged.bad_checks +
                partial_damaged.bad_checks + warm_engine.bad_checks,
            0)
      << cold.first_bad;
}

// Issue 25, preload at start: a restarted engine reads the blocks the last
// shutdown wrote into its pool before the next turn comes, so the turn
// reuses what the warm engine does without a read of its own, with the warm
// engine's logits bit for bit; a turn that arrives while the preload still
// reads (a disk slowed to 20 ms a block) gets the same tokens and logits.
TEST_P(EngineFormatTest, DiskPreloadRestartGivesTheWarmReuseAndBitwiseLogits) {
  testing::TempDir disk;
  testing::TempDir warm_disk;
  testing::TempDir copy;
  auto fp = ModelFilesFingerprint(model_path_);
  ASSERT_TRUE(fp.ok()) << fp.status().ToString();
  std::mt19937 rng(12);
  Request r;
  r.id = "r";
  r.prompt_tokens = RandomPrompt(rng, 100);
  r.sampling.temperature = 0;
  r.sampling.max_tokens = 6;
  auto options = [&](const std::string& dir, Recorder* rec, double preload_gib) {
    EngineOptions o = SmallOptions();
    o.kv_disk_dir = dir;
    o.kv_disk_gib = 1;
    o.kv_model_fingerprint = *fp;
    o.kv_disk_preload_gib = preload_gib;
    rec->Attach(&o);
    return o;
  };
  Recorder first, warm, preloaded, mid;
  Result a;
  {
    auto e = Make(options(disk.path(), &first, 0));
    a = Drain(**e->Submit(r));
    ASSERT_TRUE(a.error.ok()) << a.error.ToString();
  }  // a clean shutdown: 6 full blocks and the partial one of 9 on disk
  std::filesystem::copy(disk.path(), copy.path(), std::filesystem::copy_options::recursive);
  Request next = r;
  next.id = "next";
  next.prompt_tokens.insert(next.prompt_tokens.end(), a.tokens.at(0).begin(),
                            a.tokens.at(0).end());
  for (int i = 0; i < 4; ++i) next.prompt_tokens.push_back(RandomPrompt(rng, 1)[0]);
  // Warm: one engine runs both turns (its own directory).
  Result w;
  {
    auto e = Make(options(warm_disk.path(), &warm, 0));
    ASSERT_TRUE(Drain(**e->Submit(r)).error.ok());
    w = Drain(**e->Submit(next));
    ASSERT_TRUE(w.error.ok()) << w.error.ToString();
  }
  EXPECT_EQ(w.usage.cached_tokens, 105) << "the first turn's 6 blocks and its partial tail of 9";
  // Restarted with the preload (half the pool), the turn sent once it ended.
  {
    auto e = Make(options(disk.path(), &preloaded, -1));
    EngineStats st = e->Stats();
    for (int i = 0; i < 10000 && st.kv_disk_preload_running; ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
      st = e->Stats();
    }
    ASSERT_FALSE(st.kv_disk_preload_running);
    EXPECT_EQ(st.kv_disk_preloaded_blocks, 7) << "6 full blocks and the partial one";
    EXPECT_EQ(st.kv_disk_preload_planned_blocks, 7);
    EXPECT_EQ(st.kv_disk_preloaded_bytes, 7 * st.block_bytes);
    Result n = Drain(**e->Submit(next));
    ASSERT_TRUE(n.error.ok()) << n.error.ToString();
    EXPECT_EQ(n.usage.cached_tokens, w.usage.cached_tokens);
    EXPECT_EQ(n.tokens, w.tokens);
    EXPECT_EQ(e->Stats().kv_disk_hit_blocks, 0) << "the turn read nothing itself";
    ExpectSameLogitRows(preloaded, warm, "next/0");
  }
  // Restarted on a slow disk, the turn sent at once: it arrives while the
  // preload reads, and reads what is not in the pool yet itself.
  {
    EngineOptions o = options(copy.path(), &mid, -1);
    o.kv_disk_read_hook_for_testing = [](uint64_t) {
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    };
    auto e = Make(o);
    EXPECT_TRUE(e->Stats().kv_disk_preload_running);
    Result n = Drain(**e->Submit(next));
    ASSERT_TRUE(n.error.ok()) << n.error.ToString();
    EXPECT_EQ(n.usage.cached_tokens, w.usage.cached_tokens);
    EXPECT_EQ(n.tokens, w.tokens);
    ExpectSameLogitRows(mid, warm, "next/0");
    EXPECT_TRUE(e->CheckKv().ok());
  }
  EXPECT_EQ(first.bad_checks + warm.bad_checks + preloaded.bad_checks + mid.bad_checks, 0)
      << first.first_bad << preloaded.first_bad << mid.first_bad;
}

// Issue 25: a request whose cached prefix continues on disk waits in a
// loading state while the cache's I/O threads read it (a disk slowed here to
// 8 ms a block, 120 blocks), and the engine keeps stepping the others: a
// running decode keeps producing tokens during the load (the reads used to
// run on the engine thread before the request's prefill, and it produced
// none), and the loaded request's logits and tokens are bitwise those of the
// run that computed its prefix.
TEST_F(EngineTest, DiskLoadDoesNotStallRunningDecode) {
  testing::TempDir disk;
  auto fp = ModelFilesFingerprint(model_dir_->Sub("model"));
  ASSERT_TRUE(fp.ok()) << fp.status().ToString();
  std::mt19937 rng(21);
  constexpr int kDiskBlocks = 120;
  Request b = GreedyRequest("b", RandomPrompt(rng, 16 * kDiskBlocks + 5), 4);
  Request a = GreedyRequest("a", RandomPrompt(rng, 40), 1000, /*ignore_eos=*/true);
  auto options = [&](Recorder* rec) {
    EngineOptions o = SmallOptions();
    o.kv_blocks = 512;
    o.kv_disk_dir = disk.path();
    o.kv_disk_gib = 1;
    o.kv_model_fingerprint = *fp;
    rec->Attach(&o);
    return o;
  };
  Recorder cold;
  Result cold_b;
  {
    auto e = Make(options(&cold));
    cold_b = Drain(**e->Submit(b));
    ASSERT_TRUE(cold_b.error.ok()) << cold_b.error.ToString();
    e->Shutdown();  // writes b's blocks
  }
  using Clock = std::chrono::steady_clock;
  auto now_ns = [] { return Clock::now().time_since_epoch().count(); };
  std::atomic<int64_t> first_read{0};
  std::atomic<int64_t> last_read{0};
  Recorder warm;
  EngineOptions o = options(&warm);
  o.kv_disk_read_hook_for_testing = [&](uint64_t) {
    int64_t none = 0;
    first_read.compare_exchange_strong(none, now_ns());
    std::this_thread::sleep_for(std::chrono::milliseconds(8));
    int64_t t = now_ns();
    int64_t seen = last_read.load();
    while (seen < t && !last_read.compare_exchange_weak(seen, t)) {
    }
  };
  auto e = Make(o);
  auto sa = e->Submit(a);
  ASSERT_TRUE(sa.ok()) << sa.status().ToString();
  std::mutex mu;
  std::vector<int64_t> a_token_times;
  std::atomic<int> a_tokens{0};
  std::thread reader([&] {
    for (;;) {
      std::optional<RequestEvent> ev = (*sa)->Pop(60000);
      if (!ev || ev->kind == RequestEvent::Kind::kDone || ev->kind == RequestEvent::Kind::kError)
        return;
      if (ev->kind != RequestEvent::Kind::kToken) continue;
      std::lock_guard<std::mutex> lock(mu);
      a_token_times.push_back(now_ns());
      ++a_tokens;
    }
  });
  while (a_tokens.load() < 1) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  Result warm_b = Drain(**e->Submit(b));
  e->Cancel(a.id);
  reader.join();
  ASSERT_TRUE(warm_b.error.ok()) << warm_b.error.ToString();
  EXPECT_EQ(warm_b.usage.cached_tokens, 16 * kDiskBlocks + 4)
      << "the blocks and 4 tokens of the partial one (5 of the prompt, 3 of the answer)";
  EXPECT_EQ(e->Stats().kv_disk_hit_blocks, kDiskBlocks + 1) << "and the partial one";
  EXPECT_EQ(warm_b.tokens, cold_b.tokens);
  ASSERT_EQ(warm.rows["b/0"].size(), cold.rows["b/0"].size());
  for (size_t i = 0; i < cold.rows["b/0"].size(); ++i)
    EXPECT_TRUE(BitwiseEqual(warm.rows["b/0"][i], cold.rows["b/0"][i])) << "logits row " << i;
  int64_t during = 0;
  {
    std::lock_guard<std::mutex> lock(mu);
    for (int64_t t : a_token_times) during += t > first_read.load() && t < last_read.load();
  }
  const double load_ms = static_cast<double>(last_read.load() - first_read.load()) * 1e-6;
  EXPECT_GE(during, 5) << "a decoded " << during << " tokens during the " << load_ms
                       << " ms b's prefix took to load";
  std::printf("a decoded %lld tokens during the %.0f ms load of %d blocks\n",
              static_cast<long long>(during), load_ms, kDiskBlocks);
  EXPECT_EQ(cold.bad_checks + warm.bad_checks, 0) << cold.first_bad << warm.first_bad;
}

// Issue 25, read or recompute: with a disk that takes 1.5 s a block, the
// engine reads a prefix back while it has no measurement, then computes the
// next one (its prefill is far faster than that disk: it would have to take
// over 45 ms a token, on 2 threads, to lose); the logits are bitwise the
// cold run's either way.
TEST_F(EngineTest, DiskReadOrRecomputeGivesTheSameLogits) {
  testing::TempDir disk;
  auto fp = ModelFilesFingerprint(model_dir_->Sub("model"));
  ASSERT_TRUE(fp.ok()) << fp.status().ToString();
  std::mt19937 rng(22);
  std::vector<Request> r;
  for (int i = 0; i < 4; ++i)  // 70 tokens: 4 full blocks and a partial one
    r.push_back(GreedyRequest("p" + std::to_string(i), RandomPrompt(rng, 70), 3));
  auto options = [&](Recorder* rec) {
    EngineOptions o = SmallOptions();
    o.kv_disk_dir = disk.path();
    o.kv_disk_gib = 1;
    o.kv_model_fingerprint = *fp;
    rec->Attach(&o);
    return o;
  };
  Recorder cold, warm;
  std::map<std::string, Result> cold_results;
  {
    auto e = Make(options(&cold));
    for (int i : {1, 2}) cold_results[r[i].id] = Drain(**e->Submit(r[i]));
    e->Shutdown();
  }
  EngineOptions o = options(&warm);
  o.kv_disk_read_hook_for_testing = [](uint64_t) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1500));
  };
  auto e = Make(o);
  // p0 and p3 are on no tier: computed, they measure the prefill rate.
  EXPECT_EQ(Drain(**e->Submit(r[0])).usage.cached_tokens, 0);
  Result p1 = Drain(**e->Submit(r[1]));
  EXPECT_EQ(p1.usage.cached_tokens, 69)
      << "read (4 blocks and 5 tokens of the partial one): the disk was not measured yet";
  EXPECT_EQ(Drain(**e->Submit(r[3])).usage.cached_tokens, 0);
  const EngineStats before = e->Stats();
  Result p2 = Drain(**e->Submit(r[2]));
  EXPECT_EQ(p2.usage.cached_tokens, 0)
      << "computed: a disk block read in " << before.kv_disk_read_ns_per_block * 1e-6
      << " ms against a prefill of " << before.kv_prefill_ns_per_token * 1e-6 << " ms a token";
  EngineStats s = e->Stats();
  EXPECT_EQ(s.kv_disk_hit_blocks, 5) << "p1's 4 blocks and its partial one";
  EXPECT_EQ(s.kv_disk_recomputed_blocks, 4);
  for (const Result* res : {&p1, &p2}) ASSERT_TRUE(res->error.ok()) << res->error.ToString();
  EXPECT_EQ(p1.tokens, cold_results["p1"].tokens);
  EXPECT_EQ(p2.tokens, cold_results["p2"].tokens);
  for (const char* id : {"p1/0", "p2/0"}) {
    ASSERT_EQ(warm.rows[id].size(), cold.rows[id].size()) << id;
    for (size_t i = 0; i < cold.rows[id].size(); ++i)
      EXPECT_TRUE(BitwiseEqual(warm.rows[id][i], cold.rows[id][i])) << id << " row " << i;
  }
  EXPECT_EQ(cold.bad_checks + warm.bad_checks, 0) << cold.first_bad << warm.first_bad;
}

// A request counts as waiting from the moment Submit returns, before the
// engine thread has taken it from its inbox or published a step's stats. The
// engine is held after each step until the test has read the stats, so a
// request (two tokens: at least two steps) cannot finish before they are read,
// however the test thread is scheduled.
// The warm-up at start (EngineOptions::warmup, `kvfork serve`'s default;
// engine/warmup.h) is a real forward pass (its logits row is the one a
// request of the same tokens samples from, bitwise) on private KV memory: an
// engine that warmed up starts with the counters, pool, prefix index and
// disk tier of one that did not, and gives bitwise the same logits and
// tokens, on the paged cache with a disk tier, the dense one, and a
// sliding-window model's layer groups.
TEST_F(EngineTest, WarmUpChangesNoAnswerAndNoCounter) {
  std::unique_ptr<Model> gemma = TinyGemma3("gemma3-warmup", 9);
  ASSERT_NE(gemma, nullptr);
  auto fp = ModelFilesFingerprint(model_dir_->Sub("model"));
  ASSERT_TRUE(fp.ok()) << fp.status().ToString();

  struct Case {
    const char* name;
    Model* model;
    const char* backend;
    bool disk;
  };
  const Case cases[] = {{"paged + disk tier", model_, "paged", true},
                        {"dense", model_, "dense", false},
                        {"sliding-window layer groups", gemma.get(), "paged", false}};
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    std::mt19937 rng(31);
    Request r = GreedyRequest("r", RandomPrompt(rng, 45), 5, /*ignore_eos=*/true);
    // The warm-up's own tokens, as a request.
    Request probe =
        GreedyRequest("probe", WarmUpTokens(*tokenizer_, c.model->config().vocab_size), 1);
    struct Run {
      Result result;
      EngineStats at_start, at_end;
      std::vector<std::vector<float>> rows, probe_rows;
      int64_t files_at_start = 0;
    };
    auto run = [&](bool warmup) {
      testing::TempDir disk;
      EngineOptions o = SmallOptions();
      o.kv_backend = c.backend;
      o.max_model_len = 256;  // dense: 16-block slots
      o.warmup = warmup;
      if (c.disk) {
        o.kv_disk_dir = disk.path();
        o.kv_disk_gib = 1;
        o.kv_model_fingerprint = *fp;
      }
      Recorder rec;
      rec.Attach(&o);
      auto e = Engine::Create(o, *c.model, *tokenizer_);
      EXPECT_TRUE(e.ok()) << e.status().ToString();
      Run out;
      out.at_start = (*e)->Stats();
      for (const auto& f : std::filesystem::recursive_directory_iterator(disk.path()))
        out.files_at_start += f.is_regular_file();
      out.result = Drain(**(*e)->Submit(r));
      EXPECT_TRUE(out.result.error.ok()) << out.result.error.ToString();
      Result p = Drain(**(*e)->Submit(probe));
      EXPECT_TRUE(p.error.ok()) << p.error.ToString();
      out.at_end = (*e)->Stats();
      (*e)->Shutdown();
      EXPECT_EQ(rec.bad_checks, 0) << rec.first_bad;
      out.rows = rec.rows["r/0"];
      out.probe_rows = rec.rows["probe/0"];
      return out;
    };
    const Run cold = run(false);
    const Run warm = run(true);
    for (const Run* x : {&cold, &warm}) {
      EXPECT_EQ(x->at_start.blocks_free, x->at_start.blocks_total);
      EXPECT_EQ(x->at_start.blocks_cached, 0);
      EXPECT_EQ(x->at_start.prefix_queries_tokens, 0);
      EXPECT_EQ(x->at_start.steps, 0);
      EXPECT_EQ(x->at_start.prompt_tokens, 0);
      EXPECT_EQ(x->at_start.kv_disk.blocks_written, 0);
      EXPECT_EQ(x->files_at_start, 0);
    }
    EXPECT_EQ(warm.result.tokens, cold.result.tokens);
    EXPECT_EQ(warm.result.usage.cached_tokens, cold.result.usage.cached_tokens);
    ASSERT_EQ(warm.rows.size(), cold.rows.size());
    for (size_t i = 0; i < cold.rows.size(); ++i)
      EXPECT_TRUE(BitwiseEqual(warm.rows[i], cold.rows[i])) << "logits row " << i;
    EXPECT_EQ(warm.at_end.prefix_hits_tokens, cold.at_end.prefix_hits_tokens);
    EXPECT_EQ(warm.at_end.blocks_cached, cold.at_end.blocks_cached);
    EXPECT_EQ(warm.at_end.steps, cold.at_end.steps);
    EXPECT_EQ(warm.at_end.prompt_tokens, cold.at_end.prompt_tokens);
    // The warm-up ran the model for real: its row is the probe request's.
    EngineOptions wo = SmallOptions();
    wo.kv_backend = c.backend;
    ThreadPool pool(2);
    std::vector<KvGroup> groups;
    if (std::string(c.backend) == "paged" && !c.disk) {
      groups = c.model->MakeKvGroups(KvDType::kBf16, wo.kv_block_size);
      if (groups.size() < 2) groups.clear();
    }
    auto w = WarmUpModel(*c.model, c.model->MakeKvLayout(KvDType::kBf16, wo.kv_block_size), groups,
                         probe.prompt_tokens, pool);
    ASSERT_TRUE(w.ok()) << w.status().ToString();
    EXPECT_EQ(w->tokens, static_cast<int64_t>(probe.prompt_tokens.size()));
    ASSERT_EQ(cold.probe_rows.size(), 1u);
    EXPECT_TRUE(BitwiseEqual(w->logits, cold.probe_rows[0]));
  }
}

TEST_F(EngineTest, SubmittedRequestIsNeverMissingFromStats) {
  std::mutex gate_mu;
  std::condition_variable gate_cv;
  bool gate_open = true;
  EngineOptions o = SmallOptions();
  o.on_step_for_testing = [&](const Status&) {
    std::unique_lock<std::mutex> lock(gate_mu);
    gate_cv.wait(lock, [&] { return gate_open; });
  };
  auto set_gate = [&](bool open) {
    {
      std::lock_guard<std::mutex> lock(gate_mu);
      gate_open = open;
    }
    gate_cv.notify_all();
  };
  std::mt19937 rng(5);
  auto e = Make(o);
  for (int i = 0; i < 20; ++i) {
    Request r =
        GreedyRequest("r" + std::to_string(i), RandomPrompt(rng, 40), 2, /*ignore_eos=*/true);
    set_gate(false);
    auto stream = e->Submit(r);
    ASSERT_TRUE(stream.ok());
    EngineStats s = e->Stats();
    set_gate(true);
    EXPECT_GE(s.requests_running + s.requests_waiting, 1) << "request " << i;
    Drain(**stream);
  }
  EngineStats s = e->Stats();
  EXPECT_EQ(s.requests_running + s.requests_waiting, 0);
}

// on_idle (`kvfork serve` trims malloc's arenas there): once the engine has
// had no work for idle_after_ms after a step, never while a request is
// running or waiting, and not again until another step has run.
TEST_F(EngineTest, OnIdleRunsOnceAfterWorkWhenNothingIsLeft) {
  std::mutex mu;
  std::condition_variable cv;
  int calls = 0;
  int64_t busy_at_call = 0;
  Engine* engine = nullptr;
  EngineOptions o = SmallOptions();
  o.idle_after_ms = 20;
  o.on_idle = [&] {
    const EngineStats s = engine->Stats();
    std::lock_guard<std::mutex> lock(mu);
    busy_at_call += s.requests_running + s.requests_waiting;
    ++calls;
    cv.notify_all();
  };
  auto e = Make(o);
  engine = e.get();
  const auto wait_calls = [&](int n) {
    std::unique_lock<std::mutex> lock(mu);
    return cv.wait_for(lock, std::chrono::seconds(60), [&] { return calls >= n; });
  };
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  {
    std::lock_guard<std::mutex> lock(mu);
    EXPECT_EQ(calls, 0) << "idle before any step";
  }
  std::mt19937 rng(3);
  for (int round = 1; round <= 2; ++round) {
    auto a = e->Submit(GreedyRequest("a" + std::to_string(round), RandomPrompt(rng, 30), 6, true));
    ASSERT_TRUE(a.ok());
    EXPECT_TRUE(Drain(**a).done);
    ASSERT_TRUE(wait_calls(round)) << "round " << round;
    std::this_thread::sleep_for(std::chrono::milliseconds(200));  // ten idle periods, no step
    std::lock_guard<std::mutex> lock(mu);
    EXPECT_EQ(calls, round) << "round " << round;
    EXPECT_EQ(busy_at_call, 0);
  }
}

TEST_F(EngineTest, CancellationAtEveryStageFreesEverything) {
  std::mt19937 rng(11);
  EngineOptions o = SmallOptions();
  o.max_num_seqs = 1;
  o.max_num_batched_tokens = 4;
  o.kv_blocks = 400;
  auto e = Make(o);
  auto expect_cancelled = [](Result r, const char* what) {
    EXPECT_TRUE(r.done) << what << ": " << r.error.ToString();
    ASSERT_EQ(r.finish.count(0), 1u) << what;
    EXPECT_EQ(r.finish[0], FinishReason::kCancelled) << what;
  };
  // Decoding: cancel after its first token.
  Request d;
  d.id = "decoding";
  d.prompt_tokens = RandomPrompt(rng, 8);
  d.sampling.max_tokens = 3000;
  d.sampling.ignore_eos = true;
  auto sd = *e->Submit(d);
  // Prefilling / waiting: a 2,000-token prompt at 4 tokens a step, and one
  // queued behind it (max_num_seqs 1).
  Request p = d;
  p.id = "prefilling";
  p.prompt_tokens = RandomPrompt(rng, 2000);
  p.sampling.max_tokens = 4;
  Request w = d;
  w.id = "waiting";
  w.prompt_tokens = RandomPrompt(rng, 50);

  std::optional<RequestEvent> first = sd->Pop(60000);
  ASSERT_TRUE(first && first->kind == RequestEvent::Kind::kToken);
  auto sp = *e->Submit(p);
  auto sw = *e->Submit(w);
  e->Cancel("decoding");
  expect_cancelled(Drain(*sd), "decoding");
  // The prefill takes 500 steps; wait until it is running, then cancel both.
  for (int i = 0; i < 2000 && e->Stats().requests_running == 0; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  EXPECT_EQ(e->Stats().requests_waiting, 1);
  e->Cancel("waiting");
  e->Cancel("prefilling");
  Result rp = Drain(*sp);
  Result rw = Drain(*sw);
  expect_cancelled(rp, "prefilling");
  expect_cancelled(rw, "waiting");
  EXPECT_TRUE(rp.tokens.empty());
  EXPECT_TRUE(rw.tokens.empty());
  ExpectAllReleased(*e);
  e->Cancel("no-such-request");  // ignored
  // The engine still works and the id can be reused.
  d.sampling.max_tokens = 2;
  Result again = Drain(**e->Submit(d));
  EXPECT_TRUE(again.done);
  EXPECT_EQ(again.tokens[0].size(), 2u);
}

TEST_F(EngineTest, StopStringsAndMaxTokens) {
  std::mt19937 rng(21);
  auto e = Make(SmallOptions());
  Request base = GreedyRequest("base", RandomPrompt(rng, 12), 12, /*ignore_eos=*/true);
  Result full = Drain(**e->Submit(base));
  ASSERT_TRUE(full.done);
  const std::vector<std::string>& deltas = full.deltas[0];
  ASSERT_EQ(deltas.size(), 12u);
  const std::string text = full.text[0];

  // A stop string spanning two tokens: the text before its first occurrence.
  size_t k = 1;
  while (k + 1 < deltas.size() && (deltas[k].empty() || deltas[k + 1].empty())) ++k;
  ASSERT_LT(k + 1, deltas.size());
  const std::string spanning = deltas[k] + deltas[k + 1];
  Request r = base;
  r.id = "spanning";
  r.sampling.stop = {spanning};
  Result got = Drain(**e->Submit(r));
  EXPECT_EQ(got.finish[0], FinishReason::kStop);
  EXPECT_EQ(got.text[0], text.substr(0, text.find(spanning)));
  EXPECT_EQ(got.text[0].find(spanning), std::string::npos);

  // A stop string at the very start.
  size_t f = 0;
  while (f < deltas.size() && deltas[f].empty()) ++f;
  ASSERT_LT(f, deltas.size());
  r.id = "start";
  r.sampling.stop = {text.substr(0, 1)};
  got = Drain(**e->Submit(r));
  EXPECT_EQ(got.finish[0], FinishReason::kStop);
  EXPECT_EQ(got.text[0], "");

  // A stop token id ends the choice at that token.
  r.id = "stop-id";
  r.sampling.stop.clear();
  r.sampling.stop_token_ids = {full.tokens[0][3]};
  got = Drain(**e->Submit(r));
  EXPECT_EQ(got.finish[0], FinishReason::kStop);
  EXPECT_LE(got.tokens[0].size(), 4u);

  // max_tokens 0 and 1.
  r.id = "zero";
  r.sampling.stop_token_ids.clear();
  r.sampling.max_tokens = 0;
  got = Drain(**e->Submit(r));
  EXPECT_TRUE(got.done);
  EXPECT_TRUE(got.tokens.empty());
  EXPECT_EQ(got.finish[0], FinishReason::kLength);
  EXPECT_EQ(got.usage.completion_tokens, 0);
  r.id = "one";
  r.sampling.max_tokens = 1;
  got = Drain(**e->Submit(r));
  ASSERT_EQ(got.tokens[0].size(), 1u);
  EXPECT_EQ(got.tokens[0][0], full.tokens[0][0]);
  EXPECT_EQ(got.finish[0], FinishReason::kLength);
  ExpectAllReleased(*e);
}

TEST_F(EngineTest, BadRequestsRejectedAtSubmit) {
  EngineOptions o = SmallOptions();
  o.kv_blocks = 64;  // 1024 tokens, less than the model's 4096 context
  auto e = Make(o);
  Request good;
  good.id = "g";
  good.prompt_tokens = {100, 200, 300};
  auto expect_bad = [&](Request r, const std::string& param) {
    auto s = e->Submit(r);
    ASSERT_FALSE(s.ok()) << param;
    EXPECT_NE(s.status().message().find(param), std::string::npos) << s.status().ToString();
  };
  Request r = good;
  r.prompt_tokens.clear();
  expect_bad(r, "prompt");
  r = good;
  r.sampling.max_tokens = -1;
  expect_bad(r, "max_tokens");
  r = good;
  r.sampling.max_tokens = 5000;
  expect_bad(r, "context length");
  r = good;
  r.sampling.max_tokens = 2000;
  expect_bad(r, "KV pool");
  r = good;
  r.sampling.top_p = 0;
  expect_bad(r, "top_p");
  r = good;
  r.sampling.top_p = 1.01;
  expect_bad(r, "top_p");
  r = good;
  r.sampling.stop_token_ids = {10000000};
  expect_bad(r, "stop_token_ids");
  r = good;
  r.prompt_tokens = {100, 99999999};
  expect_bad(r, "prompt token 1");
  // Engine options are checked too.
  EngineOptions bad = SmallOptions();
  bad.schedule = "random";
  auto made = Engine::Create(bad, *model_, *tokenizer_);
  ASSERT_FALSE(made.ok());
  EXPECT_NE(made.status().message().find("--schedule"), std::string::npos);
}

// CheckKv answers from the engine thread while requests run, after they end,
// and refuses cleanly once the engine is shut down (the server's
// /v1/cache/stats?check=1 relies on all three).
TEST_F(EngineTest, CheckKvWhileRunningAndAfterShutdown) {
  std::mt19937 rng(21);
  EngineOptions o = SmallOptions();
  o.kv_blocks = 24;  // small: the two requests preempt each other
  o.max_num_batched_tokens = 16;
  auto e = Make(o);
  EXPECT_TRUE(e->CheckKv().ok());
  std::vector<std::shared_ptr<RequestStream>> streams;
  for (int i = 0; i < 3; ++i) {
    Request r;
    r.id = "check-" + std::to_string(i);
    r.prompt_tokens = RandomPrompt(rng, 40);
    r.sampling.max_tokens = 100;
    r.sampling.ignore_eos = true;
    streams.push_back(*e->Submit(r));
  }
  int checks = 0;
  while (e->Stats().requests_finished < 3 && checks < 10000) {
    Status s = e->CheckKv();
    ASSERT_TRUE(s.ok()) << s.ToString();
    ++checks;
  }
  EXPECT_GT(checks, 0);
  for (auto& s : streams) EXPECT_TRUE(Drain(*s).done);
  EXPECT_GT(e->Stats().preemptions, 0);
  EXPECT_TRUE(e->CheckKv().ok());
  ExpectAllReleased(*e);
  e->Shutdown();
  Status after = e->CheckKv();
  EXPECT_EQ(after.code(), StatusCode::kUnavailable) << after.ToString();
}

// SnapshotPrefixTree answers from the engine thread while requests run and
// after they end (GET /v1/cache/tree relies on it): two prompts with a common
// start leave one chain that forks, with the counts of Stats(); after
// shutdown it refuses cleanly.
TEST_F(EngineTest, PrefixTreeSnapshotWhileRunningAndAfterShutdown) {
  std::mt19937 rng(23);
  auto e = Make(SmallOptions());
  const std::vector<int32_t> shared = RandomPrompt(rng, 48);  // 3 blocks of 16
  std::vector<std::shared_ptr<RequestStream>> streams;
  for (int i = 0; i < 2; ++i) {
    Request r;
    r.id = "tree-" + std::to_string(i);
    r.prompt_tokens = shared;
    for (int32_t t : RandomPrompt(rng, 20)) r.prompt_tokens.push_back(t);
    r.sampling.max_tokens = 8;
    r.sampling.ignore_eos = true;
    streams.push_back(*e->Submit(r));
  }
  auto during = e->SnapshotPrefixTree(1000);
  ASSERT_TRUE(during.ok()) << during.status().ToString();
  for (auto& s : streams) EXPECT_TRUE(Drain(*s).done);
  auto t = e->SnapshotPrefixTree(1000);
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  EXPECT_TRUE(t->has_tree);
  EXPECT_EQ(t->block_size, 16);
  EXPECT_FALSE(t->truncated);
  EXPECT_EQ(t->num_registered, static_cast<int64_t>(t->nodes.size()));
  const EngineStats st = e->Stats();
  EXPECT_EQ(t->blocks_cached, st.blocks_cached);
  EXPECT_EQ(t->blocks_used, 0);
  std::map<int32_t, int> children;
  for (const PrefixTreeNode& n : t->nodes) {
    EXPECT_EQ(n.refcount, 0);
    ++children[n.parent];
  }
  EXPECT_EQ(children[-1], 1) << "one root: both prompts start with the same block";
  int forks = 0;
  for (const auto& [id, k] : children) forks += id >= 0 && k == 2;
  EXPECT_EQ(forks, 1) << "the prompts part after the shared blocks";
  auto capped = e->SnapshotPrefixTree(2);
  ASSERT_TRUE(capped.ok());
  EXPECT_EQ(capped->nodes.size(), 2u);
  EXPECT_TRUE(capped->truncated);
  e->Shutdown();
  auto after = e->SnapshotPrefixTree(10);
  EXPECT_EQ(after.status().code(), StatusCode::kUnavailable);
}

// --max-step-ms: while one sequence decodes, a long prompt beside it prefills
// in chunks that fit the target step time (here the floor of 32 tokens a
// step), so the decoding sequence keeps getting tokens during the prefill;
// without the budget the whole prompt runs in one step. Chunking never
// changes bits: both requests produce the same tokens either way.
TEST_F(EngineTest, StepBudgetKeepsDecodingWhileAPromptPrefills) {
  std::mt19937 rng(17);
  const std::vector<int32_t> short_prompt = RandomPrompt(rng, 8);
  const std::vector<int32_t> long_prompt = RandomPrompt(rng, 480);
  struct Run {
    Result a, b;
    int64_t a_tokens_during_b_prefill = 0;
  };
  auto run = [&](double max_step_ms) {
    std::mutex mu;
    std::vector<std::string> order;  // sampled rows by request id, and a marker
    EngineOptions o = SmallOptions();
    o.max_step_ms = max_step_ms;
    o.on_logits_for_testing = [&](const std::string& id, int64_t, std::span<const float>) {
      std::lock_guard<std::mutex> lock(mu);
      order.push_back(id);
    };
    auto e = Make(o);
    Request a = GreedyRequest("a", short_prompt, 200, /*ignore_eos=*/true);
    auto sa = e->Submit(a);
    EXPECT_TRUE(sa.ok());
    // Wait until "a" decodes.
    for (;;) {
      std::optional<RequestEvent> ev = (*sa)->Pop(60000);
      EXPECT_TRUE(ev.has_value());
      if (!ev || ev->kind == RequestEvent::Kind::kToken) break;
    }
    {
      std::lock_guard<std::mutex> lock(mu);
      order.push_back("submit b");
    }
    Request b = GreedyRequest("b", long_prompt, 4);
    auto sb = e->Submit(b);
    EXPECT_TRUE(sb.ok());
    Run r;
    r.b = Drain(**sb);
    r.a = Drain(**sa);
    std::lock_guard<std::mutex> lock(mu);
    const auto marker = std::find(order.begin(), order.end(), "submit b");
    const auto b_first = std::find(marker, order.end(), "b");
    r.a_tokens_during_b_prefill = std::count(marker, b_first, "a");
    return r;
  };
  const Run off = run(0);
  const Run budget = run(0.001);
  ASSERT_TRUE(off.a.error.ok() && off.b.error.ok() && budget.a.error.ok() && budget.b.error.ok());
  // 480 tokens at 32 a step: 15 steps, each with one of a's tokens.
  EXPECT_GE(budget.a_tokens_during_b_prefill, 14);
  // Without the budget, a's tokens after the marker come from at most three
  // steps: the one running when the marker is written, one that may start
  // before the engine sees b's submission (a race a slow build such as TSan's
  // loses now and then), and the one that runs b's whole prompt, whose rows
  // sample a's before b's.
  EXPECT_LE(off.a_tokens_during_b_prefill, 3);
  EXPECT_EQ(off.a.tokens, budget.a.tokens);
  EXPECT_EQ(off.b.tokens, budget.b.tokens);
}

TEST_F(EngineTest, MaxModelLenLimitsContextAndSizesDenseSlots) {
  // The tiny model's context is 4096 tokens: a dense slot of 256 blocks,
  // more than a 64-block pool holds.
  EngineOptions dense = SmallOptions();
  dense.kv_backend = "dense";
  dense.kv_blocks = 64;
  ASSERT_FALSE(Engine::Create(dense, *model_, *tokenizer_).ok());
  // --max-model-len 256: slots of 16 blocks, four of them in the pool.
  dense.max_model_len = 256;
  auto e = Make(dense);
  EXPECT_EQ(e->max_context(), 256);
  Request r = GreedyRequest("r", {100, 200, 300}, 254);
  auto too_long = e->Submit(r);
  ASSERT_FALSE(too_long.ok());
  EXPECT_NE(too_long.status().message().find("context length"), std::string::npos)
      << too_long.status().ToString();
  r.sampling.max_tokens = 8;
  r.sampling.ignore_eos = true;
  Result got = Drain(**e->Submit(r));
  ASSERT_TRUE(got.done) << got.error.ToString();
  EXPECT_EQ(got.usage.completion_tokens, 8);
  // Larger than the model's context: the model's context stands.
  EngineOptions paged = SmallOptions();
  paged.max_model_len = 100000;
  EXPECT_EQ(Make(paged)->max_context(), 4096);
  // A block over the attention kernels' limit is refused here, not at the
  // first forward pass.
  EngineOptions big_block = SmallOptions();
  big_block.kv_block_size = 1025;
  auto refused = Engine::Create(big_block, *model_, *tokenizer_);
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.status().message().find("--kv-block-size must be in [1, 1024]"),
            std::string::npos)
      << refused.status().ToString();
  big_block.kv_block_size = 1024;
  EXPECT_TRUE(Engine::Create(big_block, *model_, *tokenizer_).ok());
  EngineOptions bad = SmallOptions();
  bad.max_model_len = -1;
  auto made = Engine::Create(bad, *model_, *tokenizer_);
  ASSERT_FALSE(made.ok());
  EXPECT_NE(made.status().message().find("--max-model-len"), std::string::npos);
}

TEST_F(EngineTest, ConcurrentShutdownJoinsOnce) {
  for (int round = 0; round < 5; ++round) {
    auto e = Make(SmallOptions());
    Request r;
    r.id = "long";
    r.prompt_tokens = {100, 200, 300};
    r.sampling.max_tokens = 2000;
    r.sampling.ignore_eos = true;
    std::shared_ptr<RequestStream> stream = *e->Submit(r);
    std::vector<std::thread> callers;
    for (int i = 0; i < 8; ++i) callers.emplace_back([&] { e->Shutdown(); });
    for (auto& t : callers) t.join();
    e->Shutdown();  // and once more after: a no-op
    Result got = Drain(*stream);
    EXPECT_TRUE(got.done) << got.error.ToString();
    EXPECT_EQ(e->Submit(r).status().code(), StatusCode::kUnavailable);
  }  // the destructor's Shutdown is the last one
}

// Poisons the input-embedding row of `token` (bf16 NaN) in a model
// directory's model.safetensors, in place.
void PoisonEmbeddingRow(const std::string& dir, int32_t token) {
  const std::string path = dir + "/model.safetensors";
  std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
  ASSERT_TRUE(f.good()) << path;
  uint64_t header_len = 0;
  f.read(reinterpret_cast<char*>(&header_len), 8);
  std::string header(header_len, '\0');
  f.read(header.data(), static_cast<std::streamsize>(header_len));
  const nlohmann::json h = nlohmann::json::parse(header);
  const nlohmann::json& t = h.at("model.embed_tokens.weight");
  ASSERT_EQ(t.at("dtype"), "BF16");
  const int64_t hidden = t.at("shape")[1].get<int64_t>();
  const uint64_t begin = t.at("data_offsets")[0].get<uint64_t>();
  const std::vector<uint16_t> nan_row(hidden, 0x7fc0);  // bf16 quiet NaN
  f.seekp(static_cast<std::streamoff>(8 + header_len + begin + token * hidden * 2));
  f.write(reinterpret_cast<const char*>(nan_row.data()), hidden * 2);
  ASSERT_TRUE(f.good());
}

TEST_F(EngineTest, NanLogitsFailThatRequestOnly) {
  // An untied model whose embedding of one token is NaN: every prompt that
  // holds the token gets NaN logits; the others are untouched.
  testing::TempDir tmp;
  const std::string dir = tmp.Sub("nan-model");
  RandomModelOptions mo;
  mo.shape = "tiny";
  mo.seed = 5;
  mo.tokenizer_dir = testing::QwenTokenizerDir();
  mo.tie_word_embeddings = false;
  ASSERT_TRUE(WriteRandomModel(mo, dir).ok());
  constexpr int32_t kPoisoned = 4242;
  PoisonEmbeddingRow(dir, kPoisoned);
  ModelLoadOptions lo;
  lo.show_progress = false;
  std::unique_ptr<Model> model = *Model::Load(dir, lo);
  for (bool greedy : {true, false}) {
    auto e = *Engine::Create(SmallOptions(), *model, *tokenizer_);
    std::vector<std::shared_ptr<RequestStream>> streams;
    for (int i = 0; i < 4; ++i) {
      Request r;
      r.id = "r" + std::to_string(i);
      r.prompt_tokens = {100, 200, 300 + i};
      if (i % 2 == 1) r.prompt_tokens.insert(r.prompt_tokens.begin() + 1, kPoisoned);
      r.sampling.temperature = greedy ? 0.0 : 0.8;
      r.sampling.n = i == 3 ? 3 : 1;
      r.sampling.max_tokens = 12;
      r.sampling.ignore_eos = true;
      streams.push_back(*e->Submit(r));
    }
    for (int i = 0; i < 4; ++i) {
      Result got = Drain(*streams[i]);
      if (i % 2 == 1) {
        EXPECT_FALSE(got.done);
        EXPECT_EQ(got.error.code(), StatusCode::kInternal) << got.error.ToString();
        EXPECT_NE(got.error.message().find("non-finite logit (NaN)"), std::string::npos)
            << got.error.ToString();
        EXPECT_TRUE(got.tokens.empty());
      } else {
        ASSERT_TRUE(got.done) << got.error.ToString();
        EXPECT_EQ(got.usage.completion_tokens, 12);
      }
    }
    EXPECT_TRUE(e->CheckKv().ok());
    ExpectAllReleased(*e);
    // A prompt that shares only the token before the poisoned one: its
    // cached K/V there is NaN too (0 * NaN inside the prefill tile), so the
    // failure must not leave it in the prefix cache for a tail copy.
    Request bad;
    bad.id = "bad";
    bad.prompt_tokens = {555, kPoisoned, 9};
    bad.sampling.max_tokens = 4;
    EXPECT_EQ(Drain(**e->Submit(bad)).error.code(), StatusCode::kInternal);
    Request again;
    again.id = "again";
    again.prompt_tokens = {555, 8, 9};
    again.sampling.max_tokens = 4;
    again.sampling.ignore_eos = true;
    Result clean = Drain(**e->Submit(again));
    EXPECT_TRUE(clean.done) << clean.error.ToString();
  }
}

}  // namespace
}  // namespace kvfork
