// A model exported to GGUF (`kvfork export-gguf`'s ExportGguf) and its Hugging
// Face directory give the same tokenizer: the same ids on the goldens corpus
// (every case, with and without special tokens added, and seeded random
// text), the same decoded text, chat template, bos/eos tokens; the GGUF's
// end-of-generation ids hold the directory's (plus the end tokens llama.cpp
// also stops on, as a generation_config.json would list them). One known
// difference: an added token spelled <|...|> is a control (special) token in
// GGUF even when tokenizer.json did not mark it special (Qwen3's
// <|fim_prefix|>), as convert_hf_to_gguf.py writes it and llama.cpp treats
// it; encoding is the same, Decode(skip_special) drops it.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>
#include <unistd.h>

#include "corpus_rng.h"
#include "engine/model_tokenizer.h"
#include "model/gguf_export.h"
#include "model/random_model.h"
#include "test_env.h"

namespace kvfork {
namespace {

bool LooksSpecial(const std::string& t) {
  return t.size() >= 4 && t.rfind("<|", 0) == 0 && t.compare(t.size() - 2, 2, "|>") == 0;
}

void CheckSameTokenizer(Architecture arch, const std::string& tokenizer_dir,
                        const std::string& goldens, const std::vector<std::string>& extra_eos,
                        bool only_hf_adds_bos) {
  const std::string dir = ::testing::TempDir() + "/gguf_vs_hf_" + goldens + "_" + std::to_string(getpid());
  RandomModelOptions o;
  o.arch = arch;
  o.shape = "tiny";
  o.tokenizer_dir = tokenizer_dir;
  ASSERT_TRUE(WriteRandomModel(o, dir).ok());
  const std::string gguf = dir + ".gguf";
  Status exported = ExportGguf(dir, gguf, GgufExportOptions{});
  ASSERT_TRUE(exported.ok()) << exported.ToString();

  auto hf = LoadModelTokenizer(dir);
  ASSERT_TRUE(hf.ok()) << hf.status().ToString();
  auto gg = LoadModelTokenizer(gguf);
  ASSERT_TRUE(gg.ok()) << gg.status().ToString();
  const Tokenizer& a = **hf;
  const Tokenizer& b = **gg;

  std::ifstream in(testing::SourceDir() + "/tests/data/tokenizer/goldens_" + goldens + ".json");
  ASSERT_TRUE(in.good()) << goldens;
  const nlohmann::json g = nlohmann::json::parse(in);
  std::vector<std::string> texts;
  for (const auto& c : g["cases"]) texts.push_back(c["text"].get<std::string>());
  ASSERT_GT(texts.size(), 200u);
  const uint32_t seed = g["random"]["seed"].get<uint32_t>();
  for (uint32_t i = 0; i < 16; ++i) texts.push_back(testing::RandomText(seed + i, 16384));
  int failures = 0;
  for (const std::string& text : texts) {
    for (bool add_special : {false, true}) {
      std::vector<int32_t> want = a.Encode(text, add_special);
      if (add_special && only_hf_adds_bos) want.erase(want.begin());
      const std::vector<int32_t> got = b.Encode(text, add_special);
      if (got != want && ++failures <= 10)
        ADD_FAILURE() << goldens << " add_special=" << add_special << " text: \""
                      << text.substr(0, 200) << "\"\n got:  " << ::testing::PrintToString(got)
                      << "\n want: " << ::testing::PrintToString(want);
      if (!add_special) {
        EXPECT_EQ(b.Decode(got, false), a.Decode(want, false));
        std::vector<int32_t> kept;  // without the tokens only GGUF calls special
        for (int32_t id : want)
          if (a.IsSpecial(id) || !b.IsSpecial(id)) kept.push_back(id);
        EXPECT_EQ(b.Decode(got, true), a.Decode(kept, true));
      }
    }
  }
  EXPECT_EQ(failures, 0) << "of " << texts.size() * 2;

  EXPECT_FALSE(a.chat_template().empty());
  EXPECT_EQ(b.chat_template(), a.chat_template());
  EXPECT_EQ(b.bos_token(), a.bos_token());
  EXPECT_EQ(b.bos_token_id(), a.bos_token_id());
  EXPECT_EQ(b.eos_token(), a.eos_token());
  std::set<int32_t> want_eos(a.eos_token_ids().begin(), a.eos_token_ids().end());
  for (const std::string& t : extra_eos) want_eos.insert(*a.TokenId(t));
  const std::set<int32_t> got_eos(b.eos_token_ids().begin(), b.eos_token_ids().end());
  EXPECT_EQ(got_eos, want_eos);
  for (int32_t id = 0; id < a.vocab_size(); ++id) {
    const bool special = a.IsSpecial(id) || LooksSpecial(a.TokenBytes(id));
    if (b.IsSpecial(id) != special || a.TokenBytes(id) != b.TokenBytes(id)) {
      ADD_FAILURE() << goldens << " token " << id << " differs";
      break;
    }
  }
  std::filesystem::remove_all(dir);
  std::filesystem::remove(gguf);
}

TEST(GgufVsHf, Qwen3) {
  // This tokenizer_config.json names <|endoftext|> only; llama.cpp (and
  // Qwen3's generation_config.json) also end on <|im_end|>.
  CheckSameTokenizer(Architecture::kQwen3, testing::QwenTokenizerDir(), "qwen3", {"<|im_end|>"},
                     /*only_hf_adds_bos=*/false);
}

// This packaging of Llama 3's tokenizer has no TemplateProcessing and no
// add_bos_token: Tokenizer::Load prepends bos for the named bos_token, while
// export-gguf, following convert_hf_to_gguf.py's rule, writes
// add_bos_token = false, which the GGUF tokenizer obeys.
TEST(GgufVsHf, Llama3) {
  CheckSameTokenizer(Architecture::kLlama, testing::LlamaTokenizerDir(), "llama3", {"<|eot_id|>"},
                     /*only_hf_adds_bos=*/true);
}

}  // namespace
}  // namespace kvfork
