#include "kernels/quantize_row.h"

#include <cstring>

#include "core/bf16.h"
#include "core/status.h"
#include "kernels/quantize_blocks.h"

namespace kvfork {

void QuantizeRow(DType t, const float* x, int64_t cols, uint8_t* dst) {
  KVFORK_CHECK(RowFits(t, cols));
  switch (t) {
    case DType::kF32:
      std::memcpy(dst, x, static_cast<size_t>(cols) * 4);
      return;
    case DType::kF16:
      for (int64_t i = 0; i < cols; ++i) quantize::StoreF16(x[i], dst + 2 * i);
      return;
    case DType::kBf16:
      for (int64_t i = 0; i < cols; ++i) {
        const bf16_t h = F32ToBf16(x[i]);
        std::memcpy(dst + 2 * i, &h, 2);
      }
      return;
    case DType::kQ8_0:
      quantize::RowQ8_0(x, cols, dst);
      return;
    case DType::kQ4_0:
      quantize::RowQ4_0(x, cols, dst);
      return;
    case DType::kQ4_1:
      quantize::RowQ4_1(x, cols, dst);
      return;
    case DType::kQ5_0:
      quantize::RowQ5_0(x, cols, dst);
      return;
    case DType::kQ5_1:
      quantize::RowQ5_1(x, cols, dst);
      return;
    case DType::kQ4_K:
      quantize::RowQ4_K(x, cols, dst);
      return;
    case DType::kQ5_K:
      quantize::RowQ5_K(x, cols, dst);
      return;
    case DType::kQ6_K:
      quantize::RowQ6_K(x, cols, dst);
      return;
  }
  KVFORK_CHECK(false);
}

}  // namespace kvfork
