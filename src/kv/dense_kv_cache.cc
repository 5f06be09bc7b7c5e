#include "kv/dense_kv_cache.h"

#include <algorithm>
#include <string>

namespace kvfork {

StatusOr<std::unique_ptr<DenseKvCache>> DenseKvCache::Create(const KvCacheOptions& options) {
  KVFORK_RETURN_IF_ERROR(ValidateKvLayout(options.layout));
  if (options.max_context <= 0) {
    return InvalidArgumentError("dense KV cache: max_context must be > 0, got " +
                                std::to_string(options.max_context));
  }
  KVFORK_ASSIGN_OR_RETURN(int64_t num_blocks, ResolveNumBlocks(options));
  const int64_t bs = options.layout.block_size;
  const int64_t slot_blocks = (options.max_context + bs - 1) / bs;
  const int64_t num_slots = num_blocks / slot_blocks;
  if (num_slots <= 0) {
    return InvalidArgumentError("dense KV cache: a " + std::to_string(options.max_context) +
                                "-token slot needs " + std::to_string(slot_blocks) +
                                " blocks but the pool has " + std::to_string(num_blocks) +
                                " (raise --kv-cache-mib or --kv-blocks)");
  }
  KVFORK_ASSIGN_OR_RETURN(std::unique_ptr<BlockPool> pool,
                          BlockPool::Create(options.layout, num_slots * slot_blocks));
  return std::unique_ptr<DenseKvCache>(
      new DenseKvCache(options, std::move(pool), slot_blocks, num_slots));
}

DenseKvCache::DenseKvCache(const KvCacheOptions& options, std::unique_ptr<BlockPool> pool,
                           int64_t slot_blocks, int64_t num_slots)
    : options_(options), pool_(std::move(pool)), slot_blocks_(slot_blocks), slots_(num_slots) {
  for (int64_t s = 0; s < num_slots; ++s) {
    for (int64_t b = 0; b < slot_blocks; ++b)
      slots_[s].table.push_back(pool_->Data(static_cast<BlockId>(s * slot_blocks + b)));
  }
  stats_.blocks_total = pool_->num_blocks();
  stats_.block_bytes = static_cast<int64_t>(pool_->block_bytes());
}

int64_t DenseKvCache::BlocksFor(int64_t positions) const {
  const int64_t bs = layout().block_size;
  return (positions + bs - 1) / bs;
}

int64_t DenseKvCache::SlotOf(SeqId seq) const {
  auto it = seq_slot_.find(seq);
  KVFORK_CHECK_MSG(it != seq_slot_.end(), "unknown KV sequence " + std::to_string(seq));
  return it->second;
}

std::pair<int64_t, int64_t> DenseKvCache::BestSnapshot(std::span<const int32_t> prompt,
                                                       std::string_view salt) const {
  std::pair<int64_t, int64_t> best{-1, 0};
  if (!options_.prefix_cache) return best;
  // The last prompt token is always recomputed so its logits exist.
  const int64_t limit = static_cast<int64_t>(prompt.size()) - 1;
  for (int64_t s = 0; s < num_slots(); ++s) {
    const Slot& slot = slots_[s];
    if (slot.state != SlotState::kSnapshot || slot.salt != salt) continue;
    int64_t n = std::min<int64_t>(limit, static_cast<int64_t>(slot.tokens.size()));
    int64_t k = 0;
    while (k < n && slot.tokens[k] == prompt[k]) ++k;
    if (k > best.second) best = {s, k};
  }
  return best;
}

PrefixMatch DenseKvCache::Match(std::span<const int32_t> prompt, std::string_view salt) const {
  PrefixMatch m;
  m.num_reused_tokens = BestSnapshot(prompt, salt).second;
  m.num_tail_tokens = m.num_reused_tokens;  // all of it is copied
  return m;
}

int64_t DenseKvCache::TakeSlot(int64_t keep) {
  int64_t victim = -1;
  for (int64_t s = 0; s < num_slots(); ++s) {
    if (slots_[s].state == SlotState::kFree) return s;
    if (slots_[s].state == SlotState::kSnapshot && s != keep &&
        (victim < 0 || slots_[s].tick < slots_[victim].tick)) {
      victim = s;
    }
  }
  if (victim >= 0) {
    stats_.evictions += BlocksFor(static_cast<int64_t>(slots_[victim].tokens.size()));
    slots_[victim].state = SlotState::kFree;
    slots_[victim].tokens.clear();
  }
  return victim;
}

void DenseKvCache::CopyPrefix(const Slot& src, Slot* dst, int64_t n) {
  const int64_t bs = layout().block_size;
  for (int64_t b = 0; b * bs < n; ++b) {
    CopyBlockTokens(layout(), src.table[b], dst->table[b], 0,
                    static_cast<int>(std::min(bs, n - b * bs)));
  }
}

StatusOr<SeqId> DenseKvCache::Admit(std::span<const int32_t> prompt, std::string_view salt,
                                    int64_t reserve_tokens, PrefixMatch* match) {
  if (prompt.empty()) return InvalidArgumentError("KV admit: the prompt is empty");
  auto [src, reused] = BestSnapshot(prompt, salt);
  const int64_t positions = std::max(reserve_tokens, reused);
  if (positions > max_sequence_tokens()) {
    return OutOfRangeError("KV admit: " + std::to_string(positions) +
                           " positions exceed the dense slot of " +
                           std::to_string(max_sequence_tokens()) + " tokens");
  }
  int64_t slot = TakeSlot(src);
  if (slot < 0 && src >= 0) {
    slot = src;  // the only slot left is the source: continue it in place
  } else if (slot < 0) {
    return ResourceExhaustedError("dense KV cache: all " + std::to_string(num_slots()) +
                                  " slots are running");
  }
  Slot& s = slots_[slot];
  if (slot != src && reused > 0) {
    CopyPrefix(slots_[src], &s, reused);
    slots_[src].tick = ++clock_;
  }
  s.state = SlotState::kRunning;
  s.seq = next_seq_++;
  s.tokens.assign(prompt.begin(), prompt.begin() + reused);
  s.salt = std::string(salt);
  s.reserved = positions;
  s.reused = reused;
  seq_slot_[s.seq] = slot;
  stats_.queries_tokens += static_cast<int64_t>(prompt.size());
  stats_.hits_tokens += reused;
  stats_.tail_copied_tokens += reused;
  if (match != nullptr) {
    match->num_reused_tokens = reused;
    match->num_shared_blocks = 0;
    match->num_tail_tokens = reused;
  }
  UpdatePeaks();
  return s.seq;
}

Status DenseKvCache::Reserve(SeqId seq, int64_t num_positions) {
  Slot& s = slots_[SlotOf(seq)];
  if (num_positions > max_sequence_tokens()) {
    return OutOfRangeError("KV reserve: " + std::to_string(num_positions) +
                           " positions exceed the dense slot of " +
                           std::to_string(max_sequence_tokens()) + " tokens");
  }
  s.reserved = std::max(s.reserved, num_positions);
  UpdatePeaks();
  return OkStatus();
}

int64_t DenseKvCache::BlocksNeeded(SeqId seq, int64_t num_positions) const {
  const Slot& s = slots_[SlotOf(seq)];
  return std::max<int64_t>(0, BlocksFor(num_positions) - BlocksFor(s.reserved));
}

int64_t DenseKvCache::AvailableBlocks() const {
  int64_t n = 0;
  for (const Slot& s : slots_) {
    if (s.state != SlotState::kRunning) n += slot_blocks_;
  }
  return n;
}

Status DenseKvCache::Append(SeqId seq, std::span<const int32_t> tokens) {
  Slot& s = slots_[SlotOf(seq)];
  const int64_t after = static_cast<int64_t>(s.tokens.size() + tokens.size());
  if (after > s.reserved) {
    return FailedPreconditionError("KV append: sequence " + std::to_string(seq) + " would hold " +
                                   std::to_string(after) + " tokens but only " +
                                   std::to_string(s.reserved) + " positions are reserved");
  }
  s.tokens.insert(s.tokens.end(), tokens.begin(), tokens.end());
  return OkStatus();
}

StatusOr<SeqId> DenseKvCache::Fork(SeqId seq) {
  const int64_t from = SlotOf(seq);
  int64_t slot = TakeSlot(-1);
  if (slot < 0) {
    return ResourceExhaustedError("dense KV cache: no slot to fork sequence " +
                                  std::to_string(seq) + " into");
  }
  const Slot& src = slots_[from];
  Slot& d = slots_[slot];
  CopyPrefix(src, &d, static_cast<int64_t>(src.tokens.size()));
  d.state = SlotState::kRunning;
  d.seq = next_seq_++;
  d.tokens = src.tokens;
  d.salt = src.salt;
  d.reserved = src.reserved;
  d.reused = static_cast<int64_t>(src.tokens.size());
  seq_slot_[d.seq] = slot;
  UpdatePeaks();
  return d.seq;
}

void DenseKvCache::Release(SeqId seq) {
  const int64_t slot = SlotOf(seq);
  seq_slot_.erase(seq);
  Slot& s = slots_[slot];
  if (options_.prefix_cache && !s.tokens.empty()) {
    s.state = SlotState::kSnapshot;
    s.tick = ++clock_;
  } else {
    s.state = SlotState::kFree;
    s.tokens.clear();
  }
  s.reserved = 0;
  UpdatePeaks();
}

uint8_t* const* DenseKvCache::BlockTable(SeqId seq) const {
  return slots_[SlotOf(seq)].table.data();
}
int64_t DenseKvCache::NumTokens(SeqId seq) const {
  return static_cast<int64_t>(slots_[SlotOf(seq)].tokens.size());
}
int64_t DenseKvCache::NumReusedTokens(SeqId seq) const { return slots_[SlotOf(seq)].reused; }
std::span<const int32_t> DenseKvCache::Tokens(SeqId seq) const {
  return slots_[SlotOf(seq)].tokens;
}

KvCacheStats DenseKvCache::Stats() const {
  KvCacheStats st = stats_;
  st.blocks_used = 0;
  st.blocks_cached = 0;
  for (const Slot& s : slots_) {
    if (s.state == SlotState::kRunning) st.blocks_used += BlocksFor(s.reserved);
    if (s.state == SlotState::kSnapshot)
      st.blocks_cached += BlocksFor(static_cast<int64_t>(s.tokens.size()));
  }
  st.blocks_free = st.blocks_total - st.blocks_used - st.blocks_cached;
  st.num_sequences = static_cast<int64_t>(seq_slot_.size());
  return st;
}

void DenseKvCache::UpdatePeaks() {
  KvCacheStats st = Stats();
  stats_.peak_used_blocks = std::max(stats_.peak_used_blocks, st.blocks_used);
  stats_.peak_resident_blocks =
      std::max(stats_.peak_resident_blocks, st.blocks_used + st.blocks_cached);
}

void DenseKvCache::ResetPrefixCache() {
  for (Slot& s : slots_) {
    if (s.state == SlotState::kSnapshot) {
      s.state = SlotState::kFree;
      s.tokens.clear();
    }
  }
}

Status DenseKvCache::Check() const {
  int64_t running = 0;
  for (int64_t i = 0; i < num_slots(); ++i) {
    const Slot& s = slots_[i];
    auto name = [i] { return "dense slot " + std::to_string(i); };
    if (s.state == SlotState::kRunning) {
      ++running;
      auto it = seq_slot_.find(s.seq);
      if (it == seq_slot_.end() || it->second != i)
        return InternalError(name() + ": running but its sequence does not map to it");
      if (static_cast<int64_t>(s.tokens.size()) > s.reserved || s.reserved > max_sequence_tokens())
        return InternalError(name() + ": tokens beyond reserved positions");
    } else if (s.state == SlotState::kFree && !s.tokens.empty()) {
      return InternalError(name() + ": free but holds tokens");
    } else if (s.state == SlotState::kSnapshot && s.tokens.empty()) {
      return InternalError(name() + ": empty snapshot");
    }
  }
  if (running != static_cast<int64_t>(seq_slot_.size()))
    return InternalError("dense KV cache: sequence map disagrees with running slots");
  return OkStatus();
}

Status DenseKvCache::SetEventSink(KvEventSink* sink) {
  if (sink == nullptr) return OkStatus();
  return FailedPreconditionError(
      "KV events (--kv-events) need the paged KV backend (--kv-backend paged); the dense "
      "backend has no block index to announce");
}

}  // namespace kvfork
