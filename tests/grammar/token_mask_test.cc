// Token masks over a small vocabulary: every allowed token is one the
// matcher accepts, every other one is rejected (checked by brute force),
// end tokens only when the grammar can end, and the cache by state.
#include "grammar/token_mask.h"

#include <gtest/gtest.h>

#include <random>

#include "grammar/compile.h"

namespace kvfork::grammar {
namespace {

constexpr int32_t kEos = 0;

std::shared_ptr<const Vocabulary> TestVocab() {
  std::vector<std::string> t = {"",     "{",     "}",     "\"", "\":", "a",    "ab",   "1",   "12",
                                ",",    " ",     "\n",    "  ", "{\"", "\"}",  "true", "fal", "se",
                                "null", "[",     "]",     "x",  "é",   "\xC3", "\xA9", "-",   "0",
                                ".5",   "\":\"", "\"a\"", "},", "\"b", "b",    "c",    ":"};
  return Vocabulary::FromTokenBytes(t);
}

// Brute force: token t is allowed iff the matcher accepts its bytes.
void CheckMaskAgainstMatcher(TokenConstraint& c, const Vocabulary& v, const TokenGrammar& tg) {
  auto mask = c.Mask();
  for (int32_t id = 0; id < v.size(); ++id) {
    bool expect;
    if (tg.IsEnd(id)) {
      expect = c.CanEnd();
    } else if (v.token_bytes(id).empty()) {
      expect = false;
    } else {
      GrammarMatcher m = c.matcher();
      expect = m.AcceptBytes(v.token_bytes(id));
    }
    EXPECT_EQ(mask->Allowed(id), expect) << "token " << id << " '" << v.token_bytes(id) << "'";
  }
}

TEST(TokenMask, MatchesBruteForceAlongRandomWalks) {
  auto vocab = TestVocab();
  auto schema = CompileJsonSchema(
      R"({"type":"object","properties":{"a":{"type":"string","maxLength":3},
        "b":{"type":"array","items":{"type":"number"},"maxItems":2},"c":{"type":"boolean"}},
        "required":["a"]})",
      "schema");
  ASSERT_TRUE(schema.ok()) << schema.status().ToString();
  auto tg = std::make_shared<TokenGrammar>(*schema, vocab, std::vector<int32_t>{kEos});
  std::mt19937 rng(7);
  for (int walk = 0; walk < 200; ++walk) {
    TokenConstraint c(tg);
    std::string text;
    for (int step = 0; step < 40; ++step) {
      CheckMaskAgainstMatcher(c, *vocab, *tg);
      auto mask = c.Mask();
      std::vector<int32_t> allowed;
      for (int32_t id = 0; id < vocab->size(); ++id)
        if (mask->Allowed(id)) allowed.push_back(id);
      ASSERT_FALSE(allowed.empty()) << text;  // this vocabulary can always continue
      const int32_t pick = allowed[rng() % allowed.size()];
      text += vocab->token_bytes(pick);
      ASSERT_TRUE(c.Accept(pick).ok());
      if (pick == kEos) break;
    }
  }
  const MaskCacheStats stats = tg->cache_stats();
  EXPECT_GT(stats.hits, stats.misses);  // states repeat across walks
}

TEST(TokenMask, ForcedTokenAndEnd) {
  auto vocab = TestVocab();
  auto g = CompileChoice({"true"}, "c");
  ASSERT_TRUE(g.ok());
  auto tg = std::make_shared<TokenGrammar>(*g, vocab, std::vector<int32_t>{kEos});
  TokenConstraint c(tg);
  auto mask = c.Mask();
  EXPECT_EQ(mask->num_allowed, 1);
  EXPECT_EQ(vocab->token_bytes(mask->single), "true");
  EXPECT_FALSE(mask->Allowed(kEos));
  EXPECT_FALSE(c.Accept(kEos).ok());
  ASSERT_TRUE(c.Accept(mask->single).ok());
  mask = c.Mask();
  EXPECT_EQ(mask->single, kEos);  // only the end remains
  EXPECT_FALSE(c.Accept(5).ok());
  ASSERT_TRUE(c.Accept(kEos).ok());
  EXPECT_TRUE(c.ended());
}

TEST(TokenMask, PartialUtf8TokensAreAllowedMidCharacter) {
  auto vocab = TestVocab();
  auto g = CompileRegex("é+", "r");
  ASSERT_TRUE(g.ok());
  auto tg = std::make_shared<TokenGrammar>(*g, vocab, std::vector<int32_t>{kEos});
  TokenConstraint c(tg);
  auto mask = c.Mask();
  EXPECT_TRUE(mask->Allowed(22));   // é
  EXPECT_TRUE(mask->Allowed(23));   // its first byte
  EXPECT_FALSE(mask->Allowed(24));  // its second byte alone
  ASSERT_TRUE(c.Accept(23).ok());
  mask = c.Mask();
  EXPECT_TRUE(mask->Allowed(24));
  EXPECT_FALSE(mask->Allowed(kEos));
}

}  // namespace
}  // namespace kvfork::grammar
