// llama.cpp's tokenizer test vectors: models/ggml-vocab-NAME.gguf.inp holds
// texts separated by "\n__ggml_vocab_test__\n", .out one line of expected ids
// per text (tests/test-tokenizer-0.cpp's read_tests; encoded without BOS).
#pragma once

#include <cctype>
#include <cstdint>
#include <fstream>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

namespace kvfork::testing {

using TokenizerVectors = std::vector<std::pair<std::string, std::vector<int32_t>>>;

// Empty when the files are missing or their counts disagree.
inline TokenizerVectors ReadLlamaCppVectors(const std::string& base) {
  std::ifstream inp(base + ".inp", std::ios::binary);
  std::ifstream out(base + ".out");
  if (!inp || !out) return {};
  std::ostringstream ss;
  ss << inp.rdbuf();
  const std::string raw = ss.str();
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
  std::vector<std::string> lines;
  for (std::string line; std::getline(out, line);) lines.push_back(line);
  if (inputs.size() != lines.size()) return {};
  TokenizerVectors tests;
  for (size_t i = 0; i < inputs.size(); ++i) {
    std::vector<int32_t> ids;
    std::istringstream line(lines[i]);
    for (int32_t id; line >> id;) ids.push_back(id);
    tests.emplace_back(inputs[i], std::move(ids));
  }
  return tests;
}

}  // namespace kvfork::testing
