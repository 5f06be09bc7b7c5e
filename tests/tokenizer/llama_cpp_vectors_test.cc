// llama.cpp's tokenizer test vectors (models/ggml-vocab-*.gguf.inp/.out, split
// as tests/test-tokenizer-0.cpp does, no BOS: add_special = false) run through
// our Llama 3 and Qwen3 tokenizer.json. Every case must match exactly.
#include "llama_cpp_vectors.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "test_env.h"
#include "tokenizer/tokenizer.h"

namespace kvfork {
namespace {

void RunVectors(const std::string& model_dir, const std::string& vocab) {
  auto tok = Tokenizer::Load(model_dir);
  ASSERT_TRUE(tok.ok()) << tok.status().ToString();
  const auto tests =
      testing::ReadLlamaCppVectors(testing::LlamaCppSourceDir() + "/models/" + vocab);
  ASSERT_GT(tests.size(), 20u) << vocab;
  int failures = 0;
  for (const auto& [text, expected] : tests) {
    const std::vector<int32_t> got = (*tok)->Encode(text, /*add_special=*/false);
    if (got != expected) ++failures;
    EXPECT_EQ(got, expected) << vocab << " input: \"" << text << "\"";
  }
  EXPECT_EQ(failures, 0) << "of " << tests.size() << " cases";
}

TEST(LlamaCppVectors, Llama3) {
  RunVectors(testing::LlamaTokenizerDir(), "ggml-vocab-llama-bpe.gguf");
}

TEST(LlamaCppVectors, Qwen3) { RunVectors(testing::QwenTokenizerDir(), "ggml-vocab-qwen2.gguf"); }

}  // namespace
}  // namespace kvfork
