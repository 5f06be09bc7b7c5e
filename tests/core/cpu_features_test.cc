#include "core/cpu_features.h"

#include <gtest/gtest.h>

namespace kvfork {
namespace {

TEST(CpuFeatures, LevelsAreConsistent) {
  EXPECT_TRUE(IsaSupported(Isa::kScalar));
  if (IsaSupported(Isa::kAvx512)) {
    EXPECT_TRUE(IsaSupported(Isa::kAvx2));
  }
  EXPECT_TRUE(IsaSupported(BestSupportedIsa()));
  EXPECT_EQ(*ParseIsa("avx2"), Isa::kAvx2);
  EXPECT_EQ(*ParseIsa("scalar"), Isa::kScalar);
  EXPECT_FALSE(ParseIsa("sse9").ok());
  SetActiveIsaForTesting(Isa::kScalar);
  EXPECT_EQ(ActiveIsa(), Isa::kScalar);
}

}  // namespace
}  // namespace kvfork
