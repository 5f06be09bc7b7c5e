#include "tokenizer/merge_table.h"

#include "core/status.h"

namespace kvfork {

void MergeTable::Reserve(size_t merges) {
  size_t capacity = 16;
  while (capacity * 3 < merges * 4) capacity <<= 1;
  if (capacity > slots_.size()) Rehash(capacity);
  merged_by_rank_.reserve(merges);
}

void MergeTable::Rehash(size_t capacity) {
  std::vector<uint64_t> old = std::move(slots_);
  slots_.assign(capacity, kEmpty);
  mask_ = capacity - 1;
  for (uint64_t s : old) {
    if (s == kEmpty) continue;
    uint64_t i = Hash(s >> kRankBits) & mask_;
    while (slots_[i] != kEmpty) i = (i + 1) & mask_;
    slots_[i] = s;
  }
}

void MergeTable::Insert(int32_t a, int32_t b, int32_t rank, int32_t merged) {
  KVFORK_CHECK(a >= 0 && a <= kMaxId && b >= 0 && b <= kMaxId);
  KVFORK_CHECK(rank >= 0 && rank <= kMaxRank);
  if (static_cast<size_t>(rank) >= merged_by_rank_.size())
    merged_by_rank_.resize(static_cast<size_t>(rank) + 1, -1);
  merged_by_rank_[static_cast<size_t>(rank)] = merged;
  if ((count_ + 1) * 4 > slots_.size() * 3) Rehash(slots_.size() * 2);
  const uint64_t pair = Pair(a, b);
  for (uint64_t i = Hash(pair) & mask_;; i = (i + 1) & mask_) {
    if (slots_[i] == kEmpty) {
      slots_[i] = (pair << kRankBits) | static_cast<uint64_t>(rank);
      ++count_;
      return;
    }
    if ((slots_[i] >> kRankBits) == pair) return;
  }
}

}  // namespace kvfork
