#include "kernels/kv_kivi_sim.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "core/bf16.h"
#include "core/status.h"

namespace kvfork {

void KiviRoundTripGroup(float* x, int n, ptrdiff_t stride, int bits) {
  KVFORK_CHECK(bits >= 1 && bits <= 8);
  float lo = std::numeric_limits<float>::infinity(), hi = -lo;
  for (int i = 0; i < n; ++i) {
    const float v = x[i * stride];
    if (v < lo) lo = v;  // false for NaN: skipped
    if (v > hi) hi = v;
  }
  if (lo > hi) lo = hi = 0.0f;  // every value NaN (or n == 0)
  const float max_code = static_cast<float>((1 << bits) - 1);
  // The stored pair: both f16, as a real format would keep them.
  const float zero = F16ToF32(F32ToF16(lo));
  const float scale = F16ToF32(F32ToF16((hi - lo) / max_code));
  for (int i = 0; i < n; ++i) {
    float& v = x[i * stride];
    float q = 0.0f;
    if (scale > 0.0f && !std::isnan(v)) {
      q = std::nearbyint((v - zero) / scale);
      q = std::min(max_code, std::max(0.0f, q));
    }
    v = q * scale + zero;
  }
}

void KiviRoundTripKeys(float* keys, int tokens, int head_dim, int bits) {
  for (int d = 0; d < head_dim; ++d) KiviRoundTripGroup(keys + d, tokens, head_dim, bits);
}

void KiviRoundTripValues(float* values, int tokens, int head_dim, int bits) {
  KVFORK_CHECK(head_dim % kKiviValueGroup == 0);
  for (int t = 0; t < tokens; ++t)
    for (int g = 0; g < head_dim; g += kKiviValueGroup)
      KiviRoundTripGroup(values + static_cast<ptrdiff_t>(t) * head_dim + g, kKiviValueGroup, 1,
                         bits);
}

void KiviRoundTripBf16Group(const KvLayout& layout, uint8_t* const* blocks, int64_t first_pos,
                            int tokens, int bits, KiviKeyAxis key_axis) {
  KVFORK_CHECK(layout.dtype == KvDType::kBf16);
  const int hd = layout.head_dim;
  std::vector<float> rows(static_cast<size_t>(tokens) * hd);  // [tokens][head_dim]
  // The bf16 row of position pos in the plane (layer, kv, head).
  auto row_of = [&](int layer, int kv, int head, int64_t pos) {
    uint8_t* block = blocks[pos / layout.block_size];
    const size_t slot = static_cast<size_t>(pos % layout.block_size);
    return reinterpret_cast<bf16_t*>(block + layout.PlaneOffset(layer, kv, head) +
                                     slot * layout.RowBytes());
  };
  for (int layer = 0; layer < layout.num_layers; ++layer) {
    for (int kv = 0; kv < 2; ++kv) {
      for (int head = 0; head < layout.num_kv_heads; ++head) {
        for (int t = 0; t < tokens; ++t) {
          const bf16_t* src = row_of(layer, kv, head, first_pos + t);
          for (int d = 0; d < hd; ++d) rows[static_cast<size_t>(t) * hd + d] = Bf16ToF32(src[d]);
        }
        if (kv == 0 && key_axis == KiviKeyAxis::kPerChannel) {
          KiviRoundTripKeys(rows.data(), tokens, hd, bits);
        } else {
          KiviRoundTripValues(rows.data(), tokens, hd, bits);
        }
        for (int t = 0; t < tokens; ++t) {
          bf16_t* dst = row_of(layer, kv, head, first_pos + t);
          for (int d = 0; d < hd; ++d) dst[d] = F32ToBf16(rows[static_cast<size_t>(t) * hd + d]);
        }
      }
    }
  }
}

}  // namespace kvfork
