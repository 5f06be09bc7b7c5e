// Properties of the tokenizer that need no reference: round trips, the
// streaming detokenizer against Decode at every split point, added-token
// flags, post-processing and configs on small hand-made tokenizer.json files,
// and clear errors for bad files.
#include <thread>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>
#include <utf8proc.h>

#include "corpus_rng.h"
#include "test_env.h"
#include "tokenizer/byte_level.h"
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

std::string Nfc(const std::string& s) {
  utf8proc_uint8_t* out = utf8proc_NFC(reinterpret_cast<const utf8proc_uint8_t*>(s.c_str()));
  std::string r(reinterpret_cast<char*>(out));
  std::free(out);
  return r;
}

std::vector<std::string> Texts() {
  std::vector<std::string> texts = {
      "", "Hello world", "  leading and trailing  ", "\t\tcode();\n\n\n    x = 1;\n",
      "多くの人にとって、東京は日本の首都です。", "مرحبا بالعالم", "👨‍👩‍👧‍👦 🏳️‍🌈 👍🏽",
      "e\u0301 A\u030a", "12345678901234567890", "he'LL'Ve 's", "<|im_start|>x<|im_end|>",
      "<|begin_of_text|>y<|eot_id|>", "<think>\n</think>"};
  for (uint32_t s = 0; s < 8; ++s) texts.push_back(testing::RandomText(1000 + s, 4096));
  return texts;
}

TEST(TokenizerRoundTrip, DecodeEncodeIsIdentity) {
  for (const std::string& s : Texts()) {
    EXPECT_EQ(Llama().Decode(Llama().Encode(s, false), false), s);
    EXPECT_EQ(Qwen().Decode(Qwen().Encode(s, false), false), Nfc(s));
  }
}

TEST(TokenizerRoundTrip, InvalidUtf8IsEncodedByteByByte) {
  const std::string bad = "ok \xff\xfe then \xc3 half \xe2\x82 and \x80\x80 \xf0\x9f\x98 end\xed\xa0\x80";
  for (const Tokenizer* t : {&Llama(), &Qwen()}) {
    const std::vector<int32_t> ids = t->Encode(bad, false);
    std::string bytes;
    for (int32_t id : ids) bytes += t->TokenBytes(id);
    EXPECT_EQ(bytes, bad);  // nothing lost, nothing replaced
    EXPECT_EQ(t->Decode(ids, false), utf8::Lossy(bad));
    // Each invalid byte is its own single-byte token.
    for (int32_t id : ids) {
      const std::string b = t->TokenBytes(id);
      if (!utf8::IsValid(b)) {
        EXPECT_EQ(b.size(), 1u) << ::testing::PrintToString(b);
      }
    }
    EXPECT_EQ(t->Encode("ab\xff", false).back(), *t->TokenId(ByteLevelEncode("\xff")));
  }
}

TEST(TokenizerRoundTrip, LossyMatchesMaximalSubparts) {
  EXPECT_EQ(utf8::Lossy("a\xe2\x82" "b"), "a\xEF\xBF\xBD" "b");         // one U+FFFD for E2 82
  EXPECT_EQ(utf8::Lossy("\xf0\x80"), "\xEF\xBF\xBD\xEF\xBF\xBD");      // F0 80: two
  EXPECT_EQ(utf8::Lossy("\xed\xa0\x80"), "\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD");  // surrogate
  EXPECT_EQ(utf8::CompletePrefixLength("ab\xe2\x82"), 2u);
  EXPECT_EQ(utf8::CompletePrefixLength("ab\xe2\x82\xac"), 5u);
  EXPECT_EQ(utf8::CompletePrefixLength("ab\xff"), 3u);
}

// Streams ids one at a time; checks every piece is valid UTF-8 and that the
// pieces concatenate to Decode().
void CheckStream(const Tokenizer& t, const std::vector<int32_t>& ids, bool skip_special) {
  StreamDecoder dec(t, skip_special);
  std::string streamed;
  for (int32_t id : ids) {
    std::string piece = dec.Push(id);
    EXPECT_TRUE(utf8::IsValid(piece));
    streamed += piece;
  }
  streamed += dec.Flush();
  EXPECT_EQ(streamed, t.Decode(ids, skip_special));
}

