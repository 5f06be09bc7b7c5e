// Our Encode against goldens from @lenml/tokenizers (Hugging Face tokenizers'
// algorithm in JS), made by tools/tokenizer/make_goldens.mjs: a fixed corpus
// (prose, code, whitespace runs, CJK, Arabic, emoji/ZWJ, numbers of 1-20
// digits, contractions in every case, every added token inside text) and
// ~1 MB of seeded random text checked as per-chunk hashes.
#include <fstream>
#include <sstream>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "corpus_rng.h"
#include "test_env.h"
#include "tokenizer/tokenizer.h"

namespace kvfork {
namespace {

nlohmann::json LoadGoldens(const std::string& name) {
  const std::string path = testing::SourceDir() + "/tests/data/tokenizer/goldens_" + name + ".json";
  std::ifstream in(path);
  EXPECT_TRUE(in.good()) << path;
  return nlohmann::json::parse(in);
}

void CheckGoldens(const std::string& name, const std::string& model_dir) {
  auto tok = Tokenizer::Load(model_dir);
  ASSERT_TRUE(tok.ok()) << tok.status().ToString();
  const nlohmann::json goldens = LoadGoldens(name);
  const auto& cases = goldens["cases"];
  ASSERT_GT(cases.size(), 200u);
  int failures = 0;
  for (const auto& c : cases) {
    const std::string text = c["text"].get<std::string>();
    const std::vector<int32_t> expected = c["ids"].get<std::vector<int32_t>>();
    const std::vector<int32_t> got = (*tok)->Encode(text, false);
    if (got != expected && ++failures <= 20) {
      ADD_FAILURE() << name << " text: \"" << text << "\"\n got:      "
                    << ::testing::PrintToString(got)
                    << "\n expected: " << ::testing::PrintToString(expected);
    }
  }
  EXPECT_EQ(failures, 0) << "of " << cases.size() << " cases";

  const auto& random = goldens["random"];
  const uint32_t seed = random["seed"].get<uint32_t>();
  const size_t chunk_bytes = random["chunk_bytes"].get<size_t>();
  const auto& chunks = random["chunks"];
  ASSERT_EQ(chunks.size(), 64u);
  int chunk_failures = 0;
  for (size_t i = 0; i < chunks.size(); ++i) {
    const std::string text = testing::RandomText(seed + static_cast<uint32_t>(i), chunk_bytes);
    const std::vector<int32_t> ids = (*tok)->Encode(text, false);
    const bool ok = ids.size() == chunks[i]["num_ids"].get<size_t>() &&
                    testing::HashIds(ids) == chunks[i]["fnv1a"].get<uint32_t>();
    if (!ok) ++chunk_failures;
    EXPECT_TRUE(ok) << name << " random chunk " << i << ": " << ids.size() << " ids, expected "
                    << chunks[i]["num_ids"];
  }
  EXPECT_EQ(chunk_failures, 0);
}

TEST(Goldens, Qwen3) { CheckGoldens("qwen3", testing::QwenTokenizerDir()); }
TEST(Goldens, Llama3) { CheckGoldens("llama3", testing::LlamaTokenizerDir()); }

}  // namespace
}  // namespace kvfork
