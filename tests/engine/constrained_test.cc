// Constrained decoding end to end in the engine: a random-weight model at
// temperature 1 is the worst case for a grammar (it would write anything),
// so every output here must still be a sentence of the grammar.
#include <gtest/gtest.h>

#include <random>

#include "engine/engine.h"
#include "engine/tiny_model_suite.h"
#include "grammar/compile.h"
#include "grammar/matcher.h"
#include "model/model.h"
#include "model/model_test_util.h"
#include "model/random_model.h"
#include "test_env.h"
#include "tokenizer/tokenizer.h"

namespace kvfork {
namespace {

struct Output {
  std::vector<std::vector<int32_t>> tokens;  // [choice]
  std::vector<std::string> text;
  std::vector<FinishReason> finish;
  Status error;
};

Output Drain(RequestStream& s, int64_t n) {
  Output o;
  o.tokens.resize(n);
  o.text.resize(n);
  o.finish.resize(n, FinishReason::kError);
  for (;;) {
    std::optional<RequestEvent> e = s.Pop(120000);
    if (!e) {
      o.error = InternalError("timed out");
      return o;
    }
    if (e->kind == RequestEvent::Kind::kToken) {
      o.tokens[e->choice].push_back(e->token);
      o.text[e->choice] += e->text_delta;
    } else if (e->kind == RequestEvent::Kind::kFinish) {
      o.finish[e->choice] = e->finish_reason;
    } else if (e->kind == RequestEvent::Kind::kDone) {
      return o;
    } else if (e->kind == RequestEvent::Kind::kError) {
      o.error = e->error;
      return o;
    }
  }
}

bool IsSentence(const std::shared_ptr<const grammar::Grammar>& g, const std::string& text) {
  grammar::GrammarMatcher m(g);
  return m.AcceptBytes(text) && m.CanEnd();
}

bool IsPrefix(const std::shared_ptr<const grammar::Grammar>& g, const std::string& text) {
  grammar::GrammarMatcher m(g);
  return m.AcceptBytes(text);
}

class ConstrainedTest : public TinyModelSuite<5> {
 protected:
  static std::unique_ptr<Engine> Make(int64_t kv_blocks = 256) {
    EngineOptions o;
    o.threads = 2;
    o.kv_blocks = kv_blocks;
    o.kv_block_size = 16;
    o.kv_backend = "paged";
    auto e = Engine::Create(o, *model_, *tokenizer_);
    EXPECT_TRUE(e.ok()) << e.status().ToString();
    return std::move(e).value();
  }

  static std::vector<int32_t> Prompt(uint32_t seed, int len) {
    std::mt19937 rng(seed);
    std::uniform_int_distribution<int32_t> d(100, 100000);
    std::vector<int32_t> p(len);
    for (auto& t : p) t = d(rng);
    return p;
  }

  static Request Constrained(const std::string& id, std::shared_ptr<const grammar::Grammar> g,
                             uint64_t seed, int64_t n = 1, int prompt_len = 20) {
    Request r;
    r.id = id;
    r.prompt_tokens = Prompt(static_cast<uint32_t>(seed), prompt_len);
    r.sampling.temperature = 1.0;
    r.sampling.seed = seed;
    r.sampling.max_tokens = 300;
    r.sampling.n = n;
    r.sampling.grammar = std::move(g);
    return r;
  }

  static Output Run(Engine& e, Request r) {
    const int64_t n = r.sampling.n;
    auto s = e.Submit(std::move(r));
    if (!s.ok()) {
      Output o;
      o.error = s.status();
      return o;
    }
    return Drain(**s, n);
  }

  static std::shared_ptr<const grammar::Grammar> Schema() {
    auto g = grammar::CompileJsonSchema(
        R"({"type":"object","properties":{"name":{"type":"string","maxLength":6},
          "age":{"type":"integer"},"tags":{"type":"array","items":{"enum":["a","b"]},
          "maxItems":3},"ok":{"type":"boolean"}},"required":["name","age"],
          "additionalProperties":false})",
        "schema");
    KVFORK_CHECK(g.ok());
    return *g;
  }

};

