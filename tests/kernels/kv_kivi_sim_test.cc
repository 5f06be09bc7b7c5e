// The KIVI quality simulation's quantizer (kernels/kv_kivi_sim.h): K is
// quantized per channel over a group of tokens and V per token in groups of
// 32 dims, checked on cases computed by hand. Each case is built so that the
// other axis would give a different answer: keys whose channels have very
// different ranges come back exactly only when every channel has its own
// scale and zero point, values whose tokens do likewise only per token.
#include "kernels/kv_kivi_sim.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <memory>
#include <vector>

#include "core/bf16.h"

namespace kvfork {
namespace {

// Zeroed bf16 KV blocks of head_dim 32 and 4 positions each, as kv-quality
// hands KiviRoundTripBf16Group, and the address of one value in them.
struct Bf16Blocks {
  Bf16Blocks(int num_layers, int num_kv_heads, int num_blocks) {
    layout.num_layers = num_layers;
    layout.num_kv_heads = num_kv_heads;
    layout.head_dim = 32;
    layout.block_size = 4;
    layout.dtype = KvDType::kBf16;
    storage.assign(num_blocks, std::vector<uint8_t>(layout.BlockBytes()));
    for (auto& b : storage) ptrs.push_back(b.data());
  }
  // kv 0: K, 1: V.
  bf16_t* At(int layer, int kv, int head, int pos, int d) {
    const int bs = layout.block_size;
    return reinterpret_cast<bf16_t*>(ptrs[pos / bs] + layout.PlaneOffset(layer, kv, head) +
                                     (pos % bs) * layout.RowBytes()) +
           d;
  }
  KvLayout layout;
  std::vector<std::vector<uint8_t>> storage;
  std::vector<uint8_t*> ptrs;
};

TEST(KiviSim, GroupAsymmetricRoundingByHand) {
  // 2 bits: min 0, max 1.5, scale 1.5 / 3 = 0.5 (exact in f16), zero 0.
  // 0.3 / 0.5 = 0.6 -> 1 -> 0.5; 1.1 / 0.5 = 2.2 -> 2 -> 1.0;
  // 0.75 / 0.5 = 1.5 -> round-half-even 2 -> 1.0.
  std::vector<float> x = {0.0f, 0.3f, 1.1f, 1.5f, 0.75f};
  KiviRoundTripGroup(x.data(), 5, 1, 2);
  EXPECT_EQ(x, (std::vector<float>{0.0f, 0.5f, 1.0f, 1.5f, 1.0f}));

  // 4 bits with a negative zero point: min -3, max 12, scale 1; a stride of 2
  // leaves the values in between untouched.
  std::vector<float> y = {-3.0f, 99.0f, 4.4f, 99.0f, 12.0f, 99.0f, 0.6f};
  KiviRoundTripGroup(y.data(), 4, 2, 4);
  EXPECT_EQ(y, (std::vector<float>{-3.0f, 99.0f, 4.0f, 99.0f, 12.0f, 99.0f, 1.0f}));

  // All equal: scale 0, every value comes back as f16(value).
  std::vector<float> z = {0.1f, 0.1f, 0.1f};
  KiviRoundTripGroup(z.data(), 3, 1, 4);
  for (float v : z) EXPECT_EQ(v, F16ToF32(F32ToF16(0.1f)));
}

// keys[t][d] = base[d] + t * step[d]: per channel, the 16 tokens are
// exactly representable with 4 bits (zero base[d], scale step[d]). Per token
// the row spans 0 .. 400, a step of about 27, so most values would move.
TEST(KiviSim, KeysArePerChannel) {
  const int tokens = 16, hd = 4;
  const float base[hd] = {0.0f, 100.0f, -7.0f, 384.0f};
  const float step[hd] = {0.25f, 1.0f, 0.5f, 2.0f};
  std::vector<float> k(tokens * hd);
  for (int t = 0; t < tokens; ++t)
    for (int d = 0; d < hd; ++d) k[t * hd + d] = base[d] + static_cast<float>(t) * step[d];
  std::vector<float> want = k;
  KiviRoundTripKeys(k.data(), tokens, hd, 4);
  EXPECT_EQ(k, want);

  // The same keys quantized as if per token (each row one group) do change:
  // the layout, not the data, makes the case exact.
  std::vector<float> per_token = want;
  for (int t = 0; t < tokens; ++t) KiviRoundTripGroup(per_token.data() + t * hd, hd, 1, 4);
  EXPECT_NE(per_token, want);

  // 2 bits over 4 tokens: channel 0 {0, 1, 2, 3} is on its grid (scale 1);
  // channel 1 {0, 1, 2.4, 3.4} has scale s = f16(3.4 / 3), so 1 / s = 0.88
  // -> 1, 2.4 / s = 2.12 -> 2, 3.4 / s = 3.00 -> 3: values q * s.
  std::vector<float> k2 = {0.0f, 0.0f, 1.0f, 1.0f, 2.0f, 2.4f, 3.0f, 3.4f};  // [4][2]
  KiviRoundTripKeys(k2.data(), 4, 2, 2);
  const float s = F16ToF32(F32ToF16(3.4f / 3.0f));
  EXPECT_NE(s, 3.4f / 3.0f);  // the stored scale is rounded to f16
  EXPECT_EQ(k2, (std::vector<float>{0.0f, 0.0f, 1.0f, s, 2.0f, 2 * s, 3.0f, 3 * s}));
}

// Two tokens of head_dim 64: token 0's first group spans [0, 15] in steps
// of 1, token 1's first group [512, 572] in steps of 4; the second groups
// use other ranges. Per token every group is exact at 4 bits; per channel
// (a column mixes 0 .. 572) it would not be.
TEST(KiviSim, ValuesArePerTokenInGroupsOf32) {
  const int tokens = 2, hd = 64;
  std::vector<float> v(tokens * hd);
  for (int i = 0; i < 32; ++i) {
    const float q = static_cast<float>(i % 16);
    v[i] = q;                        // token 0, group 0: zero 0, scale 1
    v[32 + i] = -1.0f + 0.125f * q;  // token 0, group 1: zero -1, scale 0.125
    v[hd + i] = 512.0f + 4.0f * q;   // token 1, group 0: zero 512, scale 4
    v[hd + 32 + i] = 2.0f * q;       // token 1, group 1: zero 0, scale 2
  }
  std::vector<float> want = v;
  KiviRoundTripValues(v.data(), tokens, hd, 4);
  EXPECT_EQ(v, want);
  std::vector<float> one_group_per_row = want;
  for (int t = 0; t < tokens; ++t) KiviRoundTripGroup(one_group_per_row.data() + t * hd, hd, 1, 4);
  EXPECT_NE(one_group_per_row, want) << "the 32-dim groups are what makes token 0 exact";

  // A value off the grid rounds within its own group only: 5.4 -> 5 in
  // token 0's group 0, while token 1's groups are unchanged.
  std::vector<float> w = want;
  w[5] = 5.4f;
  KiviRoundTripValues(w.data(), tokens, hd, 4);
  EXPECT_EQ(w[5], 5.0f);
  EXPECT_EQ(std::vector<float>(w.begin() + hd, w.end()),
            std::vector<float>(want.begin() + hd, want.end()));
}

// The bf16 block path kv-quality runs: a group of 8 positions spanning two
// blocks of 4 (positions 2..9 of three blocks), 2 layers, 2 KV heads. K
// columns and V rows are chosen exact per channel / per token as above, and
// the positions outside the group are left alone.
TEST(KiviSim, Bf16GroupAcrossBlocks) {
  const int num_blocks = 3, first = 2, tokens = 8;
  Bf16Blocks b(/*num_layers=*/2, /*num_kv_heads=*/2, num_blocks);
  // Inside the group (t = pos - first): K[t][d] = 8 d + 2 t and V[t][d] =
  // 16 t + d % 16, all exact in bf16. Outside: 0.3.
  for (int layer = 0; layer < 2; ++layer)
    for (int head = 0; head < 2; ++head)
      for (int pos = 0; pos < num_blocks * 4; ++pos)
        for (int d = 0; d < 32; ++d) {
          const bool in = pos >= first && pos < first + tokens;
          const int t = pos - first;
          *b.At(layer, 0, head, pos, d) = F32ToBf16(in ? 8.0f * d + 2.0f * t : 0.3f);
          *b.At(layer, 1, head, pos, d) = F32ToBf16(in ? 16.0f * t + (d % 16) : 0.3f);
        }
  // Per channel, K's column is {8 d, 8 d + 2, ..., 8 d + 14}: zero 8 d,
  // scale s = f16(14 / 15), values 8 d + round(2 t / s) * s. (Per token a
  // row would span 2 t .. 248 + 2 t, a scale of 16.5.) Per token, V's groups
  // are {16 t + 0..15}: zero 16 t, scale 1, exact.
  KiviRoundTripBf16Group(b.layout, b.ptrs.data(), first, tokens, 4);
  const float s = F16ToF32(F32ToF16(14.0f / 15.0f));
  for (int layer = 0; layer < 2; ++layer)
    for (int head = 0; head < 2; ++head)
      for (int pos = 0; pos < num_blocks * 4; ++pos)
        for (int d = 0; d < 32; ++d) {
          const bool in = pos >= first && pos < first + tokens;
          const int t = pos - first;
          float want_k = 0.3f, want_v = 0.3f;
          if (in) {
            const float zero = 8.0f * d;
            const float q = std::nearbyint((2.0f * t) / s);
            want_k = q * s + zero;
            want_v = 16.0f * t + (d % 16);
          }
          ASSERT_EQ(*b.At(layer, 0, head, pos, d), F32ToBf16(want_k))
              << "K layer " << layer << " head " << head << " pos " << pos << " dim " << d;
          ASSERT_EQ(*b.At(layer, 1, head, pos, d), F32ToBf16(want_v))
              << "V layer " << layer << " head " << head << " pos " << pos << " dim " << d;
        }
}

// The ablation axis: K grouped per token (as V) gives, on the same bf16
// group, what KiviRoundTripValues gives on the keys' rows.
TEST(KiviSim, Bf16KeysPerTokenAblation) {
  Bf16Blocks b(/*num_layers=*/1, /*num_kv_heads=*/1, /*num_blocks=*/1);
  std::vector<float> keys(4 * 32);
  for (int t = 0; t < 4; ++t)
    for (int d = 0; d < 32; ++d) keys[t * 32 + d] = 8.0f * d + 2.0f * t;
  bf16_t* k = b.At(0, 0, 0, 0, 0);  // the block's 4 K rows, one after another
  for (int i = 0; i < 4 * 32; ++i) k[i] = F32ToBf16(keys[i]);
  KiviRoundTripBf16Group(b.layout, b.ptrs.data(), 0, 4, 4, KiviKeyAxis::kPerToken);
  std::vector<float> per_token = keys, per_channel = keys;
  KiviRoundTripValues(per_token.data(), 4, 32, 4);
  KiviRoundTripKeys(per_channel.data(), 4, 32, 4);
  ASSERT_NE(per_token, per_channel);
  for (int i = 0; i < 4 * 32; ++i) ASSERT_EQ(k[i], F32ToBf16(per_token[i])) << i;
}

}  // namespace
}  // namespace kvfork
