// The 256-weight super-block formats q4_k, q5_k, q6_k (ggml-quants.c's
// quantize_row_q{4,5,6}_K_ref, no importance matrix).
//
// q4_k / q5_k: 8 sub-blocks of 32, each weight = d*sc*q - dmin*m with 6-bit
// sc and m per sub-block. The sub-block's (scale, min) pair comes from a
// small search (FitScaleMin) that minimizes the squared error weighted by
// rms + |x| (weights near the block's size count more); the 8 scales and 8
// mins are then quantized against their maxima, and the weights re-quantized
// against the rounded values.
// q6_k: 16 sub-blocks of 16, weight = d*sc*(q - 32) with an 8-bit signed sc;
// each sub-block's scale comes from FitSymmetricScale's search.
//
// Every sum runs in the order ggml's does: results are bit-exact only so.
#include <cmath>
#include <cstring>

#include "kernels/quantize_blocks.h"

namespace kvfork::quantize {
namespace {

constexpr int kSuper = 256;
constexpr float kGroupMaxEps = 1e-15f;  // below this a group is all zeros

// Round to nearest, ties to even, for |v| < 2^22: adding 1.5 * 2^23 puts the
// integer in the mantissa's low bits (ggml's nearest_int; the quants here
// never approach the limit).
int NearestInt(float v) {
  const float shifted = v + 12582912.f;
  int32_t bits;
  std::memcpy(&bits, &shifted, 4);
  return (bits & 0x007fffff) - 0x00400000;
}

int Clamp(int v, int lo, int hi) { return v < lo ? lo : v > hi ? hi : v; }

// make_qkx2_quants: fits x[i] ~ scale * L[i] - the_min with L in [0, nmax]
// and the_min >= 0, minimizing sum weights[i] * err^2. Starts from the
// min/max fit, then tries nstep + 1 stretched grids (rmin + rdelta*is extra
// levels) and keeps the least-squares (scale, min) of the best one.
float FitScaleMin(int n, int nmax, const float* x, const float* weights, uint8_t* L, float* the_min,
                  uint8_t* Laux, float rmin, float rdelta, int nstep) {
  float min = x[0];
  float max = x[0];
  float sum_w = weights[0];
  float sum_x = sum_w * x[0];
  for (int i = 1; i < n; ++i) {
    if (x[i] < min) min = x[i];
    if (x[i] > max) max = x[i];
    const float w = weights[i];
    sum_w += w;
    sum_x += w * x[i];
  }
  if (min > 0) min = 0;
  if (max == min) {
    for (int i = 0; i < n; ++i) L[i] = 0;
    *the_min = -min;
    return 0.f;
  }
  float iscale = nmax / (max - min);
  float scale = 1 / iscale;
  float best_error = 0;
  for (int i = 0; i < n; ++i) {
    const int l = NearestInt(iscale * (x[i] - min));
    L[i] = static_cast<uint8_t>(Clamp(l, 0, nmax));
    float diff = scale * L[i] + min - x[i];
    diff = diff * diff;
    best_error += weights[i] * diff;
  }
  for (int is = 0; is <= nstep; ++is) {
    iscale = (rmin + rdelta * is + nmax) / (max - min);
    float sum_l = 0, sum_l2 = 0, sum_xl = 0;
    for (int i = 0; i < n; ++i) {
      const int l = Clamp(NearestInt(iscale * (x[i] - min)), 0, nmax);
      Laux[i] = static_cast<uint8_t>(l);
      const float w = weights[i];
      sum_l += w * l;
      sum_l2 += w * l * l;
      sum_xl += w * l * x[i];
    }
    const float D = sum_w * sum_l2 - sum_l * sum_l;
    if (D > 0) {
      float this_scale = (sum_w * sum_xl - sum_x * sum_l) / D;
      float this_min = (sum_l2 * sum_x - sum_l * sum_xl) / D;
      if (this_min > 0) {
        this_min = 0;
        this_scale = sum_xl / sum_l2;
      }
      float cur_error = 0;
      for (int i = 0; i < n; ++i) {
        float diff = this_scale * Laux[i] + this_min - x[i];
        diff = diff * diff;
        cur_error += weights[i] * diff;
      }
      if (cur_error < best_error) {
        for (int i = 0; i < n; ++i) L[i] = Laux[i];
        best_error = cur_error;
        scale = this_scale;
        min = this_min;
      }
    }
  }
  *the_min = -min;
  return scale;
}

// make_qx_quants with rmse_type 1 and no importance weights: fits x[i] ~
// scale * (L[i] - nmax), L in [0, 2*nmax), weighting each error by x[i]^2.
// Tries 19 grids around nmax / max and keeps the least-squares scale of the
// best.
float FitSymmetricScale(int n, int nmax, const float* x, int8_t* L) {
  float max = 0;
  float amax = 0;
  for (int i = 0; i < n; ++i) {
    const float ax = std::fabs(x[i]);
    if (ax > amax) {
      amax = ax;
      max = x[i];
    }
  }
  if (amax < kGroupMaxEps) {
    for (int i = 0; i < n; ++i) L[i] = 0;
    return 0.f;
  }
  float iscale = -nmax / max;
  float sumlx = 0;
  float suml2 = 0;
  for (int i = 0; i < n; ++i) {
    const int l = Clamp(NearestInt(iscale * x[i]), -nmax, nmax - 1);
    L[i] = static_cast<int8_t>(l + nmax);
    const float w = x[i] * x[i];
    sumlx += w * x[i] * l;
    suml2 += w * l * l;
  }
  float scale = suml2 != 0 ? sumlx / suml2 : 0.0f;
  float best = scale * sumlx;
  for (int is = -9; is <= 9; ++is) {
    if (is == 0) continue;
    iscale = -(nmax + 0.1f * is) / max;
    sumlx = suml2 = 0;
    for (int i = 0; i < n; ++i) {
      const int l = Clamp(NearestInt(iscale * x[i]), -nmax, nmax - 1);
      const float w = x[i] * x[i];
      sumlx += w * x[i] * l;
      suml2 += w * l * l;
    }
    if (suml2 > 0 && sumlx * sumlx > best * suml2) {
      for (int i = 0; i < n; ++i)
        L[i] = static_cast<int8_t>(nmax + Clamp(NearestInt(iscale * x[i]), -nmax, nmax - 1));
      scale = sumlx / suml2;
      best = scale * sumlx;
    }
  }
  return scale;
}

// The 12 scale bytes of q4_k / q5_k: 8 six-bit scales and 8 six-bit mins.
// Sub-blocks 0-3 keep sc and m in the low 6 bits of bytes 0-3 and 4-7;
// sub-blocks 4-7 keep their low 4 bits in bytes 8-11 and their top 2 bits
// in the spare top bits of bytes 0-7.
void PackScalesMins(const uint8_t* ls, const uint8_t* lm, uint8_t* scales) {
  for (int j = 0; j < 8; ++j) {
    if (j < 4) {
      scales[j] = ls[j];
      scales[j + 4] = lm[j];
    } else {
      scales[j + 4] = static_cast<uint8_t>((ls[j] & 0xF) | ((lm[j] & 0xF) << 4));
      scales[j - 4] |= static_cast<uint8_t>((ls[j] >> 4) << 6);
      scales[j - 0] |= static_cast<uint8_t>((lm[j] >> 4) << 6);
    }
  }
}

void UnpackScaleMin(int j, const uint8_t* q, uint8_t* sc, uint8_t* m) {
  if (j < 4) {
    *sc = q[j] & 63;
    *m = q[j + 4] & 63;
  } else {
    *sc = static_cast<uint8_t>((q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4));
    *m = static_cast<uint8_t>((q[j + 4] >> 4) | ((q[j - 0] >> 6) << 4));
  }
}

// The shared part of q4_k and q5_k: fits the 8 sub-blocks, writes d, dmin and
// the scale bytes at dst, and leaves the final quants (0..nmax) in L.
// Search parameters are ggml's per format (rmin, rdelta, nstep).
void ScaleMinSuperBlock(const float* x, int nmax, float rmin, float rdelta, int nstep, uint8_t* dst,
                        uint8_t* L) {
  float scales[8], mins[8], weights[32];
  uint8_t Laux[32];
  float max_scale = 0;  // mins are subtracted, so scales are >= 0
  float max_min = 0;
  for (int j = 0; j < 8; ++j) {
    float sum_x2 = 0;
    for (int l = 0; l < 32; ++l) sum_x2 += x[32 * j + l] * x[32 * j + l];
    const float av_x = std::sqrt(sum_x2 / 32);
    for (int l = 0; l < 32; ++l) weights[l] = av_x + std::fabs(x[32 * j + l]);
    scales[j] =
        FitScaleMin(32, nmax, x + 32 * j, weights, L + 32 * j, &mins[j], Laux, rmin, rdelta, nstep);
    if (scales[j] > max_scale) max_scale = scales[j];
    if (mins[j] > max_min) max_min = mins[j];
  }
  const float inv_scale = max_scale > 0 ? 63.f / max_scale : 0.f;
  const float inv_min = max_min > 0 ? 63.f / max_min : 0.f;
  uint8_t ls[8], lm[8];
  for (int j = 0; j < 8; ++j) {
    // Through uint8_t first, as ggml: a (never seen) negative wraps, then clamps.
    ls[j] = static_cast<uint8_t>(NearestInt(inv_scale * scales[j]));
    lm[j] = static_cast<uint8_t>(NearestInt(inv_min * mins[j]));
    if (ls[j] > 63) ls[j] = 63;
    if (lm[j] > 63) lm[j] = 63;
  }
  uint8_t* scale_bytes = dst + 4;
  PackScalesMins(ls, lm, scale_bytes);
  StoreF16(max_scale / 63.f, dst);
  StoreF16(max_min / 63.f, dst + 2);
  const float d_all = LoadF16(dst);
  const float dmin_all = LoadF16(dst + 2);
  for (int j = 0; j < 8; ++j) {
    uint8_t sc, m;
    UnpackScaleMin(j, scale_bytes, &sc, &m);
    const float d = d_all * sc;
    if (d == 0) continue;  // keeps the fit's quants, as ggml does
    const float dm = dmin_all * m;
    for (int i = 0; i < 32; ++i)
      L[32 * j + i] = static_cast<uint8_t>(Clamp(NearestInt((x[32 * j + i] + dm) / d), 0, nmax));
  }
}

}  // namespace

// Block: f16 d, f16 dmin, 12 scale bytes, 128 bytes of nibbles; byte l of
// each 32-byte group g holds weight 64g + l (low) and 64g + 32 + l (high).
void RowQ4_K(const float* x, int64_t n, uint8_t* dst) {
  for (int64_t b = 0; b < n / kSuper; ++b, x += kSuper, dst += 144) {
    uint8_t L[kSuper];
    ScaleMinSuperBlock(x, 15, -1.f, 0.1f, 20, dst, L);
    uint8_t* q = dst + 16;
    for (int j = 0; j < kSuper; j += 64, q += 32)
      for (int l = 0; l < 32; ++l) q[l] = static_cast<uint8_t>(L[j + l] | (L[j + l + 32] << 4));
  }
}

// Block: f16 d, f16 dmin, 12 scale bytes, 32 bytes qh, 128 bytes of nibbles
// (as q4_k); the 5th bit of weight 64g + l is bit 2g of qh[l], of
// 64g + 32 + l bit 2g + 1.
void RowQ5_K(const float* x, int64_t n, uint8_t* dst) {
  for (int64_t b = 0; b < n / kSuper; ++b, x += kSuper, dst += 176) {
    uint8_t L[kSuper];
    ScaleMinSuperBlock(x, 31, -0.5f, 0.1f, 15, dst, L);
    uint8_t* qh = dst + 16;
    uint8_t* ql = dst + 48;
    std::memset(qh, 0, 32);
    uint8_t m1 = 1, m2 = 2;
    for (int g = 0; g < kSuper; g += 64, ql += 32) {
      for (int j = 0; j < 32; ++j) {
        int l1 = L[g + j];
        if (l1 > 15) {
          l1 -= 16;
          qh[j] |= m1;
        }
        int l2 = L[g + j + 32];
        if (l2 > 15) {
          l2 -= 16;
          qh[j] |= m2;
        }
        ql[j] = static_cast<uint8_t>(l1 | (l2 << 4));
      }
      m1 = static_cast<uint8_t>(m1 << 2);
      m2 = static_cast<uint8_t>(m2 << 2);
    }
  }
}

// Block: 128 bytes ql (low nibbles), 64 bytes qh (2 high bits each), 16 int8
// scales, f16 d; weight = d * scales[i/16] * (q - 32).
void RowQ6_K(const float* x, int64_t n, uint8_t* dst) {
  for (int64_t b = 0; b < n / kSuper; ++b, x += kSuper, dst += 210) {
    int8_t L[kSuper];
    float scales[16];
    float max_scale = 0;
    float max_abs_scale = 0;
    for (int ib = 0; ib < 16; ++ib) {
      const float scale = FitSymmetricScale(16, 32, x + 16 * ib, L + 16 * ib);
      scales[ib] = scale;
      const float abs_scale = std::fabs(scale);
      if (abs_scale > max_abs_scale) {
        max_abs_scale = abs_scale;
        max_scale = scale;
      }
    }
    uint8_t* ql = dst;
    uint8_t* qh = dst + 128;
    int8_t* block_scales = reinterpret_cast<int8_t*>(dst + 192);
    uint8_t* d_dst = dst + 208;
    if (max_abs_scale < kGroupMaxEps) {
      std::memset(dst, 0, 210);
      continue;
    }
    const float iscale = -128.f / max_scale;
    StoreF16(1 / iscale, d_dst);
    const float d_all = LoadF16(d_dst);
    for (int ib = 0; ib < 16; ++ib) {
      const int s = NearestInt(iscale * scales[ib]);
      block_scales[ib] = static_cast<int8_t>(s < 127 ? s : 127);
    }
    for (int j = 0; j < 16; ++j) {
      const float d = d_all * block_scales[j];
      if (d == 0) continue;
      for (int i = 0; i < 16; ++i)
        L[16 * j + i] = static_cast<int8_t>(Clamp(NearestInt(x[16 * j + i] / d), -32, 31) + 32);
    }
    for (int j = 0; j < kSuper; j += 128, ql += 64, qh += 32) {
      for (int l = 0; l < 32; ++l) {
        const uint8_t q1 = L[j + l + 0] & 0xF;
        const uint8_t q2 = L[j + l + 32] & 0xF;
        const uint8_t q3 = L[j + l + 64] & 0xF;
        const uint8_t q4 = L[j + l + 96] & 0xF;
        ql[l + 0] = static_cast<uint8_t>(q1 | (q3 << 4));
        ql[l + 32] = static_cast<uint8_t>(q2 | (q4 << 4));
        qh[l] = static_cast<uint8_t>((L[j + l] >> 4) | ((L[j + l + 32] >> 4) << 2) |
                                     ((L[j + l + 64] >> 4) << 4) | ((L[j + l + 96] >> 4) << 6));
      }
    }
  }
}

}  // namespace kvfork::quantize
