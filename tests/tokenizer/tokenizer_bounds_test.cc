// Tokenizer::max_bytes_per_token() must be a true bound (no text of more than
// k * bound bytes encodes into k or fewer tokens), including under every
// normalizer's largest shrink; and encoding a large text must not leave its
// scratch buffers allocated on the thread.
#include <gtest/gtest.h>
#include <malloc.h>

#include <nlohmann/json.hpp>
#include <thread>

#include "corpus_rng.h"
#include "test_env.h"
#include "tokenizer/byte_level.h"
#include "tokenizer/normalizer.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/utf8.h"

namespace kvfork {
namespace {

using nlohmann::json;

const Tokenizer& Qwen() {
  static std::unique_ptr<Tokenizer> t = *Tokenizer::Load(testing::QwenTokenizerDir());
  return *t;
}
const Tokenizer& Llama() {
  static std::unique_ptr<Tokenizer> t = *Tokenizer::Load(testing::LlamaTokenizerDir());
  return *t;
}

std::string Cp(uint32_t cp) {
  std::string s;
  utf8::AppendCodepoint(cp, &s);
  return s;
}

std::string Repeat(const std::string& s, size_t n) {
  std::string r;
  for (size_t i = 0; i < n; ++i) r += s;
  return r;
}

Normalizer Make(const json& j) { return *Normalizer::FromJson(j); }

TEST(MaxBytesPerToken, NormalizersNeverShrinkTextMoreThanTheConstant) {
  const Normalizer nfd = Make({{"type", "NFD"}}), nfkd = Make({{"type", "NFKD"}});
  struct Form {
    const char* name;
    Normalizer n;
    const Normalizer* decomposed;  // also fed the decomposed form
  };
  std::vector<Form> forms;
  forms.push_back({"NFC", Make({{"type", "NFC"}}), &nfd});
  forms.push_back({"NFKC", Make({{"type", "NFKC"}}), &nfkd});
  forms.push_back({"Lowercase", Make({{"type", "Lowercase"}}), nullptr});
  forms.push_back(
      {"NFKC+Lowercase",
       Make({{"type", "Sequence"}, {"normalizers", {{{"type", "NFKC"}}, {{"type", "Lowercase"}}}}}),
       &nfkd});
  double worst = 0;
  std::string worst_at;
  for (uint32_t cp = 1; cp <= 0x10FFFF; ++cp) {
    if (cp >= 0xD800 && cp <= 0xDFFF) continue;
    const std::string c = Cp(cp);
    for (const Form& f : forms) {
      std::vector<std::string> inputs = {c};
      if (f.decomposed != nullptr) inputs.push_back(f.decomposed->Normalize(c));
      for (const std::string& in : inputs) {
        const std::string out = f.n.Normalize(in);
        ASSERT_FALSE(out.empty()) << f.name << " of U+" << std::hex << cp;
        const double shrink = static_cast<double>(in.size()) / static_cast<double>(out.size());
        if (shrink > worst) {
          worst = shrink;
          worst_at = std::string(f.name) + " U+" + std::to_string(cp);
        }
      }
    }
  }
  EXPECT_LE(worst, static_cast<double>(kMaxNormalizerShrink)) << worst_at;
  EXPECT_EQ(worst, static_cast<double>(kMaxNormalizerShrink)) << "the constant is not tight";
  // Hangul jamo L+V+T (9 bytes) compose to one 3-byte syllable under NFC.
  EXPECT_EQ(forms[0].n.Normalize("\u1100\u1161\u11A8"), "\uAC01");
}

TEST(MaxBytesPerToken, RealTokenizers) {
  // The longest token of both is 128 spaces; Qwen3 normalizes with NFC.
  EXPECT_EQ(Llama().max_bytes_per_token(), 128);
  EXPECT_EQ(Qwen().max_bytes_per_token(), 128 * kMaxNormalizerShrink);
}

TEST(MaxBytesPerToken, HoldsOnAdversarialTexts) {
  std::vector<std::string> texts = {Repeat(" ", 100000),
                                    Repeat("-", 50000),
                                    "//" + Repeat("-", 112),
                                    Repeat("\u212A", 5000),  // Kelvin sign: "K" under NFC
                                    Repeat("\u1100\u1161\u11A8", 3000),  // jamo that NFC composes
                                    Repeat("<|im_end|>", 2000),
                                    Repeat("<|begin_of_text|>", 2000),
                                    Repeat("a", 70000),
                                    Repeat("\n", 40000),
                                    Repeat("\xff", 1000)};
  for (uint32_t s = 0; s < 4; ++s) texts.push_back(testing::RandomText(2000 + s, 20000));
  for (const Tokenizer* t : {&Qwen(), &Llama()}) {
    const int64_t bound = t->max_bytes_per_token();
    ASSERT_GT(bound, 0);
    for (const std::string& text : texts) {
      const auto tokens = static_cast<int64_t>(t->Encode(text, false).size());
      EXPECT_GE(tokens * bound, static_cast<int64_t>(text.size()))
          << text.substr(0, 40) << "... (" << text.size() << " bytes) is " << tokens << " tokens";
    }
  }
  // The worst case is reached: 128 spaces are one token.
  EXPECT_EQ(Llama().Encode(Repeat(" ", 128 * 100), false).size(), 100u);
}

// A byte-level tokenizer.json with the 256 byte tokens and one merge.
json Tiny() {
  json vocab = json::object();
  for (int b = 0; b < 256; ++b) vocab[ByteLevelEncode(std::string(1, static_cast<char>(b)))] = b;
  vocab[ByteLevelEncode("ab")] = 256;
  return json{
      {"model", {{"type", "BPE"}, {"vocab", vocab}, {"merges", json::array({"a b"})}}},
      {"normalizer", nullptr},
      {"pre_tokenizer",
       {{"type", "Sequence"},
        {"pretokenizers",
         {{{"type", "Split"},
           {"pattern", {{"Regex", "\\s+"}}},
           {"behavior", "Isolated"},
           {"invert", false}},
          {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", false}}}}}},
      {"post_processor", nullptr},
      {"decoder", {{"type", "ByteLevel"}}},
      {"added_tokens", json::array()},
  };
}

int64_t Bound(const json& j) {
  auto t = Tokenizer::FromJson(j.dump(), "", "");
  EXPECT_TRUE(t.ok()) << t.status().ToString();
  return t.ok() ? (*t)->max_bytes_per_token() : -1;
}

TEST(MaxBytesPerToken, UnboundedWhenTextCanVanish) {
  json j = Tiny();
  EXPECT_EQ(Bound(j), 2);
  j["added_tokens"] = json::array({{{"id", 257}, {"content", "<long-added>"}, {"special", true}}});
  EXPECT_EQ(Bound(j), 12);
  j["normalizer"] = {{"type", "NFC"}};
  EXPECT_EQ(Bound(j), 12 * kMaxNormalizerShrink);

  // An added token that swallows whitespace covers any amount of it.
  json strip = Tiny();
  strip["added_tokens"] = json::array({{{"id", 257}, {"content", "<m>"}, {"lstrip", true}}});
  EXPECT_EQ(Bound(strip), 0);
  // A split that removes what it matches.
  json removed = Tiny();
  removed["pre_tokenizer"]["pretokenizers"][0]["behavior"] = "Removed";
  EXPECT_EQ(Bound(removed), 0);
  // A byte with no token (and no unk_token) is dropped.
  json missing = Tiny();
  missing["model"]["vocab"].erase(ByteLevelEncode("\x80"));
  EXPECT_EQ(Bound(missing), 0);
}

// Bytes malloc has handed out and not had back (heap and mmapped chunks).
size_t MallocInUse() {
  const struct mallinfo2 m = mallinfo2();
  return m.uordblks + m.hblkhd;
}

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define KVFORK_SANITIZER_ALLOCATOR 1
#endif

TEST(TokenizerScratch, LargeTextLeavesNoScratchBehind) {
#ifdef KVFORK_SANITIZER_ALLOCATOR
  GTEST_SKIP() << "the sanitizer's allocator does not report through mallinfo2";
#endif
  // 4 MB of text with long pre-tokens (a run of spaces is one piece, merged
  // symbol by symbol) and many short ones: tens of MB of scratch at the peak.
  const std::string big = Repeat(" ", 1 << 20) + Repeat(testing::RandomText(7, 1 << 16), 48);
  for (const Tokenizer* t : {&Qwen(), &Llama()}) {
    size_t before = 0, after = 0, tokens = 0;
    // A fresh thread: its thread_local buffers start empty.
    std::thread([&] {
      t->Encode("warm up the small buffers", false);
      before = MallocInUse();
      tokens = t->Encode(big, false).size();  // the result is freed here
      after = MallocInUse();
    }).join();
    EXPECT_GT(tokens, 100000u);
    // The piece cache is allocated at load; what stays is at most the kept
    // scratch (4 KiB per buffer) and malloc's bookkeeping.
    EXPECT_LT(after, before + (256u << 10))
        << "encoding " << big.size() << " bytes left " << (after - before) << " bytes allocated";
  }
}

}  // namespace
}  // namespace kvfork
