// llama.cpp's tokenizer test vectors (models/ggml-vocab-*.gguf.inp/.out, split
// as tests/test-tokenizer-0.cpp does, no BOS: add_special = false) run through
// our Llama 3 and Qwen3 tokenizer.json. Every case must match exactly.
#include <fstream>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include <gtest/gtest.h>

#include "test_env.h"
#include "tokenizer/tokenizer.h"

namespace kvfork {
namespace {

std::string Slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::string Strip(const std::string& s) {
  size_t b = 0, e = s.size();
  while (b < e && std::isspace(static_cast<unsigned char>(s[b]))) ++b;
  while (e > b && std::isspace(static_cast<unsigned char>(s[e - 1]))) --e;
  return s.substr(b, e - b);
}

// test-tokenizer-0.cpp's read_tests.
std::vector<std::pair<std::string, std::vector<int32_t>>> ReadVectors(const std::string& base) {
  const std::string raw = Slurp(base + ".inp");
  std::vector<std::string> outs;
  std::ifstream out(base + ".out");
  for (std::string line; std::getline(out, line);) outs.push_back(line);
  const std::string sep = "\n__ggml_vocab_test__\n";
  std::vector<std::string> inputs;
  for (size_t pos = 0; pos < raw.size();) {
    const size_t next = raw.find(sep, pos);
    if (next == std::string::npos) {
      inputs.push_back(raw.substr(pos));
      break;
    }
    inputs.push_back(raw.substr(pos, next - pos));
    pos = next + sep.size();
  }
  std::vector<std::pair<std::string, std::vector<int32_t>>> tests;
  EXPECT_EQ(inputs.size(), outs.size()) << base;
  for (size_t i = 0; i < inputs.size() && i < outs.size(); ++i) {
    std::vector<int32_t> ids;
    std::istringstream ss(Strip(outs[i]));
    for (int32_t id; ss >> id;) ids.push_back(id);
    tests.emplace_back(inputs[i], std::move(ids));
  }
  return tests;
}

void RunVectors(const std::string& model_dir, const std::string& vocab) {
  auto tok = Tokenizer::Load(model_dir);
  ASSERT_TRUE(tok.ok()) << tok.status().ToString();
  const auto tests = ReadVectors(testing::LlamaCppSourceDir() + "/models/" + vocab);
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
