#include "kernels/kv_q4.h"

#include <algorithm>
#include <cmath>

#include "kernels/ops.h"

namespace kvfork {
namespace {

// The nibble of x * inv: nearbyint rounds to nearest even; NaN gives -8 as
// std::max(-8, NaN) returns -8.
inline uint8_t Nibble(float x, float inv) {
  float q = std::nearbyint(x * inv);
  q = std::min(7.0f, std::max(-8.0f, q));
  return static_cast<uint8_t>(static_cast<int>(q) + 8);
}

}  // namespace

f16_t Q4GroupScale(float m, float amax, float* inv) {
  // f16's largest finite value: beyond it the scale would be inf and every
  // value of the group NaN; clamping keeps the group finite.
  const float d32 = std::min(65504.0f, std::max(-65504.0f, m / -8.0f));
  const f16_t d16 = amax > 0.0f ? F32ToF16(d32) : f16_t{0};
  const float d = F16ToF32(d16);
  *inv = d != 0.0f ? 1.0f / d : 0.0f;
  return d16;
}

void QuantizeQ4Row(const float* x, int head_dim, uint8_t* codes, f16_t* scales) {
  for (int g = 0; g < head_dim / kQ4Group; ++g) {
    const float* xg = x + g * kQ4Group;
    float amax = 0.0f, m = 0.0f;
    for (int i = 0; i < kQ4Group; ++i) {
      const float a = std::fabs(xg[i]);
      if (a > amax) {  // false for NaN: skipped
        amax = a;
        m = xg[i];
      }
    }
    float inv;
    scales[g] = Q4GroupScale(m, amax, &inv);
    for (int i = 0; i < 16; ++i)
      codes[g * 16 + i] = static_cast<uint8_t>(Nibble(xg[i], inv) | (Nibble(xg[i + 16], inv) << 4));
  }
}

void HadamardRotate(float* x, int head_dim) {
  const int n = HadamardBlock(head_dim);
  const float norm = static_cast<float>(1.0 / std::sqrt(static_cast<double>(n)));
  for (int b = 0; b < head_dim; b += n) {
    float* xb = x + b;
    for (int len = 1; len < n; len <<= 1) {
      for (int i = 0; i < n; i += 2 * len) {
        for (int j = i; j < i + len; ++j) {
          const float a = xb[j], c = xb[j + len];
          xb[j] = a + c;
          xb[j + len] = a - c;
        }
      }
    }
    for (int i = 0; i < n; ++i) xb[i] *= norm;
  }
}

void WriteKvQ4(const KvLayout& layout, int layer, uint8_t* const* blocks, int64_t start_pos,
               int64_t num_tokens, const float* k, const float* v,
               const Q4RowKernels& kernels) {
  const int hd = layout.head_dim;
  const int64_t row = static_cast<int64_t>(layout.num_kv_heads) * hd;
  const bool rotate = layout.dtype == KvDType::kQ4r;
  const size_t code_bytes = layout.RowBytes(), scale_count = layout.RowScaleBytes() / 2;
  float rotated[kMaxAttentionHeadDim];
  for (int64_t t = 0; t < num_tokens; ++t) {
    const int64_t pos = start_pos + t;
    uint8_t* block = blocks[pos / layout.block_size];
    const size_t slot = static_cast<size_t>(pos % layout.block_size);
    for (int h = 0; h < layout.num_kv_heads; ++h) {
      for (int kv = 0; kv < 2; ++kv) {
        const float* src = (kv == 0 ? k : v) + t * row + static_cast<int64_t>(h) * hd;
        if (rotate) {
          std::copy(src, src + hd, rotated);
          kernels.rotate(rotated, hd);
          src = rotated;
        }
        uint8_t* codes = block + layout.PlaneOffset(layer, kv, h) + slot * code_bytes;
        f16_t* scales = reinterpret_cast<f16_t*>(block + layout.Q4ScaleOffset(layer, kv, h)) +
                        slot * scale_count;
        kernels.quantize(src, hd, codes, scales);
      }
    }
  }
}

}  // namespace kvfork