TEST_F(ConstrainedTest, JsonSchemaAtTemperatureOneWithSeveralChoices) {
  auto e = Make();
  auto g = Schema();
  for (uint64_t seed = 1; seed <= 4; ++seed) {
    Output o = Run(*e, Constrained("r" + std::to_string(seed), g, seed, /*n=*/3));
    ASSERT_TRUE(o.error.ok()) << o.error.ToString();
    for (int c = 0; c < 3; ++c) {
      EXPECT_EQ(o.finish[c], FinishReason::kStop) << o.text[c];
      EXPECT_TRUE(IsSentence(g, o.text[c]))
          << "seed " << seed << " choice " << c << ": " << o.text[c];
    }
    EXPECT_NE(o.text[0], o.text[1]);  // siblings draw differently
  }
}

TEST_F(ConstrainedTest, ChoiceIsForcedAndUnconstrainedRequestsAreUntouched) {
  auto e = Make();
  auto g = grammar::CompileChoice({"positive", "negative"}, "guided_choice");
  ASSERT_TRUE(g.ok());
  Output o = Run(*e, Constrained("c", *g, 9));
  ASSERT_TRUE(o.error.ok()) << o.error.ToString();
  EXPECT_TRUE(o.text[0] == "positive" || o.text[0] == "negative") << o.text[0];
  EXPECT_EQ(o.finish[0], FinishReason::kStop);
  // The same seeded request without a grammar writes something else.
  Request free = Constrained("f", nullptr, 9);
  free.sampling.max_tokens = 8;
  Output f = Run(*e, std::move(free));
  EXPECT_NE(f.text[0], o.text[0]);
}

TEST_F(ConstrainedTest, SameTokensAloneBatchedAndPreempted) {
  // At least ~100 tokens per output, so four of them outgrow the pool below.
  auto compiled = grammar::CompileRegex("[01](,[01]){99}", "guided_regex");
  ASSERT_TRUE(compiled.ok());
  auto g = *compiled;
  std::vector<Output> alone;
  {
    auto e = Make();
    for (uint64_t seed = 20; seed < 24; ++seed)
      alone.push_back(Run(*e, Constrained("a" + std::to_string(seed), g, seed, 1, 100)));
  }
  // All four at once, in a pool that holds one request's worst case (100 +
  // 300 tokens) but not four prompts and their outputs: they preempt.
  auto e = Make(/*kv_blocks=*/26);
  std::vector<std::shared_ptr<RequestStream>> streams;
  for (uint64_t seed = 20; seed < 24; ++seed) {
    auto s = e->Submit(Constrained("b" + std::to_string(seed), g, seed, 1, 100));
    ASSERT_TRUE(s.ok()) << s.status().ToString();
    streams.push_back(*s);
  }
  for (size_t i = 0; i < streams.size(); ++i) {
    Output b = Drain(*streams[i], 1);
    ASSERT_TRUE(b.error.ok()) << b.error.ToString();
    EXPECT_EQ(b.tokens[0], alone[i].tokens[0]) << "request " << i;
    EXPECT_TRUE(IsSentence(g, b.text[0])) << b.text[0];
  }
  EXPECT_GT(e->Stats().preemptions, 0);
}

TEST_F(ConstrainedTest, StopStringEndsInsideTheGrammar) {
  auto e = Make();
  auto g = grammar::CompileRegex("abc(de)*f", "guided_regex");
  ASSERT_TRUE(g.ok());
  Request r = Constrained("s", *g, 3);
  r.sampling.stop = {"d"};
  Output o = Run(*e, std::move(r));
  ASSERT_TRUE(o.error.ok()) << o.error.ToString();
  EXPECT_TRUE(o.text[0] == "abcf" || o.text[0] == "abc") << o.text[0];
  EXPECT_TRUE(IsPrefix(*g, o.text[0]));
}

}  // namespace
}  // namespace kvfork
