#include "engine/step_budget.h"

#include <gtest/gtest.h>

namespace kvfork {
namespace {

constexpr int64_t kMs = 1000000;

TEST(StepBudget, OffGivesTheWholeTokenBudget) {
  StepBudget b({/*max_step_ms=*/0, /*min_prefill_tokens=*/32});
  b.Observe(0, 512, 500 * kMs);
  b.Observe(4, 0, 40 * kMs);
  EXPECT_EQ(b.PrefillTokens(4, 508), 508);
  EXPECT_EQ(b.TargetNs(4), 0);
}

TEST(StepBudget, NothingDecodingGivesTheWholeTokenBudget) {
  StepBudget b({/*max_step_ms=*/100, 32});
  b.Observe(0, 512, 500 * kMs);
  EXPECT_EQ(b.PrefillTokens(0, 512), 512);
}

TEST(StepBudget, FixedTargetFitsPrefillBesideTheDecodeStep) {
  StepBudget b({/*max_step_ms=*/100, 32});
  b.Observe(0, 100, 100 * kMs);  // 1 ms a prefill token
  b.Observe(2, 0, 20 * kMs);     // a decode-only step: 20 ms
  EXPECT_DOUBLE_EQ(b.prefill_token_ns(), 1.0 * kMs);
  EXPECT_DOUBLE_EQ(b.decode_step_ns(), 20.0 * kMs);
  // (100 - 20) ms / 1 ms a token.
  EXPECT_EQ(b.PrefillTokens(2, 510), 80);
  // Never more than the token budget left.
  EXPECT_EQ(b.PrefillTokens(2, 50), 50);
}

TEST(StepBudget, FloorKeepsPromptsMoving) {
  StepBudget b({/*max_step_ms=*/10, 32});
  b.Observe(0, 100, 100 * kMs);
  b.Observe(1, 0, 30 * kMs);  // the decode step alone is over the target
  EXPECT_EQ(b.PrefillTokens(1, 511), 32);
  EXPECT_EQ(b.PrefillTokens(1, 20), 20);
}

TEST(StepBudget, AutoTargetIsFourDecodeStepsAndAtLeast400Ms) {
  StepBudget b({/*max_step_ms=*/-1, 32});
  EXPECT_EQ(b.TargetNs(1), 0);  // nothing measured yet
  EXPECT_EQ(b.PrefillTokens(1, 511), 511);
  b.Observe(0, 100, 100 * kMs);  // 1 ms a prefill token
  b.Observe(1, 0, 10 * kMs);     // a decode-only step: 10 ms
  EXPECT_DOUBLE_EQ(b.TargetNs(1), 400.0 * kMs);  // 4 x 10 ms is under the floor
  EXPECT_EQ(b.PrefillTokens(1, 511), 390);
  StepBudget slow({-1, 32});
  slow.Observe(8, 0, 120 * kMs);
  slow.Observe(8, 200, 320 * kMs);  // 1 ms a prefill token beside the decodes
  EXPECT_DOUBLE_EQ(slow.TargetNs(8), 480.0 * kMs);
  EXPECT_EQ(slow.PrefillTokens(8, 504), 360);
}

// A burst of new prompts: the first ones decode while the others still
// prefill, so no decode-only step is ever seen. Auto still holds the step:
// each decode token is taken to cost what a prefill token does.
TEST(StepBudget, AutoWithoutADecodeOnlyStep) {
  StepBudget b({/*max_step_ms=*/-1, 32});
  b.Observe(0, 512, 2048 * kMs);  // 4 ms a prefill token
  EXPECT_DOUBLE_EQ(b.DecodePartNs(8), 32.0 * kMs);
  EXPECT_DOUBLE_EQ(b.TargetNs(8), 400.0 * kMs);
  EXPECT_EQ(b.PrefillTokens(8, 504), 92);  // (400 - 32) / 4
  // A mixed step of 8 decodes and 92 prefill tokens that took 500 ms: a
  // prefill token's share is (500 - 8 x 4) / 92 ms.
  b.Observe(8, 92, 500 * kMs);
  EXPECT_GT(b.prefill_token_ns(), 4.0 * kMs);
  EXPECT_LT(b.PrefillTokens(8, 504), 92);
}

TEST(StepBudget, EstimatesFollowRecentSteps) {
  StepBudget b({/*max_step_ms=*/100, 1});
  b.Observe(1, 0, 20 * kMs);
  b.Observe(1, 80, 100 * kMs);  // 1 ms a token
  const int64_t before = b.PrefillTokens(1, 1000);
  // Later chunks of a long prompt attend over more keys: 2 ms a token.
  for (int i = 0; i < 10; ++i) b.Observe(1, 40, 100 * kMs);
  const int64_t after = b.PrefillTokens(1, 1000);
  EXPECT_EQ(before, 80);
  EXPECT_NEAR(after, 40, 1);
}

}  // namespace
}  // namespace kvfork