TEST(StreamDecoder, EqualsDecodeAtEverySplitPoint) {
  for (const Tokenizer* t : {&Llama(), &Qwen()}) {
    for (const std::string& s : Texts()) {
      CheckStream(*t, t->Encode(s, false), false);
      CheckStream(*t, t->Encode(s, false), true);
      // One token per byte: a split after every byte of every character.
      std::vector<int32_t> bytes;
      for (char c : s) bytes.push_back(*t->TokenId(ByteLevelEncode(std::string(1, c))));
      CheckStream(*t, bytes, false);
    }
    // Arbitrary ids, valid UTF-8 or not.
    testing::Mulberry32 rng(7);
    for (int k = 0; k < 200; ++k) {
      std::vector<int32_t> ids;
      for (int i = 0; i < 16; ++i) ids.push_back(static_cast<int32_t>(rng.Next() % t->vocab_size()));
      CheckStream(*t, ids, k % 2 == 0);
    }
  }
}

TEST(StreamDecoder, HoldsPartialCharacter) {
  const Tokenizer& t = Llama();
  const std::string euro = "\xe2\x82\xac";
  StreamDecoder dec(t, false);
  EXPECT_EQ(dec.Push(*t.TokenId(ByteLevelEncode(euro.substr(0, 1)))), "");
  EXPECT_EQ(dec.Push(*t.TokenId(ByteLevelEncode(euro.substr(1, 1)))), "");
  EXPECT_EQ(dec.Push(*t.TokenId(ByteLevelEncode(euro.substr(2, 1)))), euro);
  EXPECT_EQ(dec.Push(*t.TokenId(ByteLevelEncode("\xe2"))), "");
  EXPECT_EQ(dec.Flush(), "\xEF\xBF\xBD");
}

TEST(TokenizerModels, SpecialTokensAndConfigs) {
  const Tokenizer& q = Qwen();
  EXPECT_EQ(q.vocab_size(), 151669);
  EXPECT_EQ(q.Encode("<|im_start|>", false), std::vector<int32_t>{151644});
  EXPECT_TRUE(q.IsSpecial(151644));
  EXPECT_FALSE(q.IsSpecial(*q.TokenId("<think>")));  // added, not special
  EXPECT_EQ(q.eos_token(), "<|im_end|>");
  EXPECT_EQ(q.bos_token(), "");
  EXPECT_FALSE(q.bos_token_id().has_value());
  EXPECT_EQ(q.Encode("hi", true), q.Encode("hi", false));  // Qwen adds nothing
  EXPECT_NE(q.chat_template().find("<|im_start|>"), std::string::npos);
  EXPECT_EQ(q.Decode(q.Encode("<|im_start|>a<|im_end|>", false), true), "a");

  const Tokenizer& l = Llama();
  EXPECT_EQ(l.vocab_size(), 128256);
  EXPECT_EQ(l.bos_token(), "<|begin_of_text|>");
  EXPECT_EQ(l.bos_token_id(), 128000);
  std::vector<int32_t> with_bos = l.Encode("Hello", true);
  ASSERT_EQ(with_bos.size(), 2u);
  EXPECT_EQ(with_bos[0], 128000);
  EXPECT_EQ(l.TokenId("Ġworld"), l.Encode(" world", false)[0]);
  EXPECT_EQ(l.TokenBytes(128000), "<|begin_of_text|>");
}

TEST(TokenizerThreads, ConcurrentEncodeMatchesSequential) {
  const std::vector<std::string> texts = Texts();
  std::vector<std::vector<int32_t>> expected;
  for (const auto& s : texts) expected.push_back(Qwen().Encode(s, false));
  std::vector<std::thread> threads;
  std::atomic<int> mismatches{0};
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&] {
      for (int rep = 0; rep < 3; ++rep)
        for (size_t i = 0; i < texts.size(); ++i)
          if (Qwen().Encode(texts[i], false) != expected[i]) ++mismatches;
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(mismatches.load(), 0);
}

