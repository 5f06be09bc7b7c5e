// The ranked merges of a BPE model: (left id, right id) -> rank, and rank ->
// merged id. The merge loop looks a pair up for every symbol boundary, mostly
// missing the CPU caches, so the table is packed: one 8-byte slot holds the
// pair and its rank (20 + 20 + 24 bits), open addressing with linear probing,
// at most 3/4 full. 150k merges fit 2^18 slots (2 MiB); the merged id is read
// from a separate array only when a merge is applied.
//
// Limits (checked by Insert's caller): ids < 2^20 - 1, ranks < 2^24.
// Thread safety: immutable after the last Insert. Find may run on many
// threads at once.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace kvfork {

class MergeTable {
 public:
  static constexpr int32_t kMaxId = (1 << 20) - 2;  // all-ones marks an empty slot
  static constexpr int32_t kMaxRank = (1 << 24) - 1;

  void Reserve(size_t merges);
  // Adds pair (a, b) -> merged at rank. A pair given again keeps its first
  // (lowest) rank, as Hugging Face's map does. Requires ids <= kMaxId and
  // rank <= kMaxRank, ranks given in increasing order.
  void Insert(int32_t a, int32_t b, int32_t rank, int32_t merged);

  // Slot address of pair (a, b), to prefetch before Find.
  const void* SlotAddress(int32_t a, int32_t b) const { return &slots_[Hash(Pair(a, b)) & mask_]; }
  // Rank of pair (a, b), or -1 if the pair does not merge.
  int32_t Find(int32_t a, int32_t b) const {
    const uint64_t pair = Pair(a, b);
    for (uint64_t i = Hash(pair) & mask_;; i = (i + 1) & mask_) {
      const uint64_t s = slots_[i];
      if ((s >> kRankBits) == pair) return static_cast<int32_t>(s & kMaxRank);
      if (s == kEmpty) return -1;
    }
  }
  int32_t Merged(int32_t rank) const { return merged_by_rank_[static_cast<size_t>(rank)]; }
  const void* MergedAddress(int32_t rank) const {
    return &merged_by_rank_[static_cast<size_t>(rank)];
  }

 private:
  static constexpr int kRankBits = 24;
  static constexpr uint64_t kEmpty = ~uint64_t{0};
  static uint64_t Pair(int32_t a, int32_t b) {
    return (static_cast<uint64_t>(a) << 20) | static_cast<uint64_t>(b);
  }
  static uint64_t Hash(uint64_t k) {
    k ^= k >> 29;
    k *= 0xBF58476D1CE4E5B9ull;
    k ^= k >> 32;
    return k;
  }
  void Rehash(size_t capacity);

  std::vector<uint64_t> slots_ = std::vector<uint64_t>(1, kEmpty);  // power of two
  uint64_t mask_ = 0;
  size_t count_ = 0;
  std::vector<int32_t> merged_by_rank_;  // [rank]
};

}  // namespace kvfork
