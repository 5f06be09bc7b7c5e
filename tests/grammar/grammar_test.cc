// GBNF parsing and the byte-level matcher.
#include <gtest/gtest.h>

#include "grammar/compile.h"
#include "grammar/matcher.h"

namespace kvfork::grammar {
namespace {

std::shared_ptr<const Grammar> Gbnf(const std::string& text) {
  auto g = CompileGbnf(text, "grammar");
  EXPECT_TRUE(g.ok()) << g.status().ToString();
  return g.ok() ? *g : nullptr;
}

// Whether the whole of `text` is a sentence of the grammar.
bool Matches(const std::shared_ptr<const Grammar>& g, const std::string& text) {
  GrammarMatcher m(g);
  return m.AcceptBytes(text) && m.CanEnd();
}

TEST(Gbnf, LiteralsAlternativesAndRepetition) {
  auto g = Gbnf(R"(root ::= "a" ("b" | "cd")* x{2,3}
x ::= [0-9])");
  EXPECT_TRUE(Matches(g, "a12"));
  EXPECT_TRUE(Matches(g, "abcdb123"));
  EXPECT_FALSE(Matches(g, "a1"));
  EXPECT_FALSE(Matches(g, "a1234"));
  EXPECT_FALSE(Matches(g, "ac12"));
}

TEST(Gbnf, PrefixIsAcceptedButNotComplete) {
  auto g = Gbnf(R"(root ::= "hello" " world"?)");
  GrammarMatcher m(g);
  EXPECT_TRUE(m.AcceptBytes("hel"));
  EXPECT_FALSE(m.CanEnd());
  EXPECT_FALSE(m.AcceptBytes("x"));  // rejected: the state is unchanged
  EXPECT_TRUE(m.AcceptBytes("lo"));
  EXPECT_TRUE(m.CanEnd());
  EXPECT_FALSE(m.Complete());
  EXPECT_TRUE(m.AcceptBytes(" world"));
  EXPECT_TRUE(m.Complete());
}

TEST(Gbnf, NextBytesAreTheUnionOfHeads) {
  auto g = Gbnf(R"(root ::= "ab" | "ac" | [x-z])");
  GrammarMatcher m(g);
  ByteSet next = m.NextBytes();
  EXPECT_TRUE(next.Test('a'));
  EXPECT_TRUE(next.Test('y'));
  EXPECT_FALSE(next.Test('b'));
  ASSERT_TRUE(m.AcceptBytes("a"));
  next = m.NextBytes();
  EXPECT_TRUE(next.Test('b') && next.Test('c') && !next.Test('a'));
}

TEST(Gbnf, Utf8ClassesMatchWholeCharacters) {
  auto g = Gbnf(R"(root ::= [à-ö€] [^a]+)");
  EXPECT_TRUE(Matches(g, "àb"));
  EXPECT_TRUE(Matches(g, "€日本"));
  EXPECT_FALSE(Matches(g, "÷b"));  // U+00F7 is past ö
  EXPECT_FALSE(Matches(g, "ba"));
  EXPECT_FALSE(Matches(g, "àa"));
  GrammarMatcher m(g);
  EXPECT_FALSE(m.AcceptBytes("\xC3\xB7"));  // ÷
  EXPECT_TRUE(m.AcceptBytes("\xE2\x82"));   // first bytes of €
  EXPECT_FALSE(m.CanEnd());
}

TEST(Gbnf, EscapesAndComments) {
  auto g = Gbnf("# a comment\nroot ::= \"\\x41\\u00e9\\n\" [\\t] # trailing\n");
  EXPECT_TRUE(Matches(g, "A\xC3\xA9\n\t"));
}

TEST(Gbnf, RuleReferencesAndRecursion) {
  auto g = Gbnf(R"(root ::= list
list ::= "[" (item ("," item)*)? "]"
item ::= [0-9]+ | list)");
  EXPECT_TRUE(Matches(g, "[1,[2,[]],33]"));
  EXPECT_FALSE(Matches(g, "[1,]"));
}

TEST(Gbnf, DeepRightRecursionKeepsTheStackFlat) {
  auto g = Gbnf(R"(root ::= "a"*)");
  GrammarMatcher m(g);
  for (int i = 0; i < 10000; ++i) ASSERT_TRUE(m.AcceptBytes("a"));
  EXPECT_LT(m.arena().size(), 8u);
}

TEST(Gbnf, DeepNestingNeedsNoDeepRecursion) {
  // 20,000 open frames, then all closed by optional tails in one step: the
  // matcher and its copies walk the stacks without recursing.
  auto g = Gbnf(R"g(root ::= "(" root ")"? | "x")g");
  GrammarMatcher m(g);
  ASSERT_TRUE(m.AcceptBytes(std::string(20000, '(')));
  EXPECT_FALSE(m.CanEnd());
  ASSERT_TRUE(m.AcceptBytes("x"));
  EXPECT_TRUE(m.CanEnd());
  EXPECT_FALSE(m.StateKey().empty());
  ASSERT_TRUE(m.AcceptBytes("))"));
  EXPECT_TRUE(m.CanEnd());
}

TEST(Gbnf, PathologicalAmbiguityIsBounded) {
  // 100,000 nested optional rules, each a parse of the next "a": the step's
  // work and stacks are capped (kMaxExpandSteps, kMaxHeads), so this
  // finishes at once instead of stalling (or overflowing) the engine.
  auto g = Gbnf(R"g(root ::= ("a"?){0,100000} "b")g");
  GrammarMatcher m(g);
  for (int i = 0; i < 20; ++i) ASSERT_TRUE(m.AcceptBytes("a"));
  EXPECT_LE(m.heads().size(), kMaxHeads);
  // The same shape with a chain the bounds hold: exact.
  auto small = Gbnf(R"g(root ::= ("a"?){0,50} "b")g");
  EXPECT_TRUE(Matches(small, std::string(50, 'a') + "b"));
  EXPECT_FALSE(Matches(small, std::string(51, 'a') + "b"));
}

TEST(Gbnf, ErrorsNameTheProblem) {
  auto missing = CompileGbnf("root ::= foo", "grammar");
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.status().message().find("'foo'"), std::string::npos);
  auto left = CompileGbnf("root ::= root \"a\" | \"b\"", "grammar");
  ASSERT_FALSE(left.ok());
  EXPECT_NE(left.status().message().find("left-recursive"), std::string::npos);
  EXPECT_FALSE(CompileGbnf("start ::= \"a\"", "grammar").ok());  // no root
  EXPECT_FALSE(CompileGbnf("root ::= \"a", "grammar").ok());
  EXPECT_FALSE(CompileGbnf("root ::= [b-a]", "grammar").ok());
  EXPECT_FALSE(CompileGbnf("root ::= \"a\"{3,2}", "grammar").ok());
  EXPECT_FALSE(CompileGbnf("root ::= \"a\"{99999999}", "grammar").ok());
}

}  // namespace
}  // namespace kvfork::grammar
