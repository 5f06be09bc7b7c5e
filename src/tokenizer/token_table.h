// Raw token bytes <-> id for a BPE vocabulary, built for the encode loop:
// every token's bytes live in one arena, and lookups go through an
// open-addressing table (linear probing, 16-byte slots carrying a 32-bit tag
// of the hash, so a miss rarely touches the arena). A std::unordered_map of
// std::string spends a node, a string and two or three cache misses on each
// of ~150k tokens; this is one array probe for most lookups.
//
// Thread safety: immutable after the last Insert; Find/Bytes may run on many
// threads at once. Memory: 16 bytes per slot, at most 3/4 of them used (a
// 150k vocabulary fits 2^18 slots, 4 MiB), plus the bytes.
#pragma once

#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>
#include <vector>

namespace kvfork {

// 64-bit hash of a short byte string: 8-byte words folded by multiply and
// xor-shift, then a final avalanche so both the low bits (the slot) and the
// high bits (the tag) are well mixed.
inline uint64_t HashBytes(std::string_view s) {
  const char* p = s.data();
  size_t n = s.size();
  uint64_t h = 0x9E3779B97F4A7C15ull ^ (static_cast<uint64_t>(n) * 0xFF51AFD7ED558CCDull);
  while (n >= 8) {
    uint64_t w;
    std::memcpy(&w, p, 8);
    h = (h ^ w) * 0xBF58476D1CE4E5B9ull;
    h ^= h >> 31;
    p += 8;
    n -= 8;
  }
  if (n > 0) {
    uint64_t w = 0;
    std::memcpy(&w, p, n);
    h = (h ^ w) * 0x94D049BB133111EBull;
    h ^= h >> 29;
  }
  h ^= h >> 32;
  h *= 0xD6E8FEB86659FD93ull;
  h ^= h >> 32;
  return h;
}

class TokenTable {
 public:
  // Sizes the table for `tokens` entries of `bytes` bytes in all (a hint).
  void Reserve(size_t tokens, size_t bytes);
  // Maps bytes to id (id >= 0). Returns the id bytes mapped to before (that
  // id then has no bytes), or -1 if bytes is new.
  int32_t Insert(std::string_view bytes, int32_t id) { return Insert(bytes, HashBytes(bytes), id); }
  // The same with hash = HashBytes(bytes).
  int32_t Insert(std::string_view bytes, uint64_t hash, int32_t id);
  // Id of bytes, or -1. hash must be HashBytes(bytes).
  int32_t Find(std::string_view bytes, uint64_t hash) const;
  int32_t Find(std::string_view bytes) const { return Find(bytes, HashBytes(bytes)); }
  // Brings the slot Find(…, hash) starts at into the cache.
  void Prefetch(uint64_t hash) const {
    if (!slots_.empty()) __builtin_prefetch(&slots_[hash & (slots_.size() - 1)]);
  }
  // Bytes of id; empty beyond the largest id or for an id no token has.
  std::string_view Bytes(int32_t id) const {
    if (id < 0 || static_cast<size_t>(id) >= by_id_.size()) return {};
    const Span& s = by_id_[static_cast<size_t>(id)];
    return std::string_view(arena_.data() + s.offset, s.length);
  }
  // Largest id + 1.
  size_t id_limit() const { return by_id_.size(); }
  size_t size() const { return count_; }

 private:
  struct Slot {
    uint32_t tag = 0;  // high half of the hash
    int32_t id = -1;   // -1: empty
    uint32_t offset = 0;
    uint32_t length = 0;
  };
  struct Span {
    uint32_t offset = 0;
    uint32_t length = 0;
  };
  void Rehash(size_t capacity);
  size_t Probe(std::string_view bytes, uint64_t hash) const;  // slot of bytes or empty slot

  std::string arena_;        // every token's bytes, back to back
  std::vector<Span> by_id_;  // [id_limit()]
  std::vector<Slot> slots_;  // power of two, at most 3/4 full
  size_t count_ = 0;
};

}  // namespace kvfork
