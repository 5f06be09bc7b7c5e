// Bounded cache of pre-tokens BPE split into several tokens ("ĠHuggingFace"
// -> 3 ids), so a word that recurs skips the merge loop. Pieces that are one
// whole token never come here (BpeModel answers those from the vocabulary).
//
// A fixed array of kEntries direct-mapped entries with the key and ids stored
// inline: no allocation after construction, a collision simply overwrites
// (frequent pieces come back quickly). Pieces longer than kMaxKeyBytes or
// with more than kMaxIds ids are not cached.
//
// Thread safety: Lookup and Insert may run on many threads at once; entries
// are guarded by kStripes striped mutexes, held for a copy of at most ~120
// bytes. Memory: kEntries * 120 bytes (~1 MiB) per model.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <mutex>
#include <span>
#include <string_view>
#include <vector>

namespace kvfork {

class PieceCache {
 public:
  static constexpr size_t kEntries = 8192;  // power of two
  static constexpr size_t kStripes = 64;
  static constexpr size_t kMaxKeyBytes = 46;
  static constexpr size_t kMaxIds = 16;

  PieceCache();

  static bool Cacheable(std::string_view piece) { return piece.size() <= kMaxKeyBytes; }
  // Appends the cached ids of piece and returns true, or returns false.
  // hash is HashBytes(piece).
  bool Lookup(std::string_view piece, uint64_t hash, std::vector<int32_t>* ids) const;
  void Insert(std::string_view piece, uint64_t hash, std::span<const int32_t> ids);

 private:
  struct Entry {
    uint64_t hash = 0;
    uint8_t key_bytes = 0;
    uint8_t num_ids = 0;  // 0: empty
    char key[kMaxKeyBytes];
    int32_t ids[kMaxIds];
  };
  static_assert(sizeof(Entry) == 120);

  std::unique_ptr<Entry[]> entries_;  // [kEntries]
  mutable std::array<std::mutex, kStripes> stripes_;
};

}  // namespace kvfork
