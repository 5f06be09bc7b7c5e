#include "core/cpu_features.h"

#include <gtest/gtest.h>

namespace kvfork {
namespace {

TEST(CpuFeatures, LevelsAreConsistent) {
  EXPECT_TRUE(IsaSupported(Isa::kScalar));
  if (IsaSupported(Isa::kAvx512)) {
    EXPECT_TRUE(IsaSupported(Isa::kAvx2));
  }
  // amx is a level above avx512: every op but MatMul runs the avx512 code.
  if (IsaSupported(Isa::kAmx)) {
    EXPECT_TRUE(IsaSupported(Isa::kAvx512));
    EXPECT_TRUE(DetectCpuFeatures().amx_tile && DetectCpuFeatures().amx_bf16);
    EXPECT_EQ(BestSupportedIsa(), Isa::kAmx);
  }
  EXPECT_EQ(*ParseIsa("amx"), Isa::kAmx);
  EXPECT_STREQ(IsaName(Isa::kAmx), "amx");
  EXPECT_TRUE(IsaSupported(BestSupportedIsa()));
  EXPECT_EQ(*ParseIsa("avx2"), Isa::kAvx2);
  EXPECT_EQ(*ParseIsa("scalar"), Isa::kScalar);
  EXPECT_FALSE(ParseIsa("sse9").ok());
  SetActiveIsaForTesting(Isa::kScalar);
  EXPECT_EQ(ActiveIsa(), Isa::kScalar);
}

}  // namespace
}  // namespace kvfork
