// KIVI's KV quantization (Liu et al. 2024, "KIVI: A Tuning-Free Asymmetric
// 2bit Quantization for KV Cache"), simulated for quality measurement only:
// `kvfork kv-quality --kv-dtype kivi4|kivi2` (src/cli/kv_quality.cc) keeps
// the KV in a bf16 layout and rewrites each group of tokens, once complete,
// with its quantized-then-dequantized values. Nothing here is a KV format:
// no memory is saved and no attention kernel reads it. It answers one
// question, whether KIVI's layout is worth a real format and its kernels
// (docs/kv_cache.md, "KV quantization quality").
//
// The layout it simulates (per layer and KV head):
//   - K per channel: for each dim d of head_dim, the group's `tokens` values
//     of that dim share one scale s and one zero point z (KIVI groups keys
//     along the token axis because a few channels carry large magnitudes);
//   - V per token: each token's row is split into groups of kKiviValueGroup
//     dims along head_dim, each with its own s and z;
//   - asymmetric b-bit codes q = clamp(round_to_nearest_even((x - z) / s),
//     0, 2^b - 1) with z = f16(min), s = f16((max - min) / (2^b - 1)), so a
//     real format would store codes plus two f16 per group; the value read
//     back is q * s + z in f32 (then stored as bf16 in the simulation, whose
//     rounding is 2^-9 relative, far below a 4-bit step);
//   - the newest, incomplete group stays in full precision (bf16 here):
//     KIVI's residual. The caller decides when a group is complete.
#pragma once

#include <cstddef>
#include <cstdint>

#include "kernels/kv_layout.h"

namespace kvfork {

// Dims per V group along head_dim (as q4's groups).
inline constexpr int kKiviValueGroup = 32;

// Quantizes and dequantizes x[0], x[stride], ..., x[(n - 1) * stride] in
// place as one asymmetric group of `bits` (1..8) bits (the rule above). A
// group whose values are all equal comes back as f16(that value); NaN
// inputs are skipped by min/max and come back as the zero point.
void KiviRoundTripGroup(float* x, int n, ptrdiff_t stride, int bits);

// K per channel: keys [tokens][head_dim] (row-major), each column one group.
void KiviRoundTripKeys(float* keys, int tokens, int head_dim, int bits);

// V per token: values [tokens][head_dim], each row in groups of
// kKiviValueGroup dims (head_dim a multiple of it).
void KiviRoundTripValues(float* values, int tokens, int head_dim, int bits);

// How K is grouped: KIVI's per channel, or per token as V (an ablation
// that isolates what the per-channel layout buys, everything else equal).
enum class KiviKeyAxis { kPerChannel, kPerToken };

// Rewrites positions [first_pos, first_pos + tokens) of every layer and KV
// head of a bf16 `layout` (blocks[pos / block_size] holds pos) with their
// KIVI round trip: K per channel over those tokens (or per token, by
// key_axis), V per token. The positions may span several blocks.
// Deterministic: the same input bits give the same output bits. head_dim
// must be a multiple of kKiviValueGroup.
void KiviRoundTripBf16Group(const KvLayout& layout, uint8_t* const* blocks, int64_t first_pos,
                            int tokens, int bits, KiviKeyAxis key_axis = KiviKeyAxis::kPerChannel);

}  // namespace kvfork
