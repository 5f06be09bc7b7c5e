// The SentencePiece tokenizer of GGUF files (tokenizer/spm_model.h,
// spm_tokenizer.h): the merge order, byte fallback, prefix space, special
// tokens and decoding on small vocabularies built to show each rule; the
// word-by-word merge against a plain whole-text merge loop (llama.cpp's
// algorithm written the obvious way) on the real Llama 2 and Phi-3
// vocabularies; round trips; errors; a Gemma 3 GGUF carrying a SentencePiece
// vocabulary. llama.cpp's own vectors for those files are in
// gguf_vocab_test.cc.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <functional>
#include <map>
#include <queue>

#include "corpus_rng.h"
#include "engine/model_tokenizer.h"
#include "llama_cpp_vectors.h"
#include "model/gguf_export.h"
#include "model/model.h"
#include "model/random_model.h"
#include "test_env.h"
#include "tokenizer/gguf_vocab.h"
#include "tokenizer/spm_model.h"
#include "tokenizer/utf8.h"

namespace kvfork {
namespace {

using Ids = std::vector<int32_t>;

std::string ModelsDir() { return testing::LlamaCppSourceDir() + "/models"; }

// <unk>, <s>, </s>, the 256 byte tokens (ids 3..258), then `pieces` in order
// (ids 259...) as normal tokens with their scores. No prefix space unless a
// test turns it on.
GgufVocab SmallVocab(const std::vector<std::pair<std::string, float>>& pieces) {
  GgufVocab v;
  v.source = "small.gguf";
  v.model = "llama";
  v.pre = "default";
  auto add = [&](std::string text, GgufTokenType type, float score) {
    v.tokens.push_back(std::move(text));
    v.token_types.push_back(static_cast<int32_t>(type));
    v.scores.push_back(score);
  };
  add("<unk>", GgufTokenType::kUnknown, 0);
  add("<s>", GgufTokenType::kControl, 0);
  add("</s>", GgufTokenType::kControl, 0);
  static constexpr char kHex[] = "0123456789ABCDEF";
  for (int b = 0; b < 256; ++b)
    add(std::string("<0x") + kHex[b >> 4] + kHex[b & 15] + ">", GgufTokenType::kByte, 0);
  for (const auto& [text, score] : pieces) add(text, GgufTokenType::kNormal, score);
  v.add_space_prefix = false;
  return v;
}
constexpr int32_t kUnk = 0, kBos = 1, kEos = 2;
constexpr int32_t kPiece = 259;  // id of SmallVocab's first piece
int32_t Byte(uint8_t b) { return 3 + b; }

void AddToken(GgufVocab* v, std::string text, GgufTokenType type) {
  v->tokens.push_back(std::move(text));
  v->token_types.push_back(static_cast<int32_t>(type));
  v->scores.push_back(0);
}

std::unique_ptr<Tokenizer> Load(const GgufVocab& v) {
  auto t = TokenizerFromGguf(v);
  EXPECT_TRUE(t.ok()) << t.status().ToString();
  return t.ok() ? std::move(*t) : nullptr;
}

TEST(SpmTokenizer, HighestScoreMergesFirstLeftmostOnTies) {
  // a 259, b 260, c 261, ab 262, bc 263
  auto with = [](float ab, float bc) {
    return Load(SmallVocab({{"a", -10}, {"b", -10}, {"c", -10}, {"ab", ab}, {"bc", bc}}));
  };
  EXPECT_EQ(with(-1, -2)->Encode("abc", false), (Ids{kPiece + 3, kPiece + 2}));
  EXPECT_EQ(with(-2, -1)->Encode("abc", false), (Ids{kPiece, kPiece + 4}));
  EXPECT_EQ(with(-1, -1)->Encode("abc", false), (Ids{kPiece + 3, kPiece + 2})) << "leftmost";
  EXPECT_EQ(with(-1, -1)->Encode("bcabc", false), (Ids{kPiece + 4, kPiece + 3, kPiece + 2}));
}

TEST(SpmTokenizer, MergesOnlyThroughTokens) {
  // A whole token the merges cannot reach is not taken: xyz needs xy or yz.
  auto t = Load(SmallVocab({{"x", -1}, {"y", -1}, {"z", -1}, {"xyz", 0}}));
  EXPECT_EQ(t->Encode("xyz", false), (Ids{kPiece, kPiece + 1, kPiece + 2}));
  // Through bc (best) then abc: a 259, b 260, c 261, ab 262, bc 263, abc 264.
  auto chain =
      Load(SmallVocab({{"a", -10}, {"b", -10}, {"c", -10}, {"ab", -3}, {"bc", -1}, {"abc", -2}}));
  EXPECT_EQ(chain->Encode("abc", false), (Ids{kPiece + 5}));
}

TEST(SpmTokenizer, ByteFallbackFollowsLlamaCppSymbols) {
  auto t = Load(SmallVocab({{"a", -1}, {"b", -1}}));
  EXPECT_EQ(t->Encode("\xc3\xa9", false), (Ids{Byte(0xc3), Byte(0xa9)}));  // é
  // llama.cpp reads a symbol's length from its lead byte alone: E4 takes the
  // next two bytes with it, so "ab" falls back to bytes too.
  EXPECT_EQ(t->Encode("\xe4"
                      "ab",
                      false),
            (Ids{Byte(0xe4), Byte('a'), Byte('b')}));
  EXPECT_EQ(t->Encode("a\xe4", false), (Ids{kPiece, Byte(0xe4)}));
  // FF reads as a 4-byte lead (clipped to the text): "\xff" "a" is one symbol.
  EXPECT_EQ(t->Encode("\xff"
                      "a",
                      false),
            (Ids{Byte(0xff), Byte('a')}));
  EXPECT_EQ(t->Decode(Ids{Byte(0xc3), Byte(0xa9)}, false), "\xc3\xa9");
  EXPECT_EQ(t->Decode(Ids{Byte(0xe4)}, false), "\xef\xbf\xbd");  // U+FFFD
  EXPECT_EQ(t->TokenBytes(Byte('\n')), "\n");
}

TEST(SpmTokenizer, ByteWithoutTokenBecomesUnknown) {
  std::vector<std::string> tokens = {"<unk>", "a"};
  auto m = SpmModel::Create(tokens, std::vector<float>{0, 0}, 0);
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  Ids ids;
  m->Encode("a\xc3\xa9", &ids);
  EXPECT_EQ(ids, (Ids{1, 0, 0}));
  auto none = SpmModel::Create(tokens, std::vector<float>{0, 0}, std::nullopt);
  ASSERT_FALSE(none.ok());
  EXPECT_NE(none.status().message().find("no token for the byte <0x00>"), std::string::npos)
      << none.status().ToString();
}

// ▁ 259, a 260, ▁a 261
GgufVocab PrefixVocab() {
  GgufVocab v = SmallVocab({{"\xe2\x96\x81", -5},
                            {"a", -5},
                            {"\xe2\x96\x81"
                             "a",
                             -1}});
  v.add_space_prefix.reset();  // SentencePiece's default: on
  return v;
}
constexpr int32_t kSpace = kPiece, kA = kPiece + 1, kSpaceA = kPiece + 2;

TEST(SpmTokenizer, PrefixSpaceStartsTheTextAndFollowsSpecialTokens) {
  auto t = Load(PrefixVocab());
  EXPECT_EQ(t->Encode("a", false), (Ids{kSpaceA}));
  EXPECT_EQ(t->Encode(" a", false), (Ids{kSpace, kSpaceA}));
  EXPECT_EQ(t->Encode("</s>a", false), (Ids{kEos, kSpaceA}));
  EXPECT_EQ(t->Encode("a</s>a", false), (Ids{kSpaceA, kEos, kSpaceA}));
  EXPECT_EQ(t->Encode("", false), (Ids{}));
  // add_bos_token and bos 1 are SentencePiece's defaults; eos only if asked.
  EXPECT_EQ(t->Encode("", true), (Ids{kBos}));
  EXPECT_EQ(t->Encode("a", true), (Ids{kBos, kSpaceA}));
  GgufVocab eos = PrefixVocab();
  eos.add_eos = true;
  eos.add_bos = false;
  EXPECT_EQ(Load(eos)->Encode("a", true), (Ids{kSpaceA, kEos}));
  GgufVocab off = PrefixVocab();
  off.add_space_prefix = false;
  EXPECT_EQ(Load(off)->Encode("</s>a", false), (Ids{kEos, kA}));
  EXPECT_EQ(Load(off)->Encode("a", false), (Ids{kA}));
  EXPECT_EQ(Load(off)->Decode(Ids{kSpaceA}, false), " a");
}

TEST(SpmTokenizer, DecodeDropsThePrefixSpaceOfTheFirstTokenOnly) {
  auto t = Load(PrefixVocab());
  EXPECT_EQ(t->Decode(Ids{kSpaceA}, false), "a");
  EXPECT_EQ(t->Decode(Ids{kSpace, kSpaceA}, false), " a");
  EXPECT_EQ(t->Decode(Ids{kEos, kSpaceA}, false), "</s> a");
  // A skipped first token keeps the next one's space, as llama.cpp's
  // detokenize with remove_special does.
  EXPECT_EQ(t->Decode(Ids{kEos, kSpaceA}, true), " a");
  EXPECT_EQ(t->Decode(Ids{kBos, kSpaceA}, true), " a");
  EXPECT_EQ(t->TokenBytes(kSpaceA), " a");
  EXPECT_EQ(t->TokenBytes(kEos), "</s>");
  // A stream continues a prompt: it keeps the space.
  StreamDecoder stream(*t, /*skip_special=*/false);
  std::string streamed;
  for (int32_t id : Ids{kSpaceA, kSpaceA}) streamed += stream.Push(id);
  EXPECT_EQ(streamed + stream.Flush(), " a a");
}

TEST(SpmTokenizer, SpecialAndUserDefinedTokens) {
  GgufVocab v = PrefixVocab();
  const auto tool = static_cast<int32_t>(v.tokens.size());
  AddToken(&v, "<tool>", GgufTokenType::kUserDefined);
  const auto turn = static_cast<int32_t>(v.tokens.size());
  AddToken(&v, "<end_of_turn>", GgufTokenType::kNormal);  // llama.cpp makes it control
  const auto unused = static_cast<int32_t>(v.tokens.size());
  AddToken(&v, "<unused0>", GgufTokenType::kUnused);
  auto t = Load(v);
  EXPECT_TRUE(t->IsSpecial(kUnk));
  EXPECT_TRUE(t->IsSpecial(kBos));
  EXPECT_TRUE(t->IsSpecial(turn));
  EXPECT_FALSE(t->IsSpecial(tool));
  EXPECT_FALSE(t->IsSpecial(kSpaceA));
  EXPECT_EQ(t->Encode("a<tool>a<end_of_turn>", false), (Ids{kSpaceA, tool, kSpaceA, turn}));
  EXPECT_EQ(t->eos_token_ids(), (Ids{kEos, turn}));
  EXPECT_EQ(t->bos_token(), "<s>");
  EXPECT_EQ(t->eos_token(), "</s>");
  EXPECT_EQ(t->bos_token_id(), kBos);
  EXPECT_EQ(t->TokenId("<tool>"), tool);
  EXPECT_EQ(t->TokenId(" a"), kSpaceA);
  EXPECT_FALSE(t->TokenId("zz").has_value());
  EXPECT_EQ(t->TokenBytes(unused), "");
  // Plain ranges refuse special tokens, not user-defined ones.
  const std::string text = "</s><tool>";
  const TextRange plain{0, text.size()};
  const Ids ids = t->Encode(text, false, std::span<const TextRange>(&plain, 1));
  EXPECT_EQ(std::count(ids.begin(), ids.end(), kEos), 0);
  EXPECT_EQ(ids.back(), tool);
  EXPECT_EQ(t->Decode(ids, false), "</s><tool>");
  EXPECT_EQ(t->FindSpecialTokens("a</s>b<s><tool>"), (std::vector<TextRange>{{1, 5}, {6, 9}}));
  EXPECT_GT(t->max_bytes_per_token(), 0);
}

TEST(SpmTokenizer, Phi3SpecialTokensSwallowTheWhitespaceAfterThem) {
  GgufVocab v = PrefixVocab();
  const auto end = static_cast<int32_t>(v.tokens.size());
  AddToken(&v, "<|end|>", GgufTokenType::kControl);
  v.name = "Phi3";
  auto phi3 = Load(v);
  EXPECT_EQ(phi3->Encode("<|end|>\n a", false), (Ids{end, kSpaceA}));
  EXPECT_EQ(phi3->Encode("<s>  a", false), (Ids{kBos, kSpace, kSpace, kSpaceA})) << "not <s>";
  // ASCII whitespace only (llama.cpp's isspace): U+00A0 stays text.
  EXPECT_EQ(phi3->Encode("<|end|> \xc2\xa0", false), (Ids{end, kSpace, Byte(0xc2), Byte(0xa0)}));
  EXPECT_EQ(phi3->max_bytes_per_token(), 0) << "whitespace can vanish";
  v.name = "llama";
  auto other = Load(v);
  EXPECT_EQ(other->Encode("<|end|>\n a", false), (Ids{end, kSpace, Byte('\n'), kSpaceA}));
}

TEST(SpmTokenizer, BadMetadataNamesTheKey) {
  struct Case {
    std::string want;
    std::function<void(GgufVocab*)> edit;
  };
  const std::vector<Case> cases = {
      {"tokenizer.ggml.model \"no-such\" is not supported",
       [](GgufVocab* v) { v->model = "no-such"; }},
      {"tokenizer.ggml.tokens[260] \"a\" is also tokenizer.ggml.tokens[259]",
       [](GgufVocab* v) { AddToken(v, "a", GgufTokenType::kNormal); }},
      {"tokenizer.ggml.scores has 3 entries", [](GgufVocab* v) { v->scores.resize(3); }},
      {"tokenizer.ggml.token_type has 3 entries", [](GgufVocab* v) { v->token_types.resize(3); }},
      {"tokenizer.ggml.token_type[7] is 9", [](GgufVocab* v) { v->token_types[7] = 9; }},
      {"tokenizer.ggml.tokens[259] \"a\" is a byte token not spelled <0xXX>",
       [](GgufVocab* v) { v->token_types[259] = 6; }},
      {"tokenizer.ggml.bos_token_id 99999 is outside", [](GgufVocab* v) { v->bos_id = 99999; }},
      {"tokenizer.ggml.tokens is empty",
       [](GgufVocab* v) {
         v->tokens.clear();
         v->token_types.clear();
         v->scores.clear();
       }},
  };
  for (const Case& c : cases) {
    GgufVocab v = SmallVocab({{"a", -1}});
    c.edit(&v);
    auto tok = TokenizerFromGguf(v);
    ASSERT_FALSE(tok.ok()) << c.want;
    EXPECT_NE(tok.status().message().find(c.want), std::string::npos) << tok.status().ToString();
    EXPECT_NE(tok.status().message().find("small.gguf"), std::string::npos)
        << tok.status().ToString();
  }
}

// llama.cpp's llm_tokenizer_spm_session written plainly: the whole text is
// one merge loop, std::map lookups, std::priority_queue.
Ids ReferenceEncode(const std::map<std::string, int32_t>& vocab, const std::vector<float>& scores,
                    const std::string& text) {
  struct Sym {
    size_t begin, n;
    int prev, next;
  };
  struct Bigram {
    float score;
    int left, right;
    size_t size;
  };
  auto cmp = [](const Bigram& l, const Bigram& r) {
    return l.score < r.score || (l.score == r.score && l.left > r.left);
  };
  std::priority_queue<Bigram, std::vector<Bigram>, decltype(cmp)> queue(cmp);
  std::vector<Sym> syms;
  for (size_t at = 0; at < text.size();) {
    const size_t n = std::min(SpmSymbolLength(static_cast<uint8_t>(text[at])), text.size() - at);
    const int i = static_cast<int>(syms.size());
    syms.push_back({at, n, i - 1, at + n == text.size() ? -1 : i + 1});
    at += n;
  }
  auto add = [&](int l, int r) {
    if (l < 0 || r < 0) return;
    const std::string s = text.substr(syms[l].begin, syms[l].n + syms[r].n);
    auto it = vocab.find(s);
    if (it != vocab.end()) queue.push({scores[it->second], l, r, s.size()});
  };
  for (int i = 1; i < static_cast<int>(syms.size()); ++i) add(i - 1, i);
  while (!queue.empty()) {
    const Bigram b = queue.top();
    queue.pop();
    Sym& l = syms[b.left];
    Sym& r = syms[b.right];
    if (l.n == 0 || r.n == 0 || l.n + r.n != b.size) continue;
    l.n += r.n;
    r.n = 0;
    l.next = r.next;
    if (r.next >= 0) syms[r.next].prev = b.left;
    add(l.prev, b.left);
    add(b.left, l.next);
  }
  Ids out;
  for (int i = syms.empty() ? -1 : 0; i != -1; i = syms[i].next) {
    const std::string s = text.substr(syms[i].begin, syms[i].n);
    auto it = vocab.find(s);
    if (it != vocab.end()) {
      out.push_back(it->second);
      continue;
    }
    for (char c : s) {
      char hex[8];
      std::snprintf(hex, sizeof(hex), "<0x%02X>", static_cast<uint8_t>(c));
      out.push_back(vocab.at(hex));
    }
  }
  return out;
}

std::string Escape(const std::string& text) {
  std::string out = "\xe2\x96\x81";  // the prefix space
  for (char c : text) {
    if (c == ' ') {
      out += "\xe2\x96\x81";
    } else {
      out.push_back(c);
    }
  }
  return out;
}

// Texts for the comparisons: random multilingual text, with stray bytes and
// literal "▁" in some, and shapes around word starts.
std::vector<std::string> Texts() {
  std::vector<std::string> texts = {
      "a\xe2\x96\x81"
      "b",
      "\xe2\x96\x81\xe2\x96\x81x",
      "\xf0\xe2\x96\x81 y",
      "x \xe2\x96",
      "   ",
      "\n\n  \t x",
      "ab  cd   ef",
      "Hello world",
      "\xe4 \xe4",
      " \xff ",
  };
  for (uint32_t seed = 1; seed <= 24; ++seed) {
    std::string t = testing::RandomText(seed, 1500);
    if (seed % 3 == 0) t.insert(t.size() / 2, "\xff\xe4");
    if (seed % 4 == 0) t.insert(t.size() / 3, "\xe2\x96\x81\xe2\x96\x81");
    texts.push_back(t);
  }
  return texts;
}

class SpmVocabFiles : public ::testing::TestWithParam<std::string> {};

TEST_P(SpmVocabFiles, WordByWordEqualsTheWholeTextMergeLoop) {
  auto v = ReadGgufVocab(ModelsDir() + "/ggml-vocab-" + GetParam() + ".gguf");
  ASSERT_TRUE(v.ok()) << v.status().ToString();
  auto m = SpmModel::Create(v->tokens, v->scores, 0);
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  EXPECT_TRUE(m->cuts_at_words()) << "no token holds a space after another character";
  std::map<std::string, int32_t> vocab;
  for (size_t i = 0; i < v->tokens.size(); ++i) vocab[v->tokens[i]] = static_cast<int32_t>(i);
  std::vector<std::string> texts = Texts();
  for (const auto& [text, ids] :
       testing::ReadLlamaCppVectors(ModelsDir() + "/ggml-vocab-" + GetParam() + ".gguf"))
    texts.push_back(text);
  for (const std::string& text : texts) {
    const std::string escaped = Escape(text);
    Ids got;
    m->Encode(escaped, &got);
    EXPECT_EQ(got, ReferenceEncode(vocab, v->scores, escaped)) << "text: " << text;
    Ids again;  // through the word cache this time
    m->Encode(escaped, &again);
    EXPECT_EQ(again, got);
  }
}

TEST_P(SpmVocabFiles, DecodeGivesTheTextBack) {
  auto t = LoadModelTokenizer(ModelsDir() + "/ggml-vocab-" + GetParam() + ".gguf");
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  std::vector<std::string> texts = Texts();
  for (const auto& [text, ids] :
       testing::ReadLlamaCppVectors(ModelsDir() + "/ggml-vocab-" + GetParam() + ".gguf"))
    texts.push_back(text);
  int checked = 0;
  for (const std::string& text : texts) {
    // Invalid UTF-8 comes back as U+FFFD; a special token is followed by a
    // prefix space that llama.cpp's decoding keeps; a "▁" written in the
    // text is a space to SentencePiece and decodes as one.
    if (!utf8::IsValid(text) || !(*t)->FindSpecialTokens(text).empty() ||
        text.find(kSpmSpace) != std::string::npos)
      continue;
    ++checked;
    const Ids ids = (*t)->Encode(text, false);
    EXPECT_EQ((*t)->Decode(ids, false), text);
    StreamDecoder stream(**t, false);
    std::string streamed;
    for (int32_t id : ids) streamed += stream.Push(id);
    EXPECT_EQ(streamed + stream.Flush(), text.empty() ? "" : " " + text) << "keeps the space";
  }
  EXPECT_GT(checked, 50);
}

// max_bytes_per_token: no text of more than k * bound bytes encodes into k
// or fewer tokens (0: no bound, Phi-3's rstrip lets whitespace vanish).
TEST_P(SpmVocabFiles, BytesPerTokenBoundHolds) {
  auto t = LoadModelTokenizer(ModelsDir() + "/ggml-vocab-" + GetParam() + ".gguf");
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  const int64_t bound = (*t)->max_bytes_per_token();
  if (GetParam() == "phi-3") {
    EXPECT_EQ(bound, 0);
    return;
  }
  ASSERT_GT(bound, 0);
  std::vector<std::string> texts = Texts();
  texts.push_back(std::string(10000, ' '));
  texts.push_back(std::string(3000, '\n'));
  std::string marks;
  for (int i = 0; i < 2000; ++i) marks += "\xe2\x96\x81";  // literal "▁": 3 bytes each
  texts.push_back(marks);
  for (const std::string& text : texts) {
    const auto tokens = static_cast<int64_t>((*t)->Encode(text, false).size());
    EXPECT_GE(tokens * bound, static_cast<int64_t>(text.size())) << text.substr(0, 40);
  }
}

// A vocabulary with a token holding "▁" after a character: no word cuts,
// only pair cuts ("c" and "d" pair with nothing); random texts over its
// alphabet give the whole-text loop's ids.
TEST(SpmTokenizer, PairCutsEqualTheWholeTextMergeLoop) {
  const std::string sp = "\xe2\x96\x81";
  std::vector<std::string> tokens = {"<unk>"};
  std::vector<float> scores = {0};
  static constexpr char kHex[] = "0123456789ABCDEF";
  for (int b = 0; b < 256; ++b) {
    tokens.push_back(std::string("<0x") + kHex[b >> 4] + kHex[b & 15] + ">");
    scores.push_back(0);
  }
  testing::Mulberry32 rng(11);
  for (const std::string& t :
       {sp, std::string("a"), std::string("b"), sp + "a", sp + "b", std::string("ab"),
        std::string("ba"), "a" + sp + "b", sp + sp, "ab" + sp, sp + "ab", std::string("bab")}) {
    tokens.push_back(t);
    scores.push_back(-static_cast<float>(rng.Next() % 7));  // ties on purpose
  }
  auto m = SpmModel::Create(tokens, scores, 0);
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  EXPECT_FALSE(m->cuts_at_words());
  std::map<std::string, int32_t> vocab;
  for (size_t i = 0; i < tokens.size(); ++i) vocab[tokens[i]] = static_cast<int32_t>(i);
  for (int n = 0; n < 400; ++n) {
    std::string text;
    const size_t length = rng.Next() % 40;
    for (size_t i = 0; i < length; ++i) {
      const uint32_t pick = rng.Next() % 6;
      text += pick == 0 ? sp : std::string(1, "abcd "[pick - 1]);
    }
    const std::string escaped = Escape(text);
    Ids got;
    m->Encode(escaped, &got);
    EXPECT_EQ(got, ReferenceEncode(vocab, scores, escaped)) << "text: " << text;
  }
}

INSTANTIATE_TEST_SUITE_P(LlamaCpp, SpmVocabFiles, ::testing::Values("llama-spm", "phi-3"),
                         [](const auto& info) {
                           std::string n = info.param;
                           for (char& c : n)
                             if (c == '-') c = '_';
                           return n;
                         });

TEST(SpmTokenizer, RealVocabulariesSpecialTokens) {
  auto llama = LoadModelTokenizer(ModelsDir() + "/ggml-vocab-llama-spm.gguf");
  ASSERT_TRUE(llama.ok()) << llama.status().ToString();
  EXPECT_EQ((*llama)->Encode("Hello", true), (Ids{1, 15043}));
  EXPECT_EQ((*llama)->eos_token_ids(), (Ids{2}));
  EXPECT_EQ((*llama)->max_bytes_per_token(), 48);
  auto phi3 = LoadModelTokenizer(ModelsDir() + "/ggml-vocab-phi-3.gguf");
  ASSERT_TRUE(phi3.ok()) << phi3.status().ToString();
  // eos <|endoftext|>, then the control </s> (user-defined in the file) and <|end|>.
  EXPECT_EQ((*phi3)->eos_token_ids(), (Ids{32000, 2, 32007}));
  EXPECT_FALSE((*phi3)->chat_template().empty());
  // general.name "Phi3": <|user|> swallows the newline after it.
  EXPECT_EQ((*phi3)->Encode("<|user|>\nHello<|end|>\n<|assistant|>", true),
            (Ids{1, 32010, 15043, 32007, 32001}));
}

// A Gemma 3 GGUF with a SentencePiece vocabulary (the keys of llama.cpp's
// Llama 2 vocab file, 32000 tokens, as a Gemma 3 file carries its own) loads
// with its tokenizer, whose ids are the vocab file's, and the model loads.
TEST(SpmTokenizer, Gemma3GgufLoadsWithItsSentencePieceTokenizer) {
  const std::string dir = testing::BuildDir() + "/test-data/spm_gemma3";
  std::filesystem::create_directories(dir);
  RandomModelOptions o;
  o.arch = Architecture::kGemma3;
  o.shape = "tiny";
  o.dtype = DType::kF32;
  o.vocab_size = 32000;
  ASSERT_TRUE(WriteRandomModel(o, dir + "/model").ok());
  GgufExportOptions eo;
  eo.vocab_gguf = ModelsDir() + "/ggml-vocab-llama-spm.gguf";
  const std::string gguf = dir + "/gemma3-spm.gguf";
  Status st = ExportGguf(dir + "/model", gguf, eo);
  ASSERT_TRUE(st.ok()) << st.ToString();
  auto tok = LoadModelTokenizer(gguf);
  ASSERT_TRUE(tok.ok()) << tok.status().ToString();
  auto ref = LoadModelTokenizer(eo.vocab_gguf);
  ASSERT_TRUE(ref.ok()) << ref.status().ToString();
  for (const std::string& text : Texts())
    EXPECT_EQ((*tok)->Encode(text, true), (*ref)->Encode(text, true));
  ModelLoadOptions lo;
  lo.show_progress = false;
  auto model = Model::Load(gguf, lo);
  ASSERT_TRUE(model.ok()) << model.status().ToString();
  EXPECT_EQ((*model)->config().vocab_size, (*tok)->vocab_size());
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace kvfork
