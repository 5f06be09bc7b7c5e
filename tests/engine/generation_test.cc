// min_tokens, include_stop_str_in_output and prompt logprobs end to end on a
// tiny random-weight Qwen3 with the real Qwen3 tokenizer. Prompt logprobs are
// checked by teacher forcing: a prompt that ends with tokens the model
// generated greedily must get, at those positions, the bits the sampler
// reported when it generated them, and log_softmax of the very rows it
// sampled from; and the same bits however the prompt is chunked or cached.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <map>
#include <mutex>
#include <random>

#include "engine/engine.h"
#include "engine/tiny_model_suite.h"
#include "model/model.h"
#include "model/model_test_util.h"
#include "model/random_model.h"
#include "test_env.h"
#include "tokenizer/tokenizer.h"

namespace kvfork {
namespace {

struct Result {
  std::vector<int32_t> tokens;  // choice 0
  std::string text;
  FinishReason finish = FinishReason::kError;
  std::vector<TokenLogprob> logprobs;  // choice 0's chosen tokens
  std::vector<std::vector<TokenLogprob>> top;
  std::vector<PromptTokenLogprob> prompt;  // kPromptLogprobs, concatenated
  bool token_before_prompt_logprobs = false;
  Usage usage;
  Status error;
};

Result Drain(RequestStream& s) {
  Result r;
  for (;;) {
    std::optional<RequestEvent> e = s.Pop(120000);
    if (!e) {
      r.error = InternalError("timed out waiting for an event");
      return r;
    }
    switch (e->kind) {
      case RequestEvent::Kind::kToken:
        if (e->choice != 0) break;
        r.tokens.push_back(e->token);
        r.text += e->text_delta;
        if (e->logprob) r.logprobs.push_back(*e->logprob);
        r.top.push_back(e->top_logprobs);
        break;
      case RequestEvent::Kind::kPromptLogprobs:
        if (!r.tokens.empty()) r.token_before_prompt_logprobs = true;
        r.prompt.insert(r.prompt.end(), e->prompt_logprobs.begin(), e->prompt_logprobs.end());
        break;
      case RequestEvent::Kind::kFinish:
        if (e->choice == 0) r.finish = e->finish_reason;
        break;
      case RequestEvent::Kind::kDone:
        r.usage = e->usage;
        return r;
      case RequestEvent::Kind::kError:
        r.error = e->error;
        return r;
    }
  }
}

bool SameBits(float a, float b) { return std::memcmp(&a, &b, sizeof(a)) == 0; }

// Bitwise equality of two prompt logprob lists; the first difference in *why.
bool SamePromptLogprobs(const std::vector<PromptTokenLogprob>& a,
                        const std::vector<PromptTokenLogprob>& b, std::string* why) {
  if (a.size() != b.size()) {
    *why = "sizes " + std::to_string(a.size()) + " vs " + std::to_string(b.size());
    return false;
  }
  for (size_t i = 0; i < a.size(); ++i) {
    bool same = a[i].chosen.token == b[i].chosen.token &&
                SameBits(a[i].chosen.logprob, b[i].chosen.logprob) &&
                a[i].top.size() == b[i].top.size();
    for (size_t k = 0; same && k < a[i].top.size(); ++k)
      same = a[i].top[k].token == b[i].top[k].token &&
             SameBits(a[i].top[k].logprob, b[i].top[k].logprob);
    if (!same) {
      *why = "entry " + std::to_string(i);
      return false;
    }
  }
  return true;
}

class GenerationTest : public TinyModelSuite<11> {
 protected:
  static EngineOptions Options() {
    EngineOptions o;
    o.threads = 2;
    o.kv_blocks = 256;
    o.kv_backend = "paged";
    return o;
  }

  std::unique_ptr<Engine> Make(const EngineOptions& o) {
    auto e = Engine::Create(o, *model_, *tokenizer_);
    EXPECT_TRUE(e.ok()) << e.status().ToString();
    return std::move(e).value();
  }