// A small byte-level tokenizer.json: the 256 byte tokens, then merges.
json TinyTokenizer(const std::vector<std::pair<std::string, std::string>>& merges, bool list_form) {
  json vocab = json::object();
  int id = 0;
  for (int b = 0; b < 256; ++b) vocab[ByteLevelEncode(std::string(1, static_cast<char>(b)))] = id++;
  json merges_json = json::array();
  for (const auto& [a, b] : merges) {
    const std::string ea = ByteLevelEncode(a), eb = ByteLevelEncode(b);
    if (!vocab.contains(ea + eb)) vocab[ea + eb] = id++;
    if (list_form) {
      merges_json.push_back({ea, eb});
    } else {
      merges_json.push_back(ea + " " + eb);
    }
  }
  return json{
      {"model", {{"type", "BPE"}, {"vocab", vocab}, {"merges", merges_json}}},
      {"normalizer", nullptr},
      {"pre_tokenizer",
       {{"type", "Sequence"},
        {"pretokenizers",
         {{{"type", "Split"}, {"pattern", {{"Regex", " ?\\p{L}+|\\p{N}|\\s+|[^\\s\\p{L}\\p{N}]+"}}},
           {"behavior", "Isolated"}, {"invert", false}},
          {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", false}}}}}},
      {"post_processor", nullptr},
      {"decoder", {{"type", "ByteLevel"}}},
      {"added_tokens", json::array()},
  };
}

std::unique_ptr<Tokenizer> Make(const json& j, const std::string& config = "",
                                const std::string& generation = "") {
  auto t = Tokenizer::FromJson(j.dump(), config, generation);
  EXPECT_TRUE(t.ok()) << t.status().ToString();
  return t.ok() ? std::move(t).value() : nullptr;
}

TEST(TinyTokenizer, MergesByRankInBothForms) {
  const std::vector<std::pair<std::string, std::string>> merges = {
      {"l", "o"}, {"lo", "w"}, {"e", "r"}, {" ", "lo"}, {"low", "er"}};
  for (bool list_form : {false, true}) {
    auto t = Make(TinyTokenizer(merges, list_form));
    ASSERT_NE(t, nullptr);
    const auto id = [&](const std::string& s) { return *t->TokenId(ByteLevelEncode(s)); };
    EXPECT_EQ(t->Encode("lower", false), std::vector<int32_t>{id("lower")});
    // " lo" (rank 3) wins over "lo"+"w" only after "lo" exists: l o -> lo, then
    // "lo w" (rank 1) before " lo" (rank 3).
    EXPECT_EQ(t->Encode(" low", false), (std::vector<int32_t>{id(" "), id("low")}));
    EXPECT_EQ(t->Encode(" lo", false), std::vector<int32_t>{id(" lo")});
    EXPECT_EQ(t->Decode(t->Encode("lower lows", false), false), "lower lows");
  }
}

// A Split after ByteLevel runs on the GPT-2 alphabet spelling, as in Hugging
// Face (Falcon's Digits step): "½" is C2 BD, spelled "Â½", and '½' is numeric,
// so the piece breaks between the two bytes. On raw text the regex would keep
// the character whole (or, for [0-9] on "9", agree).
TEST(TinyTokenizer, StepsAfterByteLevelSeeTheByteAlphabet) {
  json j = TinyTokenizer({{"\xC2", "\xBD"}}, false);
  j["pre_tokenizer"] = {{"type", "Sequence"},
                        {"pretokenizers",
                         {{{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", true}},
                          {{"type", "Split"},
                           {"pattern", {{"Regex", "\\p{N}"}}},
                           {"behavior", "Isolated"},
                           {"invert", false}}}}};
  auto t = Make(j);
  ASSERT_NE(t, nullptr);
  // Bytes are ids 0..255 in order; the merge C2+BD is id 256 and never
  // applies, because the pieces are "\xC2" and "\xBD".
  EXPECT_EQ(t->Encode("\xC2\xBD", false), (std::vector<int32_t>{0xC2, 0xBD}));
  EXPECT_EQ(t->Encode("a9\xC2\xBD", false), (std::vector<int32_t>{'a', '9', 0xC2, 0xBD}));
  // Without the digit split the merge applies.
  j["pre_tokenizer"] = {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", true}};
  auto plain = Make(j);
  ASSERT_NE(plain, nullptr);
  EXPECT_EQ(plain->Encode("\xC2\xBD", false), (std::vector<int32_t>{256}));
}

TEST(TinyTokenizer, AddedTokenFlags) {
  json j = TinyTokenizer({}, true);
  j["added_tokens"] = json::array({
      {{"id", 300}, {"content", "<s>"}, {"special", true}, {"lstrip", false}, {"rstrip", false},
       {"normalized", false}, {"single_word", false}},
      {{"id", 301}, {"content", "<l>"}, {"special", true}, {"lstrip", true}, {"rstrip", false},
       {"normalized", false}, {"single_word", false}},
      {{"id", 302}, {"content", "<r>"}, {"special", true}, {"lstrip", false}, {"rstrip", true},
       {"normalized", false}, {"single_word", false}},
      {{"id", 303}, {"content", "cat"}, {"special", false}, {"lstrip", false}, {"rstrip", false},
       {"normalized", false}, {"single_word", true}},
      {{"id", 304}, {"content", "<s><s>"}, {"special", true}, {"lstrip", false}, {"rstrip", false},
       {"normalized", false}, {"single_word", false}},
  });
  auto t = Make(j);
  ASSERT_NE(t, nullptr);
  const int32_t sp = *t->TokenId(ByteLevelEncode(" "));
  const int32_t a = *t->TokenId("a");
  EXPECT_EQ(t->vocab_size(), 305);
  EXPECT_EQ(t->Encode("a <s> a", false), (std::vector<int32_t>{a, sp, 300, sp, a}));
  EXPECT_EQ(t->Encode("a  <l>  a", false), (std::vector<int32_t>{a, 301, sp, sp, a}));
  EXPECT_EQ(t->Encode("a  <r>  a", false), (std::vector<int32_t>{a, sp, sp, 302, a}));
  EXPECT_EQ(t->Encode("<s><s><s>", false), (std::vector<int32_t>{304, 300}));  // longest first
  EXPECT_EQ(t->Encode("a cat", false), (std::vector<int32_t>{a, sp, 303}));
  const std::vector<int32_t> cats = t->Encode("cats", false);
  EXPECT_EQ(std::count(cats.begin(), cats.end(), 303), 0);  // inside a word: not the token
  EXPECT_EQ(t->Decode(t->Encode("x<s>y", false), true), "xy");
  EXPECT_EQ(t->Decode(t->Encode("x<s>y", false), false), "x<s>y");
}

TEST(TinyTokenizer, PostProcessorAndConfigs) {
  json j = TinyTokenizer({}, false);
  j["added_tokens"] = json::array(
      {{{"id", 256}, {"content", "<bos>"}, {"special", true}},
       {{"id", 257}, {"content", "<eos>"}, {"special", true}},
       {{"id", 258}, {"content", "<eot>"}, {"special", true}}});
  j["post_processor"] = {
      {"type", "Sequence"},
      {"processors",
       {{{"type", "ByteLevel"}},
        {{"type", "TemplateProcessing"},
         {"single", {{{"SpecialToken", {{"id", "<bos>"}, {"type_id", 0}}}},
                     {{"Sequence", {{"id", "A"}, {"type_id", 0}}}}}},
         {"special_tokens", {{"<bos>", {{"id", "<bos>"}, {"ids", {256}}, {"tokens", {"<bos>"}}}}}}}}}};
  const std::string config = R"({"bos_token": {"content": "<bos>", "lstrip": false},
      "eos_token": "<eos>", "chat_template": [{"name": "tool_use", "template": "T"},
      {"name": "default", "template": "D"}]})";
  auto t = Make(j, config, R"({"eos_token_id": [258, 257]})");
  ASSERT_NE(t, nullptr);
  EXPECT_EQ(t->Encode("a", true), (std::vector<int32_t>{256, 'a'}));
  EXPECT_EQ(t->Encode("a", false), (std::vector<int32_t>{'a'}));
  EXPECT_EQ(t->bos_token(), "<bos>");
  EXPECT_EQ(t->bos_token_id(), 256);
  EXPECT_EQ(t->eos_token_ids(), (std::vector<int32_t>{258, 257}));
  EXPECT_EQ(t->chat_template(), "D");

  // No template in the post-processor: bos comes from the config, unless off.
  j["post_processor"] = nullptr;
  t = Make(j, R"({"bos_token": "<bos>", "add_bos_token": false, "eos_token": "<eos>"})",
           R"({"eos_token_id": 258})");
  ASSERT_NE(t, nullptr);
  EXPECT_EQ(t->Encode("a", true), (std::vector<int32_t>{'a'}));
  EXPECT_EQ(t->eos_token_ids(), (std::vector<int32_t>{258, 257}));
  t = Make(j, R"({"bos_token": "<bos>", "add_bos_token": true})");
  ASSERT_NE(t, nullptr);
  EXPECT_EQ(t->Encode("a", true), (std::vector<int32_t>{256, 'a'}));
}

// A token whose bytes its merges cannot rebuild: BPE must split it unless
// ignore_merges keeps whole tokens whole, on every call (the answer for a
// whole-token piece is remembered after the first).
TEST(TinyTokenizer, WholeTokenPiecesFollowTheMerges) {
  json j = TinyTokenizer({{"a", "b"}}, false);
  j["model"]["vocab"]["xy"] = 300;  // in the vocabulary, but no merge makes it
  for (bool ignore_merges : {false, true}) {
    j["model"]["ignore_merges"] = ignore_merges;
    auto t = Make(j);
    ASSERT_NE(t, nullptr);
    const std::vector<int32_t> expected =
        ignore_merges ? std::vector<int32_t>{300} : std::vector<int32_t>{'x', 'y'};
    for (int rep = 0; rep < 3; ++rep) {
      EXPECT_EQ(t->Encode("xy", false), expected) << ignore_merges;
      EXPECT_EQ(t->Encode("ab", false), std::vector<int32_t>{*t->TokenId("ab")});
    }
  }
}

// Every prefix of a valid file is a clear error (the vocabulary and merges
// are read by our own JSON reader), never a crash.
TEST(TokenizerErrors, TruncatedFilesAreErrors) {
  const std::string text = TinyTokenizer({{"a", "b"}, {"ab", "c"}}, true).dump(1);
  for (size_t n = 0; n < text.size(); n += 7) {
    auto t = Tokenizer::FromJson(text.substr(0, n), "", "");
    ASSERT_FALSE(t.ok()) << n;
    EXPECT_NE(t.status().message().find("tokenizer.json"), std::string::npos) << t.status().ToString();
  }
}

void ExpectError(const json& j, const std::string& needle) {
  auto t = Tokenizer::FromJson(j.dump(), "", "");
  ASSERT_FALSE(t.ok()) << "expected an error mentioning " << needle;
  EXPECT_NE(t.status().message().find(needle), std::string::npos) << t.status().ToString();
}

TEST(TokenizerErrors, BadFilesGiveClearErrors) {
  json j = TinyTokenizer({{"a", "b"}}, false);
  json missing_model = j;
  missing_model.erase("model");
  ExpectError(missing_model, "missing \"model\"");

  json bad_pre = j;
  bad_pre["pre_tokenizer"] = {{"type", "Frobnicate"}};
  ExpectError(bad_pre, "pre_tokenizer type \"Frobnicate\"");

  json bad_merge = j;
  bad_merge["model"]["merges"].push_back("zz qq");
  ExpectError(bad_merge, "merges[1]: token \"zz\" is not in the vocabulary");

  json bad_regex = j;
  bad_regex["pre_tokenizer"]["pretokenizers"][0]["pattern"]["Regex"] = "(\\p{L}+";
  ExpectError(bad_regex, "invalid regex '(\\p{L}+'");

  json bad_norm = j;
  bad_norm["normalizer"] = {{"type", "Precompiled"}};
  ExpectError(bad_norm, "normalizer type \"Precompiled\"");

  json bad_model = j;
  bad_model["model"]["type"] = "Unigram";
  ExpectError(bad_model, "model type \"Unigram\"");

  json bad_vocab = j;
  bad_vocab["model"]["vocab"]["x"] = "seven";
  ExpectError(bad_vocab, "id of \"x\" is not an integer");

  // Merges are resolved in batches: errors still name the first bad merge.
  json late_bad = TinyTokenizer({}, true);
  late_bad["model"]["vocab"]["ab"] = 256;
  for (int k = 0; k < 100; ++k) late_bad["model"]["merges"].push_back({"a", "b"});
  late_bad["model"]["merges"].push_back({"a", "zz"});
  late_bad["model"]["merges"].push_back(7);
  ExpectError(late_bad, "merges[100]: token \"zz\" is not in the vocabulary");
  late_bad["model"]["merges"][100] = {"a", "b"};
  ExpectError(late_bad, "merges[101]: expected");

  json short_merge = j;
  short_merge["model"]["merges"] = json::array({json::array({"a"})});
  ExpectError(short_merge, "merges[0]: expected \"a b\" or [\"a\", \"b\"]");

  json number_merge = j;
  number_merge["model"]["merges"] = json::array({7});
  ExpectError(number_merge, "merges[0]: expected");

  json no_space = j;
  no_space["model"]["merges"] = json::array({"ab"});
  ExpectError(no_space, "\"ab\" is not two tokens separated by a space");

  json model_number = j;
  model_number["model"] = 5;
  ExpectError(model_number, "missing \"model\" object");

  json merges_object = j;
  merges_object["model"]["merges"] = json::object();
  ExpectError(merges_object, "missing \"merges\" array");

  json float_id = j;
  float_id["model"]["vocab"]["y"] = 1.5;
  ExpectError(float_id, "id of \"y\" is not an integer");

  json negative_id = j;
  negative_id["model"]["vocab"]["y"] = -3;
  ExpectError(negative_id, "id -3 out of range");

  // Ids size tables: a huge one is refused before anything is allocated
  // for it (2^31 - 1 used to take 16 GB first).
  json huge_id = j;
  huge_id["model"]["vocab"]["y"] = 2147483647;
  ExpectError(huge_id, "id 2147483647 of \"y\" is above the largest supported token id 1048574");
  json huge_added = j;
  huge_added["added_tokens"] = json::array(
      {{{"id", 2147483647}, {"content", "<big>"}, {"special", true}}});
  ExpectError(huge_added, "added_tokens: id 2147483647 is above the largest supported token id");
  huge_added["added_tokens"][0]["id"] = 4294967296 + 7;  // was read as int32: 7
  ExpectError(huge_added, "added_tokens: id 4294967303 is above");
  for (const char* generation : {R"({"eos_token_id": 2147483647})", R"({"eos_token_id": [1, -1]})",
                                 R"({"bos_token_id": 100000})"}) {
    auto bad_generation = Tokenizer::FromJson(j.dump(), "", generation);
    ASSERT_FALSE(bad_generation.ok()) << generation;
    EXPECT_NE(bad_generation.status().message().find("is outside the vocabulary [0, 257)"),
              std::string::npos)
        << bad_generation.status().ToString();
  }
  EXPECT_TRUE(Tokenizer::FromJson(j.dump(), "", R"({"eos_token_id": 256})").ok());

  json not_alphabet = j;
  not_alphabet["model"]["vocab"]["a b"] = 400;  // a raw space is not in the byte alphabet
  ExpectError(not_alphabet, "token \"a b\" is not in the byte-level alphabet");

  auto not_json = Tokenizer::FromJson("{not json", "", "");
  ASSERT_FALSE(not_json.ok());
  EXPECT_NE(not_json.status().message().find("not a JSON object"), std::string::npos);

  auto bad_config = Tokenizer::FromJson(j.dump(), R"({"eos_token": "<nope>"})", "");
  ASSERT_FALSE(bad_config.ok());
  EXPECT_NE(bad_config.status().message().find("eos_token \"<nope>\""), std::string::npos);

  auto no_dir = Tokenizer::Load("/nonexistent/model");
  ASSERT_FALSE(no_dir.ok());
  EXPECT_NE(no_dir.status().message().find("/nonexistent/model/tokenizer.json"), std::string::npos);
}

}  // namespace
}  // namespace kvfork
