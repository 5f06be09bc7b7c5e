// Replays, through each fuzz target, every input checked in under
// tests/data/fuzz/<target>/ (inputs that once crashed it, kept after the fix)
// and tests/fuzz/seeds/<target>/ (hand-written seeds), so a fixed crash stays
// fixed in every build, sanitized or not, without libFuzzer.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>

#include "engine/model_tokenizer.h"
#include "fuzz/fuzz_targets.h"
#include "model/gguf_reader.h"
#include "model/model.h"
#include "server/openai_schema.h"
#include "test_env.h"

namespace kvfork::fuzz {
namespace {

namespace fs = std::filesystem;

// Runs every file of the target's directories; returns how many.
int Replay(const std::string& target, const std::function<void(std::string_view)>& fn) {
  std::vector<fs::path> files;
  for (const std::string& dir : {testing::SourceDir() + "/tests/data/fuzz/" + target,
                                 testing::SourceDir() + "/tests/fuzz/seeds/" + target}) {
    if (!fs::is_directory(dir)) continue;
    for (const fs::directory_entry& e : fs::directory_iterator(dir))
      if (e.is_regular_file()) files.push_back(e.path());
  }
  std::sort(files.begin(), files.end());
  for (const fs::path& f : files) {
    SCOPED_TRACE(f.string());
    std::ifstream in(f, std::ios::binary);
    const std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    fn(bytes);  // aborts on a failed property or a sanitizer report
  }
  return static_cast<int>(files.size());
}

TEST(FuzzRegression, Safetensors) { EXPECT_GT(Replay("safetensors", FuzzSafetensors), 0); }
TEST(FuzzRegression, ModelConfig) { EXPECT_GT(Replay("model_config", FuzzModelConfig), 0); }
TEST(FuzzRegression, TokenizerLoad) { EXPECT_GT(Replay("tokenizer_load", FuzzTokenizerLoad), 0); }
TEST(FuzzRegression, EncodeDecode) { EXPECT_GT(Replay("encode_decode", FuzzEncodeDecode), 0); }
TEST(FuzzRegression, ChatTemplate) { EXPECT_GT(Replay("chat_template", FuzzChatTemplate), 0); }
TEST(FuzzRegression, RequestBody) { EXPECT_GT(Replay("request_body", FuzzRequestBody), 0); }
TEST(FuzzRegression, Gguf) { EXPECT_GT(Replay("gguf", FuzzGguf), 0); }
TEST(FuzzRegression, HttpRequest) { EXPECT_GT(Replay("http_request", FuzzHttpRequest), 0); }
TEST(FuzzRegression, Sampling) { EXPECT_GT(Replay("sampling", FuzzSampling), 0); }

// The crashes found, each also checked for the error it must now give.
std::string FuzzData(const std::string& file) {
  return testing::SourceDir() + "/tests/data/fuzz/" + file;
}

// The seeds model_llama/qwen2/qwen3 are whole models (make-model --shape tiny
// --hidden-size 8 --intermediate-size 16 --layers 1 --heads 2 --kv-heads 1
// --head-dim 4 --vocab-size 16 --dtype bf16, exported by export-gguf), so the
// fuzzer starts from inputs that reach the end of the model loader.
TEST(FuzzRegression, GgufModelSeedsLoad) {
  for (const char* arch : {"llama", "qwen2", "qwen3"}) {
    ModelLoadOptions lo;
    lo.show_progress = false;
    const std::string seed = testing::SourceDir() + "/tests/fuzz/seeds/gguf/model_" + arch;
    const std::string path = WriteScratchFile(std::string(arch) + ".gguf", [&] {
      std::ifstream in(seed, std::ios::binary);
      return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    }());
    StatusOr<std::unique_ptr<Model>> m = Model::Load(path, lo);
    EXPECT_TRUE(m.ok()) << arch << ": " << m.status().ToString();
  }
}

// The seed spm_vocab (make_seeds.py spm_gguf_bytes) is a SentencePiece
// vocabulary that loads, so the fuzzer starts inside that tokenizer.
TEST(FuzzRegression, GgufSpmVocabSeedLoadsItsTokenizer) {
  const std::string seed = testing::SourceDir() + "/tests/fuzz/seeds/gguf/spm_vocab";
  const std::string path = WriteScratchFile("spm_vocab.gguf", [&] {
    std::ifstream in(seed, std::ios::binary);
    return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  }());
  StatusOr<std::unique_ptr<Tokenizer>> t = LoadModelTokenizer(path);
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  // ▁a 262, <|end|> 264 (rstrip: general.name is Phi3).
  EXPECT_EQ((*t)->Encode("a<|end|>\n a", true), (std::vector<int32_t>{1, 262, 264, 262}));
}

TEST(FuzzRegression, GgufTensorLargerThanFileIsAnError) {
  // Was: ReadTensor allocated shape * dtype bytes (4 TiB here) before reading.
  StatusOr<GgufReader> r = GgufReader::Open(FuzzData("gguf/tensor_shape_larger_than_file"));
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  StatusOr<std::vector<uint8_t>> t = r->ReadTensor("token_embd.weight");
  ASSERT_FALSE(t.ok());
  EXPECT_NE(t.status().message().find("is larger than the file"), std::string::npos)
      << t.status().ToString();
}

TEST(FuzzRegression, GgufArrayCountThatWrapsIsAnError) {
  // Was: 2^62 int32 elements * 4 bytes wrapped to a skip of 0 and the parser
  // went on reading the array's bytes as the next key.
  StatusOr<GgufReader> r = GgufReader::Open(FuzzData("gguf/array_count_wraps_around"));
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("tokenizer.ggml.token_type"), std::string::npos)
      << r.status().ToString();
}

TEST(FuzzRegression, GgufEmptyScoresArrayLoadsAsNoScores) {
  // Was: an empty tokenizer.ggml.scores (and token_type) array was copied with
  // memcpy into a vector whose data() is null: undefined behaviour (UBSan).
  // Empty now reads as absent: every score 0, as llama.cpp does.
  const std::string path = WriteScratchFile("empty_scores.gguf", [&] {
    std::ifstream in(FuzzData("gguf/empty_scores_and_token_types"), std::ios::binary);
    return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  }());
  StatusOr<std::unique_ptr<Tokenizer>> t = LoadModelTokenizer(path);
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  EXPECT_EQ((*t)->vocab_size(), 4);
  for (int32_t id : (*t)->Encode("a", false)) EXPECT_TRUE(id >= 0 && id < 4) << id;
}

TEST(FuzzRegression, DeeplyNestedBodyIsA400) {
  // Was: copying the parsed "tools" (and converting chat_template_kwargs for
  // the template) recursed once per level and overflowed the stack.
  for (const char* f : {"request_body/tools_nested_100k_deep",
                        "request_body/template_kwargs_nested_100k_deep"}) {
    std::ifstream in(FuzzData(f), std::ios::binary);
    const std::string body((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    ASSERT_GT(body.size(), 100000u);
    server::ParsedRequest parsed;
    std::optional<server::ApiError> err =
        server::ParseRequestBody(server::Endpoint::kChat, body, server::SchemaLimits{}, &parsed);
    ASSERT_TRUE(err.has_value()) << f;
    EXPECT_EQ(err->http_status, 400);
    EXPECT_NE(err->message.find("deeper than 128 levels"), std::string::npos) << err->message;
  }
  // Real nesting, up to the limit, still parses.
  nlohmann::json j;
  const std::string ok = std::string(120, '[') + std::string(120, ']');
  EXPECT_FALSE(server::ParseJsonBody(ok, &j).has_value());
  const std::string deep = std::string(200, '[') + std::string(200, ']');
  EXPECT_TRUE(server::ParseJsonBody(deep, &j).has_value());
}

}  // namespace
}  // namespace kvfork::fuzz
