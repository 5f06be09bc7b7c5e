#include "kv/block_hash.h"

#include <algorithm>

namespace kvfork {

uint64_t BlockHashMix(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

uint64_t SaltKeyOf(std::string_view salt) {
  if (salt.empty()) return 0;
  // Eight bytes a step, little-endian whatever the host, seeded with the
  // length (so "a" and "a\0" differ).
  uint64_t h = BlockHashMix(0x5a175a17ull ^ salt.size());
  for (size_t i = 0; i < salt.size(); i += 8) {
    uint64_t chunk = 0;
    const size_t n = std::min<size_t>(8, salt.size() - i);
    for (size_t b = 0; b < n; ++b)
      chunk |= static_cast<uint64_t>(static_cast<unsigned char>(salt[i + b])) << (8 * b);
    h = BlockHashMix(h ^ chunk);
  }
  return h == 0 ? 1 : h;
}

uint64_t RootBlockHashSeed(uint64_t salt_key) { return BlockHashMix(0x5a17ull ^ salt_key); }

uint64_t ChainBlockHash(uint64_t parent_hash, std::span<const int32_t> tokens) {
  uint64_t h = parent_hash;
  for (int32_t t : tokens) h = BlockHashMix(h ^ static_cast<uint32_t>(t));
  return h;
}

}  // namespace kvfork
