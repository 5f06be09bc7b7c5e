#include "tokenizer/token_table.h"

#include <limits>

#include "core/status.h"

namespace kvfork {
namespace {

// Tokens are a few bytes long: an inline loop beats a call to memcmp.
bool SameBytes(const char* a, const char* b, size_t n) {
  for (size_t i = 0; i < n; ++i)
    if (a[i] != b[i]) return false;
  return true;
}

}  // namespace

void TokenTable::Reserve(size_t tokens, size_t bytes) {
  arena_.reserve(bytes);
  size_t capacity = 16;
  while (capacity * 3 < tokens * 4) capacity <<= 1;
  if (capacity > slots_.size()) Rehash(capacity);
}

void TokenTable::Rehash(size_t capacity) {
  std::vector<Slot> old = std::move(slots_);
  slots_.assign(capacity, Slot{});
  const size_t mask = capacity - 1;
  for (const Slot& s : old) {
    if (s.id < 0) continue;
    const uint64_t h = HashBytes(std::string_view(arena_.data() + s.offset, s.length));
    size_t i = h & mask;
    while (slots_[i].id >= 0) i = (i + 1) & mask;
    slots_[i] = s;
  }
}

size_t TokenTable::Probe(std::string_view bytes, uint64_t hash) const {
  const size_t mask = slots_.size() - 1;
  const auto tag = static_cast<uint32_t>(hash >> 32);
  for (size_t i = hash & mask;; i = (i + 1) & mask) {
    const Slot& s = slots_[i];
    if (s.id < 0) return i;
    if (s.tag == tag && s.length == bytes.size() &&
        SameBytes(arena_.data() + s.offset, bytes.data(), bytes.size()))
      return i;
  }
}

int32_t TokenTable::Find(std::string_view bytes, uint64_t hash) const {
  if (slots_.empty()) return -1;
  return slots_[Probe(bytes, hash)].id;
}

int32_t TokenTable::Insert(std::string_view bytes, uint64_t hash, int32_t id) {
  KVFORK_CHECK(id >= 0);
  if ((count_ + 1) * 4 > slots_.size() * 3) Rehash(slots_.empty() ? 16 : slots_.size() * 2);
  Slot& slot = slots_[Probe(bytes, hash)];
  if (static_cast<size_t>(id) >= by_id_.size()) by_id_.resize(static_cast<size_t>(id) + 1);
  if (slot.id >= 0) {  // re-mapped: the old id loses its bytes
    const int32_t previous = slot.id;
    by_id_[static_cast<size_t>(previous)] = Span{};
    slot.id = id;
    by_id_[static_cast<size_t>(id)] = Span{slot.offset, slot.length};
    return previous;
  }
  KVFORK_CHECK(arena_.size() + bytes.size() <= std::numeric_limits<uint32_t>::max());
  slot.tag = static_cast<uint32_t>(hash >> 32);
  slot.id = id;
  slot.offset = static_cast<uint32_t>(arena_.size());
  slot.length = static_cast<uint32_t>(bytes.size());
  arena_.append(bytes);
  by_id_[static_cast<size_t>(id)] = Span{slot.offset, slot.length};
  ++count_;
  return -1;
}

}  // namespace kvfork
