#include "tokenizer/piece_cache.h"

#include <cstring>

namespace kvfork {

PieceCache::PieceCache() : entries_(new Entry[kEntries]) {}

bool PieceCache::Lookup(std::string_view piece, uint64_t hash, std::vector<int32_t>* ids) const {
  const size_t index = hash & (kEntries - 1);
  const Entry& e = entries_[index];
  std::lock_guard<std::mutex> lock(stripes_[index % kStripes]);
  if (e.num_ids == 0 || e.hash != hash || e.key_bytes != piece.size() ||
      std::memcmp(e.key, piece.data(), piece.size()) != 0)
    return false;
  ids->insert(ids->end(), e.ids, e.ids + e.num_ids);
  return true;
}

void PieceCache::Insert(std::string_view piece, uint64_t hash, std::span<const int32_t> ids) {
  if (piece.size() > kMaxKeyBytes || ids.empty() || ids.size() > kMaxIds) return;
  const size_t index = hash & (kEntries - 1);
  Entry& e = entries_[index];
  std::lock_guard<std::mutex> lock(stripes_[index % kStripes]);
  e.hash = hash;
  e.key_bytes = static_cast<uint8_t>(piece.size());
  e.num_ids = static_cast<uint8_t>(ids.size());
  std::memcpy(e.key, piece.data(), piece.size());
  std::memcpy(e.ids, ids.data(), ids.size() * sizeof(int32_t));
}

}  // namespace kvfork