  static Result Run(Engine& e, Request r) {
    auto s = e.Submit(std::move(r));
    if (!s.ok()) {
      Result bad;
      bad.error = s.status();
      return bad;
    }
    return Drain(**s);
  }

  static std::vector<int32_t> RandomPrompt(uint32_t seed, int len) {
    std::mt19937 rng(seed);
    std::uniform_int_distribution<int32_t> d(100, 100000);  // ordinary BPE ids
    std::vector<int32_t> p(len);
    for (auto& t : p) t = d(rng);
    return p;
  }

  static int32_t HelloToken() {
    const std::vector<int32_t> ids = tokenizer_->Encode("Hello", /*add_special=*/false);
    KVFORK_CHECK(ids.size() == 1);
    return ids[0];
  }

  // Greedy, with one token pushed to the top of every row.
  static Request Forced(const std::string& id, int32_t token, int64_t max_tokens) {
    Request r;
    r.id = id;
    r.prompt_tokens = RandomPrompt(3, 12);
    r.sampling.temperature = 0.0;
    r.sampling.max_tokens = max_tokens;
    r.sampling.logit_bias[token] = 100.0f;
    return r;
  }

};

TEST_F(GenerationTest, MinTokensHoldsBackEosAndStopTokenIds) {
  auto e = Make(Options());
  const int32_t eos = tokenizer_->eos_token_ids().at(0);
  Request r = Forced("eos", eos, 10);
  Result plain = Run(*e, r);
  ASSERT_TRUE(plain.error.ok()) << plain.error.ToString();
  EXPECT_EQ(plain.tokens, std::vector<int32_t>{eos});
  EXPECT_EQ(plain.finish, FinishReason::kStop);

  r.sampling.min_tokens = 4;
  Result held = Run(*e, r);
  ASSERT_EQ(held.tokens.size(), 5u) << "4 tokens, then the EOS the bias wants";
  for (int i = 0; i < 4; ++i) EXPECT_NE(held.tokens[i], eos);
  EXPECT_EQ(held.tokens[4], eos);
  EXPECT_EQ(held.finish, FinishReason::kStop);

  const int32_t hello = HelloToken();
  Request s = Forced("ids", hello, 10);
  s.sampling.stop_token_ids = {hello};
  s.sampling.min_tokens = 2;
  Result ids = Run(*e, s);
  ASSERT_EQ(ids.tokens.size(), 3u);
  EXPECT_NE(ids.tokens[0], hello);
  EXPECT_NE(ids.tokens[1], hello);
  EXPECT_EQ(ids.tokens[2], hello);
  EXPECT_EQ(ids.finish, FinishReason::kStop);
  EXPECT_EQ(ids.text.find("Hello"), std::string::npos) << ids.text;
  // include_stop_str_in_output keeps a stop token's text (vLLM).
  s.sampling.include_stop_str_in_output = true;
  Result kept = Run(*e, s);
  EXPECT_EQ(kept.tokens, ids.tokens);
  EXPECT_EQ(kept.text, ids.text + "Hello");
  e->Shutdown();
}

TEST_F(GenerationTest, MinTokensAndIncludeStopStrWithStopStrings) {
  auto e = Make(Options());
  Request r = Forced("s", HelloToken(), 6);  // "HelloHelloHello..."
  r.sampling.stop = {"Hello"};
  Result first = Run(*e, r);
  EXPECT_EQ(first.text, "");
  EXPECT_EQ(first.tokens.size(), 1u);
  EXPECT_EQ(first.finish, FinishReason::kStop);

  // The first 3 tokens are kept whatever they contain; the 4th stops.
  r.sampling.min_tokens = 3;
  Result later = Run(*e, r);
  EXPECT_EQ(later.text, "HelloHelloHello");
  EXPECT_EQ(later.tokens.size(), 4u);
  EXPECT_EQ(later.finish, FinishReason::kStop);

  r.sampling.include_stop_str_in_output = true;
  Result kept = Run(*e, r);
  EXPECT_EQ(kept.text, "HelloHelloHelloHello");
  EXPECT_EQ(kept.tokens.size(), 4u);

  // A stop string that starts within min_tokens and ends after is found
  // (vLLM v1 searches the new text and the stop's length before it).
  r.sampling.include_stop_str_in_output = false;
  r.sampling.stop = {"lloHe"};
  r.sampling.min_tokens = 2;
  Result spanning = Run(*e, r);
  EXPECT_EQ(spanning.text, "HelloHe");
  EXPECT_EQ(spanning.tokens.size(), 3u);
  r.sampling.include_stop_str_in_output = true;
  EXPECT_EQ(Run(*e, r).text, "HelloHelloHe");

  // min_tokens == max_tokens: nothing stops; the length ends it.
  r.sampling.include_stop_str_in_output = false;
  r.sampling.stop = {"Hello"};
  r.sampling.min_tokens = 6;
  Result full = Run(*e, r);
  EXPECT_EQ(full.tokens.size(), 6u);
  EXPECT_EQ(full.text, "HelloHelloHelloHelloHelloHello");
  EXPECT_EQ(full.finish, FinishReason::kLength);
  e->Shutdown();
}

// log_softmax of a row, written out independently of the engine.
double PlainLogSoftmax(const std::vector<float>& row, int32_t token) {
  double mx = -INFINITY;
  for (float v : row) mx = std::max(mx, static_cast<double>(v));
  double sum = 0.0;
  for (float v : row) sum += std::exp(static_cast<double>(v) - mx);
  return static_cast<double>(row[token]) - mx - std::log(sum);
}

TEST_F(GenerationTest, PromptLogprobsAreTheGeneratedTokensLogprobs) {
  EngineOptions o = Options();
  std::mutex mu;
  std::vector<std::vector<float>> rows;  // every row request "gen" sampled from
  o.on_logits_for_testing = [&](const std::string& id, int64_t, std::span<const float> row) {
    std::lock_guard<std::mutex> lock(mu);
    if (id == "gen") rows.emplace_back(row.begin(), row.end());
  };
  auto e = Make(o);
  constexpr int kGenerated = 8;
  Request gen;
  gen.id = "gen";
  gen.prompt_tokens = RandomPrompt(21, 37);
  gen.sampling.temperature = 0.0;
  gen.sampling.ignore_eos = true;
  gen.sampling.max_tokens = kGenerated;
  gen.sampling.top_logprobs = 5;
  Result g = Run(*e, gen);
  ASSERT_TRUE(g.error.ok()) << g.error.ToString();
  ASSERT_EQ(g.tokens.size(), static_cast<size_t>(kGenerated));

  // Teacher forcing: the prompt followed by what was generated. Its prefix is
  // in the cache now: the request must not adopt it (no logits there).
  Request tf;
  tf.id = "tf";
  tf.prompt_tokens = gen.prompt_tokens;
  tf.prompt_tokens.insert(tf.prompt_tokens.end(), g.tokens.begin(), g.tokens.end());
  tf.sampling.temperature = 0.0;
  tf.sampling.max_tokens = 0;
  tf.sampling.prompt_logprobs = 5;
  Result t = Run(*e, tf);
  ASSERT_TRUE(t.error.ok()) << t.error.ToString();
  EXPECT_TRUE(t.tokens.empty());
  EXPECT_EQ(t.finish, FinishReason::kLength);
  EXPECT_EQ(t.usage.cached_tokens, 0);
  ASSERT_EQ(t.prompt.size(), tf.prompt_tokens.size() - 1);
  for (size_t i = 0; i < t.prompt.size(); ++i) {
    EXPECT_EQ(t.prompt[i].chosen.token, tf.prompt_tokens[i + 1]) << i;
    ASSERT_EQ(t.prompt[i].top.size(), 5u) << i;
  }
  std::lock_guard<std::mutex> lock(mu);
  ASSERT_EQ(rows.size(), static_cast<size_t>(kGenerated));
  const size_t p = gen.prompt_tokens.size();
  for (int j = 0; j < kGenerated; ++j) {
    // Token j of the generation is prompt token p + j: entry p + j - 1.
    const PromptTokenLogprob& lp = t.prompt[p + j - 1];
    EXPECT_TRUE(SameBits(lp.chosen.logprob, g.logprobs[j].logprob))
        << "token " << j << ": " << lp.chosen.logprob << " vs " << g.logprobs[j].logprob;
    ASSERT_EQ(lp.top.size(), g.top[j].size());
    for (size_t k = 0; k < lp.top.size(); ++k) {
      EXPECT_EQ(lp.top[k].token, g.top[j][k].token) << j << "/" << k;
      EXPECT_TRUE(SameBits(lp.top[k].logprob, g.top[j][k].logprob)) << j << "/" << k;
    }
    // Greedy picked the best token, so it is the top alternative too.
    EXPECT_EQ(lp.top[0].token, g.tokens[j]);
    EXPECT_NEAR(lp.chosen.logprob, PlainLogSoftmax(rows[j], g.tokens[j]), 1e-5) << j;
  }
  e->Shutdown();
}

TEST_F(GenerationTest, PromptLogprobsSameBitsAcrossChunkingCachingAndBatching) {
  const std::vector<int32_t> prompt = RandomPrompt(5, 150);
  auto request = [&](const std::string& id, int64_t max_tokens) {
    Request r;
    r.id = id;
    r.prompt_tokens = prompt;
    r.sampling.temperature = 0.0;
    r.sampling.ignore_eos = true;
    r.sampling.max_tokens = max_tokens;
    r.sampling.prompt_logprobs = 3;
    return r;
  };
  // Reference: the whole prompt in one step on a cold engine.
  EngineOptions o = Options();
  o.max_num_batched_tokens = 512;
  auto ref_engine = Make(o);
  const Result ref = Run(*ref_engine, request("ref", 4));
  ASSERT_TRUE(ref.error.ok()) << ref.error.ToString();
  ASSERT_EQ(ref.prompt.size(), prompt.size() - 1);
  EXPECT_FALSE(ref.token_before_prompt_logprobs);
  ASSERT_EQ(ref.tokens.size(), 4u);
  // The prompt logprobs change nothing about what is generated.
  Request plain = request("plain", 4);
  plain.sampling.prompt_logprobs = -1;
  const Result without = Run(*ref_engine, plain);
  EXPECT_EQ(without.tokens, ref.tokens);
  EXPECT_TRUE(without.prompt.empty());
  // Now cached: a second run recomputes and gets the same bits.
  const Result cached = Run(*ref_engine, request("cached", 4));
  std::string why;
  EXPECT_TRUE(SamePromptLogprobs(cached.prompt, ref.prompt, &why)) << why;
  EXPECT_EQ(cached.usage.cached_tokens, 0);
  ref_engine->Shutdown();

  // The dense backend copies a cached prefix from a snapshot: also skipped.
  EngineOptions d = Options();
  d.kv_backend = "dense";
  d.max_num_seqs = 2;
  d.max_num_batched_tokens = 40;
  auto dense = Make(d);
  for (const char* id : {"dense-cold", "dense-cached"}) {
    const Result r = Run(*dense, request(id, 4));
    ASSERT_TRUE(r.error.ok()) << id << ": " << r.error.ToString();
    EXPECT_TRUE(SamePromptLogprobs(r.prompt, ref.prompt, &why)) << id << ": " << why;
    EXPECT_EQ(r.tokens, ref.tokens) << id;
    EXPECT_EQ(r.usage.cached_tokens, 0) << id;
  }
  dense->Shutdown();

  for (int64_t chunk : {1, 7, 33, 64}) {
    EngineOptions c = Options();
    c.max_num_batched_tokens = chunk;
    auto e = Make(c);
    // Alongside other requests that share the prompt's first blocks, with
    // n = 2, and once with nothing to generate.
    std::vector<std::shared_ptr<RequestStream>> streams;
    Request other = request("other", 5);
    other.prompt_tokens.resize(70);
    other.sampling.prompt_logprobs = -1;
    Request two = request("two", 3);
    two.sampling.n = 2;
    for (Request r : {other, request("a", 4), two, request("zero", 0)}) {
      auto s = e->Submit(std::move(r));
      ASSERT_TRUE(s.ok()) << s.status().ToString();
      streams.push_back(*s);
    }
    Drain(*streams[0]);
    const Result a = Drain(*streams[1]);
    const Result b = Drain(*streams[2]);
    const Result z = Drain(*streams[3]);
    for (const Result* r : {&a, &b, &z}) {
      ASSERT_TRUE(r->error.ok()) << r->error.ToString();
      EXPECT_TRUE(SamePromptLogprobs(r->prompt, ref.prompt, &why))
          << "chunk " << chunk << ": " << why;
      EXPECT_FALSE(r->token_before_prompt_logprobs);
    }
    EXPECT_EQ(a.tokens, ref.tokens) << "chunk " << chunk;
    EXPECT_TRUE(z.tokens.empty());
    EXPECT_EQ(z.finish, FinishReason::kLength);
    EngineStats st = e->Stats();
    EXPECT_EQ(st.blocks_used, 0);
    e->Shutdown();
  }
}

TEST_F(GenerationTest, PromptLogprobsSurvivePreemption) {
  // A pool too small for everything at once: decoders preempt the newest
  // sequences, prompt-logprob ones mid-prefill among them; a re-admitted one
  // must report every position once, with the same bits.
  auto request = [&](const std::string& id, uint32_t seed, int len, int64_t max_tokens,
                     int64_t prompt_logprobs) {
    Request r;
    r.id = id;
    r.prompt_tokens = RandomPrompt(seed, len);
    r.sampling.temperature = 0.0;
    r.sampling.ignore_eos = true;
    r.sampling.max_tokens = max_tokens;
    r.sampling.prompt_logprobs = prompt_logprobs;
    return r;
  };
  std::vector<Request> reqs;
  for (int i = 0; i < 6; ++i) {
    reqs.push_back(request("d" + std::to_string(i), 40 + i, 30, 60, -1));
    reqs.push_back(request("p" + std::to_string(i), 80 + i, 90, 2, 2));
  }
  std::map<std::string, Result> alone;
  {
    auto e = Make(Options());
    for (const Request& r : reqs) alone[r.id] = Run(*e, r);
  }
  EngineOptions o = Options();
  o.max_num_batched_tokens = 16;
  o.kv_blocks = 16;  // 256 tokens
  auto e = Make(o);
  std::vector<std::shared_ptr<RequestStream>> streams;
  for (const Request& r : reqs) {
    auto s = e->Submit(r);
    ASSERT_TRUE(s.ok()) << s.status().ToString();
    streams.push_back(*s);
  }
  for (size_t i = 0; i < reqs.size(); ++i) {
    const Result got = Drain(*streams[i]);
    const Result& want = alone[reqs[i].id];
    ASSERT_TRUE(got.error.ok()) << reqs[i].id << ": " << got.error.ToString();
    EXPECT_EQ(got.tokens, want.tokens) << reqs[i].id;
    std::string why;
    EXPECT_TRUE(SamePromptLogprobs(got.prompt, want.prompt, &why)) << reqs[i].id << ": " << why;
  }
  EXPECT_GT(e->Stats().preemptions, 0) << "the pool was meant to force preemption";
  e->Shutdown();
}

}  // namespace
}  // namespace kvfork
