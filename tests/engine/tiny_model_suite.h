// The fixture base of the engine tests that run a real model end to end: the
// "tiny" qwen3 shape with random weights of seed kSeed on the real Qwen3
// tokenizer, written once per test suite to a fresh temporary directory (a
// run from anywhere leaves nothing behind) and loaded.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <utility>

#include "model/model.h"
#include "model/model_test_util.h"
#include "model/random_model.h"
#include "test_env.h"
#include "tokenizer/tokenizer.h"

namespace kvfork {

template <uint64_t kSeed>
class TinyModelSuite : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    model_dir_ = new testing::TempDir();
    const std::string dir = model_dir_->Sub("model");
    RandomModelOptions o;
    o.shape = "tiny";
    o.seed = kSeed;
    o.tokenizer_dir = testing::QwenTokenizerDir();
    Status w = WriteRandomModel(o, dir);
    ASSERT_TRUE(w.ok()) << w.ToString();
    ModelLoadOptions lo;
    lo.show_progress = false;
    auto m = Model::Load(dir, lo);
    ASSERT_TRUE(m.ok()) << m.status().ToString();
    model_ = std::move(m).value().release();
    auto t = Tokenizer::Load(dir);
    ASSERT_TRUE(t.ok()) << t.status().ToString();
    tokenizer_ = std::move(t).value().release();
  }
  static void TearDownTestSuite() {
    delete model_;
    delete tokenizer_;
    delete model_dir_;
    model_ = nullptr;
    tokenizer_ = nullptr;
    model_dir_ = nullptr;
  }

  static inline testing::TempDir* model_dir_ = nullptr;
  static inline Model* model_ = nullptr;
  static inline Tokenizer* tokenizer_ = nullptr;
};

}  // namespace kvfork
