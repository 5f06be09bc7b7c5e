// The random text of tools/tokenizer/corpus.mjs, rebuilt bit for bit from its
// seed (mulberry32 over the same weighted code point ranges), and the FNV-1a
// hash make_goldens.mjs records per chunk.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "tokenizer/utf8.h"

namespace kvfork::testing {

class Mulberry32 {
 public:
  explicit Mulberry32(uint32_t seed) : a_(seed) {}
  uint32_t Next() {
    a_ += 0x6d2b79f5u;
    uint32_t t = a_;
    t = (t ^ (t >> 15)) * (t | 1u);
    t ^= t + (t ^ (t >> 7)) * (t | 61u);
    return t ^ (t >> 14);
  }

 private:
  uint32_t a_;
};

struct CodepointRange {
  uint32_t lo, hi, weight;
};
// corpus.mjs RANDOM_RANGES.
inline const std::vector<CodepointRange> kRandomRanges = {
    {0x20, 0x7e, 60},  {0x0a, 0x0a, 4},     {0x09, 0x09, 2},   {0x20, 0x20, 14},
    {0xa1, 0xff, 4},   {0x400, 0x44f, 4},   {0x4e00, 0x4fff, 6}, {0x600, 0x64a, 2},
    {0x1f600, 0x1f64f, 2}, {0x30, 0x39, 2},
};

// corpus.mjs randomText(seed, bytes).
inline std::string RandomText(uint32_t seed, size_t bytes) {
  Mulberry32 rng(seed);
  uint32_t total = 0;
  for (const auto& r : kRandomRanges) total += r.weight;
  std::string out;
  while (out.size() < bytes) {
    uint32_t pick = rng.Next() % total;
    size_t r = 0;
    while (pick >= kRandomRanges[r].weight) pick -= kRandomRanges[r++].weight;
    const auto& range = kRandomRanges[r];
    utf8::AppendCodepoint(range.lo + rng.Next() % (range.hi - range.lo + 1), &out);
  }
  return out;
}

inline uint32_t HashIds(const std::vector<int32_t>& ids) {
  uint32_t h = 0x811c9dc5u;
  for (int32_t id : ids) {
    const auto u = static_cast<uint32_t>(id);
    for (int k = 0; k < 4; ++k) {
      h ^= (u >> (8 * k)) & 0xff;
      h *= 0x01000193u;
    }
  }
  return h;
}

}  // namespace kvfork::testing
