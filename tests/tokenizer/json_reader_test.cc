// JsonReader, the fast path that loads tokenizer.json's vocabulary and
// merges, against nlohmann (the parser it replaces there): the same strings,
// the same numbers, the same documents rejected, and on the real files the
// same vocabulary entry by entry.
#include "tokenizer/json_reader.h"

#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "test_env.h"
#include "tokenizer/byte_level.h"
#include "tokenizer/tokenizer.h"

namespace kvfork {
namespace {

std::string ReadString(const std::string& json) {
  JsonReader r(json, "test");
  std::string out;
  Status s = r.ReadString(&out);
  EXPECT_TRUE(s.ok()) << json << ": " << s.ToString();
  return out;
}

Status ReadStringStatus(const std::string& json) {
  JsonReader r(json, "test");
  std::string out;
  return r.ReadString(&out);
}

TEST(JsonReader, StringsDecodeLikeNlohmann) {
  for (const std::string json :
       {R"("plain")", R"("")", R"("q\"b\\s\/")", R"("\b\f\n\r\t")", R"("\u00e9\u4e2d\u0000x")",
        R"("\ud83d\ude00 pair")", R"("Ġhello")", "\"raw \xc3\xa9 \xe4\xb8\xad \xf0\x9f\x98\x80\"",
        R"(  "leading space")"}) {
    EXPECT_EQ(ReadString(json), nlohmann::json::parse(json).get<std::string>()) << json;
  }
}

TEST(JsonReader, BadStringsAreErrorsNamingTheOffset) {
  for (const std::string json :
       {R"("unterminated)", R"("bad \x escape")", R"("\u12")", R"("\u12g4")",
        R"("lone \udc00 low")", R"("lone \ud800 high")", R"("\ud800\u0041")", "\"raw\ncontrol\"",
        "\"bad \xff byte\"", "\"overlong \xc0\xaf\"", "\"surrogate \xed\xa0\x80\"", "no quote"}) {
    const Status s = ReadStringStatus(json);
    EXPECT_FALSE(s.ok()) << json;
    EXPECT_NE(s.message().find("test: "), std::string::npos) << s.ToString();
    EXPECT_NE(s.message().find(" at byte "), std::string::npos) << s.ToString();
    EXPECT_TRUE(nlohmann::json::parse(json, nullptr, false).is_discarded()) << json;
  }
}

TEST(JsonReader, IntegersAndOtherValues) {
  struct Case {
    std::string json;
    bool is_integer;
    int64_t value;
  };
  for (const Case& c : std::vector<Case>{{"0", true, 0},
                                         {"42", true, 42},
                                         {" -7", true, -7},
                                         {"2147483648", true, 2147483648},
                                         {"-9223372036854775808", true, INT64_MIN},
                                         {"99999999999999999999", true, INT64_MAX},
                                         {"1.0", false, 0},
                                         {"1e3", false, 0},
                                         {"-2.5E-3", false, 0},
                                         {"\"7\"", false, 0},
                                         {"[1, {\"a\": null}]", false, 0},
                                         {"true", false, 0}}) {
    JsonReader r(c.json, "test");
    int64_t value = 0;
    bool is_integer = false;
    ASSERT_TRUE(r.ReadInteger(&value, &is_integer).ok()) << c.json;
    EXPECT_EQ(is_integer, c.is_integer) << c.json;
    if (c.is_integer) {
      EXPECT_EQ(value, c.value) << c.json;
    }
    EXPECT_TRUE(r.ExpectEnd().ok()) << c.json;  // the whole value was consumed
  }
  for (const std::string bad : {"-", "01x", "1.", "1e", "+1", "tru", "nul"}) {
    JsonReader r(bad, "test");
    int64_t value = 0;
    bool is_integer = false;
    Status s = r.ReadInteger(&value, &is_integer);
    if (s.ok()) s = r.ExpectEnd();
    EXPECT_FALSE(s.ok()) << bad;
  }
}

TEST(JsonReader, SplitObjectKeepsRawMembersInOrder) {
  const std::string json =
      R"( {"b": [1, 2, {"x": "y"}], "a" : "s\"q", "n": null, "b": -1.5e3, "o": {}} )";
  auto members = SplitObject(json, "doc");
  ASSERT_TRUE(members.ok()) << members.status().ToString();
  ASSERT_EQ(members->size(), 5u);
  EXPECT_EQ((*members)[0].first, "b");
  EXPECT_EQ((*members)[0].second, R"([1, 2, {"x": "y"}])");
  EXPECT_EQ((*members)[1].first, "a");
  EXPECT_EQ((*members)[1].second, R"("s\"q")");
  EXPECT_EQ((*members)[2].second, "null");
  EXPECT_EQ((*members)[3].first, "b");  // a repeated key appears again
  EXPECT_EQ((*members)[3].second, "-1.5e3");
  EXPECT_EQ((*members)[4].second, "{}");
}

TEST(JsonReader, SplitObjectRejectsWhatNlohmannRejects) {
  std::vector<std::string> bad = {"",
                                  "[]",
                                  "{",
                                  "{\"a\"}",
                                  "{\"a\": }",
                                  "{\"a\": 1,}",
                                  "{\"a\": [1, 2,]}",
                                  "{\"a\": 1} x",
                                  "{\"a\": 1 \"b\": 2}",
                                  "{a: 1}",
                                  "{\"a\": tru}",
                                  "{\"a\": \"\\q\"}",
                                  "{\"a\": 01}"};
  bad.push_back(std::string(600, '[') + std::string(600, ']'));  // too deep: an error, no crash
  for (const std::string& json : bad) {
    auto members = SplitObject(json, "doc");
    EXPECT_FALSE(members.ok()) << json;
    if (json.size() < 100) {
      EXPECT_TRUE(nlohmann::json::parse(json, nullptr, false).is_discarded() ||
                  !nlohmann::json::parse(json).is_object())
          << json;
    }
  }
}

std::string ReadFileText(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// The loaded vocabulary equals nlohmann's reading of the file, entry by entry,
// and the other members are what nlohmann finds.
void CheckAgainstNlohmann(const std::string& dir) {
  const std::string text = ReadFileText(dir + "/tokenizer.json");
  ASSERT_FALSE(text.empty()) << dir;
  const nlohmann::json doc = nlohmann::json::parse(text);
  auto members = SplitObject(text, "tokenizer.json");
  ASSERT_TRUE(members.ok()) << members.status().ToString();
  ASSERT_EQ(members->size(), doc.size());
  for (const auto& [key, raw] : *members) EXPECT_EQ(nlohmann::json::parse(raw), doc[key]) << key;

  auto tok = Tokenizer::Load(dir);
  ASSERT_TRUE(tok.ok()) << tok.status().ToString();
  int mismatches = 0;
  for (const auto& [token, id] : doc["model"]["vocab"].items()) {
    const std::optional<std::string> raw = ByteLevelDecode(token);
    ASSERT_TRUE(raw.has_value()) << token;
    if ((*tok)->TokenId(token) != id.get<int32_t>() ||
        (*tok)->TokenBytes(id.get<int32_t>()) != *raw)
      ++mismatches;
  }
  EXPECT_EQ(mismatches, 0);
}

TEST(JsonReader, RealVocabulariesMatchNlohmann) {
  CheckAgainstNlohmann(testing::QwenTokenizerDir());
  CheckAgainstNlohmann(testing::LlamaTokenizerDir());
}

}  // namespace
}  // namespace kvfork
