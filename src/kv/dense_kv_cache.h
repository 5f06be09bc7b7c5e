// The dense backend, the llama.cpp-slot-like baseline: the pool is cut into
// slots of ceil(max_context / block_size) contiguous blocks; each running
// sequence owns one slot for its whole context. A released sequence stays in
// its slot as a snapshot (LRU, same memory budget); a new prompt copies the
// longest token prefix it shares with a snapshot of the same salt into its
// own slot (or, with no other slot left, takes the snapshot's slot over in
// place). The slot's block table is the addresses of its consecutive blocks,
// so the model reads it exactly like a paged table.
//
// Accounting: a slot's blocks count as used (running) or cached (snapshot)
// only up to its reserved / held positions, because pages are touched lazily
// and untouched ones cost no memory.
//
// Thread affinity: the engine thread. Match is O(snapshots * prompt).
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "kv/block_pool.h"
#include "kv/kv_cache.h"

namespace kvfork {

class DenseKvCache final : public KvCache {
 public:
  // options.max_context (> 0) sets the slot size; InvalidArgument when the
  // pool cannot hold one slot.
  static StatusOr<std::unique_ptr<DenseKvCache>> Create(const KvCacheOptions& options);

  KvBackend backend() const override { return KvBackend::kDense; }
  const KvLayout& layout() const override { return pool_->layout(); }
  int64_t max_sequence_tokens() const override { return slot_blocks_ * layout().block_size; }
  int64_t num_slots() const { return static_cast<int64_t>(slots_.size()); }

  PrefixMatch Match(std::span<const int32_t> prompt, std::string_view salt) const override;
  StatusOr<SeqId> Admit(std::span<const int32_t> prompt, std::string_view salt,
                        int64_t reserve_tokens, PrefixMatch* match) override;
  Status Reserve(SeqId seq, int64_t num_positions) override;
  int64_t BlocksNeeded(SeqId seq, int64_t num_positions) const override;
  int64_t AvailableBlocks() const override;
  Status Append(SeqId seq, std::span<const int32_t> tokens) override;
  StatusOr<SeqId> Fork(SeqId seq) override;
  void Release(SeqId seq) override;

  uint8_t* const* BlockTable(SeqId seq) const override;
  int64_t BlockTableSize(SeqId /*seq*/) const override { return slot_blocks_; }
  int64_t NumTokens(SeqId seq) const override;
  int64_t NumReusedTokens(SeqId seq) const override;
  std::span<const int32_t> Tokens(SeqId seq) const override;

  KvCacheStats Stats() const override;
  void ResetPrefixCache() override;
  // No block index, so nothing to announce: KV events need the paged backend.
  Status SetEventSink(KvEventSink* sink) override;
  std::vector<uint64_t> BlockHashes() const override { return {}; }
  Status Check() const override;

 private:
  enum class SlotState { kFree, kRunning, kSnapshot };
  struct Slot {
    SlotState state = SlotState::kFree;
    SeqId seq = 0;                // kRunning: its sequence
    std::vector<int32_t> tokens;  // tokens with K/V written
    std::string salt;
    int64_t reserved = 0;  // kRunning: positions reserved
    int64_t reused = 0;
    uint64_t tick = 0;            // last use, for snapshot LRU
    std::vector<uint8_t*> table;  // [slot_blocks] consecutive block addresses
  };

  DenseKvCache(const KvCacheOptions& options, std::unique_ptr<BlockPool> pool, int64_t slot_blocks,
               int64_t num_slots);
  // Best snapshot for prompt: {slot, tokens} or {-1, 0}.
  std::pair<int64_t, int64_t> BestSnapshot(std::span<const int32_t> prompt,
                                           std::string_view salt) const;
  // A free slot, else the LRU snapshot other than keep (evicted), else -1.
  int64_t TakeSlot(int64_t keep);
  void CopyPrefix(const Slot& src, Slot* dst, int64_t n);
  int64_t SlotOf(SeqId seq) const;
  int64_t BlocksFor(int64_t positions) const;
  void UpdatePeaks();

  KvCacheOptions options_;
  std::unique_ptr<BlockPool> pool_;  // memory only; slots own fixed block ranges
  int64_t slot_blocks_;
  std::vector<Slot> slots_;
  std::unordered_map<SeqId, int64_t> seq_slot_;
  SeqId next_seq_ = 1;
  uint64_t clock_ = 0;
  KvCacheStats stats_;
};

}  // namespace kvfork
