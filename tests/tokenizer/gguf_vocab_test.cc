// Every vocab GGUF under llama.cpp's models/ with test vectors: ours encodes
// them to exactly the expected ids where the tokenizer is supported, and
// refuses with an error naming the tokenizer or pre-tokenizer where it is
// not. The list below is what each file must do, so a missing file or a
// newly failing one is a failure, never a silent pass.
#include "tokenizer/gguf_vocab.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <functional>
#include <set>
#include <unistd.h>

#include "engine/model_tokenizer.h"
#include "llama_cpp_vectors.h"
#include "model/gguf_writer.h"
#include "test_env.h"
#include "tokenizer/byte_level.h"
#include "tokenizer/gguf_pre_tokenizer.h"

namespace kvfork {
namespace {

std::string ModelsDir() { return testing::LlamaCppSourceDir() + "/models"; }

// Vocab files with .inp/.out whose tokenizer we support.
// llama-spm and phi-3 are SentencePiece ("llama"), the others byte-level BPE.
const std::vector<std::string> kSupported = {
    "command-r", "deepseek-coder", "deepseek-llm", "falcon", "gpt-2",  "llama-bpe", "llama-spm",
    "mpt",       "phi-3",          "qwen2",        "qwen35", "refact", "starcoder",
};
// The others, and the text their error must contain. gemma-4 is BPE over
// SentencePiece-style pieces ("▁", <0xXX>) with its own pre-tokenizer, not
// SentencePiece's merge loop.
const std::vector<std::pair<std::string, std::string>> kUnsupported = {
    {"bert-bge", "tokenizer.ggml.model \"bert\" (WordPiece) is not supported"},
    {"gemma-4", "tokenizer.ggml.model \"gemma4\" is not supported"},
};

TEST(GgufVocab, EveryVectorFileIsListed) {
  ASSERT_TRUE(std::filesystem::is_directory(ModelsDir()))
      << ModelsDir() << " is missing: run scripts/install-deps.sh";
  std::set<std::string> listed(kSupported.begin(), kSupported.end());
  for (const auto& [name, error] : kUnsupported) listed.insert(name);
  std::set<std::string> found;
  for (const auto& entry : std::filesystem::directory_iterator(ModelsDir())) {
    const std::string file = entry.path().filename().string();
    const std::string prefix = "ggml-vocab-", suffix = ".gguf.out";
    if (file.rfind(prefix, 0) != 0 || file.size() <= prefix.size() + suffix.size() ||
        file.compare(file.size() - suffix.size(), suffix.size(), suffix) != 0)
      continue;
    found.insert(file.substr(prefix.size(), file.size() - prefix.size() - suffix.size()));
  }
  EXPECT_EQ(found, listed) << "a vocab file with test vectors is new or gone: list it here";
}

class GgufVectors : public ::testing::TestWithParam<std::string> {};

TEST_P(GgufVectors, IdsEqualLlamaCpp) {
  const std::string base = ModelsDir() + "/ggml-vocab-" + GetParam() + ".gguf";
  auto tok = LoadModelTokenizer(base);
  ASSERT_TRUE(tok.ok()) << tok.status().ToString();
  const testing::TokenizerVectors tests = testing::ReadLlamaCppVectors(base);
  ASSERT_GT(tests.size(), 20u) << base << ".inp/.out missing or unpaired";
  int failures = 0;
  for (const auto& [text, expected] : tests) {
    const std::vector<int32_t> got = (*tok)->Encode(text, /*add_special=*/false);
    if (got != expected && ++failures <= 10)
      ADD_FAILURE() << GetParam() << " input: \"" << text
                    << "\"\n got:      " << ::testing::PrintToString(got)
                    << "\n expected: " << ::testing::PrintToString(expected);
    // Decoding gives the text back (these tokenizers lose nothing;
    // SentencePiece's prefix space is dropped again, as llama.cpp does).
    EXPECT_EQ((*tok)->Decode(got, false), text) << GetParam();
  }
  EXPECT_EQ(failures, 0) << "of " << tests.size() << " cases";
}

INSTANTIATE_TEST_SUITE_P(Supported, GgufVectors, ::testing::ValuesIn(kSupported),
                         [](const auto& info) {
                           std::string n = info.param;
                           for (char& c : n)
                             if (!std::isalnum(static_cast<unsigned char>(c))) c = '_';
                           return n;
                         });

TEST(GgufVocab, UnsupportedTokenizersNameWhat) {
  for (const auto& [name, error] : kUnsupported) {
    const std::string path = ModelsDir() + "/ggml-vocab-" + name + ".gguf";
    auto tok = LoadModelTokenizer(path);
    ASSERT_FALSE(tok.ok()) << name;
    EXPECT_EQ(tok.status().code(), StatusCode::kUnimplemented) << tok.status().ToString();
    EXPECT_NE(tok.status().message().find(error), std::string::npos) << tok.status().ToString();
    EXPECT_NE(tok.status().message().find(path), std::string::npos) << tok.status().ToString();
  }
}

// bos/eos from the files' keys and llama.cpp's defaults: Llama 3 adds bos
// though its vocab file has no add_bos_token key; end of generation holds eos
// and the control tokens llama.cpp ends on.
TEST(GgufVocab, SpecialTokensOfRealVocabs) {
  auto llama = LoadModelTokenizer(ModelsDir() + "/ggml-vocab-llama-bpe.gguf");
  ASSERT_TRUE(llama.ok()) << llama.status().ToString();
  EXPECT_EQ((*llama)->Encode("Hello", true), (std::vector<int32_t>{128000, 9906}));
  EXPECT_EQ((*llama)->bos_token(), "<|begin_of_text|>");
  EXPECT_EQ((*llama)->eos_token(), "<|end_of_text|>");
  // Llama 3.0: no <|eom_id|> yet (128008 is a reserved token).
  EXPECT_EQ((*llama)->eos_token_ids(), (std::vector<int32_t>{128001, 128009}));
  EXPECT_EQ((*llama)->Encode("<|eot_id|>", false), (std::vector<int32_t>{128009}));
  EXPECT_TRUE((*llama)->IsSpecial(128009));

  auto qwen = LoadModelTokenizer(ModelsDir() + "/ggml-vocab-qwen2.gguf");
  ASSERT_TRUE(qwen.ok()) << qwen.status().ToString();
  EXPECT_EQ((*qwen)->Encode("Hello", true), (*qwen)->Encode("Hello", false));  // no bos
  EXPECT_FALSE((*qwen)->chat_template().empty());
  EXPECT_EQ((*qwen)->eos_token_ids(), (std::vector<int32_t>{151643, 151645}));
}

// A small byte-level vocabulary: every byte, one merge, a control token.
GgufVocab TinyVocab() {
  GgufVocab v;
  v.source = "tiny.gguf";
  v.model = "gpt2";
  v.pre = "gpt-2";
  for (int b = 0; b < 256; ++b) {
    v.tokens.push_back(ByteLevelEncode(std::string(1, static_cast<char>(b))));
    v.token_types.push_back(1);
  }
  v.tokens.push_back("ab");
  v.token_types.push_back(1);
  v.merges.push_back("a b");
  v.tokens.push_back("<|endoftext|>");
  v.token_types.push_back(3);
  v.tokens.push_back("[PAD258]");
  v.token_types.push_back(5);
  v.bos_id = v.eos_id = 257;
  return v;
}

TEST(GgufVocab, TinyVocabularyEncodesAndKnowsItsSpecialTokens) {
  auto tok = TokenizerFromGguf(TinyVocab());
  ASSERT_TRUE(tok.ok()) << tok.status().ToString();
  EXPECT_EQ((*tok)->Encode("ab", false), (std::vector<int32_t>{256}));
  EXPECT_EQ((*tok)->Encode("ba", false), (std::vector<int32_t>{'b', 'a'}));
  EXPECT_EQ((*tok)->Encode("ab<|endoftext|>", false), (std::vector<int32_t>{256, 257}));
  EXPECT_TRUE((*tok)->IsSpecial(257));
  EXPECT_EQ((*tok)->eos_token_ids(), (std::vector<int32_t>{257}));
  EXPECT_EQ((*tok)->eos_token(), "<|endoftext|>");
  // gpt-2 adds no bos unless the file says so.
  EXPECT_EQ((*tok)->Encode("ab", true), (std::vector<int32_t>{256}));
  GgufVocab with_bos = TinyVocab();
  with_bos.add_bos = true;
  with_bos.chat_template = "{{ bos_token }}";
  auto tok2 = TokenizerFromGguf(with_bos);
  ASSERT_TRUE(tok2.ok()) << tok2.status().ToString();
  EXPECT_EQ((*tok2)->Encode("ab", true), (std::vector<int32_t>{257, 256}));
  EXPECT_EQ((*tok2)->chat_template(), "{{ bos_token }}");
  EXPECT_EQ((*tok2)->bos_token_id(), 257);
  // The unused padding token is no token.
  EXPECT_FALSE((*tok)->TokenId("[PAD258]").has_value());
}

TEST(GgufVocab, BadMetadataNamesTheKey) {
  struct Case {
    std::string want;
    std::function<void(GgufVocab*)> edit;
  };
  const std::vector<Case> cases = {
      {"tokenizer.ggml.pre \"no-such-pre\" is not a supported pre-tokenizer",
       [](GgufVocab* v) { v->pre = "no-such-pre"; }},
      {"tokenizer.ggml.pre is missing", [](GgufVocab* v) { v->pre.clear(); }},
      {"tokenizer.ggml.token_type has 3 entries", [](GgufVocab* v) { v->token_types.resize(3); }},
      {"tokenizer.ggml.token_type[7] is 9", [](GgufVocab* v) { v->token_types[7] = 9; }},
      {"tokenizer.ggml.eos_token_id 9999 is outside", [](GgufVocab* v) { v->eos_id = 9999; }},
      {"tokenizer.ggml.bos_token_id 258 is an unused token", [](GgufVocab* v) { v->bos_id = 258; }},
      {"tokenizer.ggml.tokens[3] is not valid UTF-8", [](GgufVocab* v) { v->tokens[3] = "\xff"; }},
      {"tokenizer.json merges[1]: token \"qq\" is not in the vocabulary",
       [](GgufVocab* v) { v->merges.push_back("q q"); }},
      {"tokenizer.ggml.tokens is empty",
       [](GgufVocab* v) {
         v->tokens.clear();
         v->token_types.clear();
       }},
  };
  for (const Case& c : cases) {
    GgufVocab v = TinyVocab();
    c.edit(&v);
    auto tok = TokenizerFromGguf(v);
    ASSERT_FALSE(tok.ok()) << c.want;
    EXPECT_NE(tok.status().message().find(c.want), std::string::npos) << tok.status().ToString();
    EXPECT_NE(tok.status().message().find("tiny.gguf"), std::string::npos)
        << tok.status().ToString();
  }
}

TEST(GgufVocab, EveryListedPreTokenizerCompiles) {
  for (const std::string& name : SupportedGgufPreTokenizers()) {
    GgufVocab v = TinyVocab();
    v.pre = name;
    auto tok = TokenizerFromGguf(v);
    EXPECT_TRUE(tok.ok()) << name << ": " << tok.status().ToString();
  }
}

// Any part of a split model gives the tokenizer of part 1, where
// llama.cpp's gguf-split keeps the metadata.
TEST(GgufVocab, SplitFilesReadTheFirstPart) {
  const std::string dir = ::testing::TempDir() + "/gguf_split_" + std::to_string(getpid());
  std::filesystem::create_directories(dir);
  std::filesystem::copy_file(ModelsDir() + "/ggml-vocab-gpt-2.gguf", dir + "/m-00001-of-00002.gguf",
                             std::filesystem::copy_options::overwrite_existing);
  GgufWriter second;  // a later part: tensors only, no tokenizer keys
  second.Set("split.no", GgufValue::U32(1));
  ASSERT_TRUE(second.Write(dir + "/m-00002-of-00002.gguf").ok());
  auto tok = LoadModelTokenizer(dir + "/m-00002-of-00002.gguf");
  ASSERT_TRUE(tok.ok()) << tok.status().ToString();
  EXPECT_EQ((*tok)->Encode("Hello world", false), (std::vector<int32_t>{15496, 995}));
  std::filesystem::remove_all(dir);
}

TEST(GgufVocab, FileWithoutTokenizerNamesTheKey) {
  const std::string path = ::testing::TempDir() + "/no_tokenizer_" + std::to_string(getpid()) + ".gguf";
  GgufWriter w;
  w.Set("general.architecture", GgufValue::String("qwen3"));
  ASSERT_TRUE(w.Write(path).ok());
  auto tok = LoadModelTokenizer(path);
  ASSERT_FALSE(tok.ok());
  EXPECT_NE(tok.status().message().find(path + ": GGUF key tokenizer.ggml.model is missing"),
            std::string::npos)
      << tok.status().ToString();
  auto missing = LoadModelTokenizer(ModelsDir() + "/no-such-file.gguf");
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.status().message().find("no-such-file.gguf"), std::string::npos)
      << missing.status().ToString();
}

}  // namespace
}  // namespace kvfork
