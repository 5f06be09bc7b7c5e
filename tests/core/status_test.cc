#include "core/status.h"

#include <gtest/gtest.h>

namespace kvfork {
namespace {

StatusOr<int> Half(int x) {
  if (x % 2) return InvalidArgumentError("odd value " + std::to_string(x));
  return x / 2;
}

StatusOr<int> Quarter(int x) {
  KVFORK_ASSIGN_OR_RETURN(int h, Half(x));
  KVFORK_ASSIGN_OR_RETURN(int q, Half(h));
  return q;
}

Status CheckEven(int x) {
  KVFORK_RETURN_IF_ERROR(Half(x).status());
  return OkStatus();
}

TEST(Status, ValuesAndErrorsPropagate) {
  EXPECT_EQ(*Quarter(8), 2);
  StatusOr<int> bad = Quarter(6);
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(bad.status().ToString(), "INVALID_ARGUMENT: odd value 3");
  EXPECT_TRUE(CheckEven(4).ok());
  EXPECT_FALSE(CheckEven(5).ok());
}

TEST(Status, WithContextPrefixes) {
  Status s = NotFoundError("tensor x").WithContext("model.safetensors");
  EXPECT_EQ(s.message(), "model.safetensors: tensor x");
  EXPECT_TRUE(OkStatus().WithContext("ignored").ok());
}

TEST(StatusDeathTest, ValueOfErrorAborts) {
  StatusOr<int> bad = Half(3);
  EXPECT_DEATH((void)bad.value(), "odd value 3");
}

}  // namespace
}  // namespace kvfork
