// ForwardSeq::all_logits / no_logits: a batch returns exactly the rows asked
// for, each bitwise equal to the same row of a batch that asks for every row,
// and a batch that asks for none skips the lm head but still writes its K/V
// (the next token's logits are the same as if the chunk had asked for rows).
#include <gtest/gtest.h>

#include <cstring>

#include "model_test_util.h"

namespace kvfork {
namespace {

constexpr int64_t kVocab = 256;

std::vector<int32_t> Tokens(int64_t n, int64_t salt) {
  std::vector<int32_t> t;
  for (int64_t i = 0; i < n; ++i)
    t.push_back(static_cast<int32_t>((i * 37 + salt * 11 + 5) % kVocab));
  return t;
}

bool RowsEqual(const float* a, const float* b, int64_t rows) {
  return std::memcmp(a, b, rows * kVocab * sizeof(float)) == 0;
}

class ForwardLogitsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(WriteRandomModel(testing::TinyOptions(Architecture::kQwen3, DType::kBf16, true,
                                                      false, kVocab, 9),
                                 tmp_.Sub("m"))
                    .ok());
    ModelLoadOptions lo;
    lo.show_progress = false;
    auto m = Model::Load(tmp_.Sub("m"), lo);
    ASSERT_TRUE(m.ok()) << m.status().ToString();
    model_ = std::move(m).value();
    layout_ = model_->MakeKvLayout(KvDType::kBf16, 16);
  }

  // Three sequences of 5, 1 and 7 tokens on fresh KV, with the given modes
  // (0: last row, 1: all rows, 2: none); returns the logits.
  std::vector<float> Run(const std::vector<int>& modes) {
    ThreadPool pool(2);
    std::vector<std::unique_ptr<testing::LocalKv>> kvs;
    ForwardBatch b;
    const int64_t lens[3] = {5, 1, 7};
    for (int s = 0; s < 3; ++s) {
      kvs.push_back(std::make_unique<testing::LocalKv>(layout_, 32));
      const std::vector<int32_t> t = Tokens(lens[s], s);
      b.tokens.insert(b.tokens.end(), t.begin(), t.end());
      ForwardSeq fs;
      fs.num_tokens = lens[s];
      fs.blocks = kvs.back()->blocks.data();
      fs.all_logits = modes[s] == 1;
      fs.no_logits = modes[s] == 2;
      b.seqs.push_back(fs);
    }
    std::vector<float> logits = {1.0f};  // stale content must go
    Status st = model_->Forward(b, layout_, pool, &logits);
    KVFORK_CHECK_MSG(st.ok(), st.ToString());
    return logits;
  }

  testing::TempDir tmp_;
  std::unique_ptr<Model> model_;
  KvLayout layout_;
};

TEST_F(ForwardLogitsTest, ReturnsExactlyTheRowsAskedFor) {
  const std::vector<float> all = Run({1, 1, 1});  // rows 0-4, 5, 6-12
  ASSERT_EQ(all.size(), 13u * kVocab);
  // Last row of seq 0 and 2, none of seq 1.
  const std::vector<float> some = Run({0, 2, 0});
  ASSERT_EQ(some.size(), 2u * kVocab);
  EXPECT_TRUE(RowsEqual(some.data(), all.data() + 4 * kVocab, 1));
  EXPECT_TRUE(RowsEqual(some.data() + kVocab, all.data() + 12 * kVocab, 1));
  // no_logits wins over all_logits.
  const std::vector<float> mixed = Run({2, 1, 1});
  ASSERT_EQ(mixed.size(), 8u * kVocab);
  EXPECT_TRUE(RowsEqual(mixed.data(), all.data() + 5 * kVocab, 8));
  EXPECT_TRUE(Run({2, 2, 2}).empty());
}

TEST_F(ForwardLogitsTest, ChunkWithoutLogitsStillWritesKv) {
  ThreadPool pool(1);
  const std::vector<int32_t> ids = Tokens(20, 4);
  auto run = [&](bool first_chunk_logits) {
    testing::LocalKv kv(layout_, 32);
    std::vector<float> logits;
    ForwardBatch a;
    a.tokens.assign(ids.begin(), ids.begin() + 12);
    a.seqs = {{12, 0, kv.blocks.data(), false, !first_chunk_logits}};
    KVFORK_CHECK(model_->Forward(a, layout_, pool, &logits).ok());
    EXPECT_EQ(logits.size(), first_chunk_logits ? static_cast<size_t>(kVocab) : 0u);
    ForwardBatch b;
    b.tokens.assign(ids.begin() + 12, ids.end());
    b.seqs = {{8, 12, kv.blocks.data(), false, false}};
    KVFORK_CHECK(model_->Forward(b, layout_, pool, &logits).ok());
    return logits;
  };
  const std::vector<float> with = run(true);
  const std::vector<float> without = run(false);
  ASSERT_EQ(with.size(), static_cast<size_t>(kVocab));
  EXPECT_TRUE(RowsEqual(with.data(), without.data(), 1));
}

}  // namespace
}  // namespace kvfork
