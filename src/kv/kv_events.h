// What the prefix index tells the outside world about its blocks: the events
// that routers such as llm-d consume (vLLM's KV events, see
// kv_event_codec.h for the wire format and kv_event_publisher.h for the
// transport).
//
// Only full blocks are announced: vLLM and llm-d key the cache by full
// blocks of block_size tokens, and a partial tail block (a finished
// sequence's last one) is reused here only by copying, never in place.
//
// Thread affinity: a sink's Emit and Flush are called on the engine thread.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

namespace kvfork {

// Where an announced block lives: the RAM pool or the disk tier. On the wire
// this is vLLM's `medium` string; llm-d lowercases it into its device tier
// ("cpu", "disk") and weights each tier (kvCacheBackendConfigs).
enum class KvMedium { kCpu, kDisk };

inline const char* KvMediumName(KvMedium medium) {
  return medium == KvMedium::kDisk ? "DISK" : "CPU";
}

struct KvEvent {
  enum class Kind {
    kBlockStored,       // a full block is now held on `medium`
    kBlockRemoved,      // a full block is no longer held on `medium`
    kAllBlocksCleared,  // the replica holds no block on any medium any more
  };
  Kind kind = Kind::kBlockStored;
  uint64_t block_hash = 0;                 // stored / removed: block_hash.h
  std::optional<uint64_t> parent_hash;     // stored: none for a first block
  std::vector<int32_t> token_ids;          // stored: the block's block_size tokens
  KvMedium medium = KvMedium::kCpu;        // stored / removed
};

// The full blocks a KV-event subscriber should know of, per medium (sorted
// hashes): the prefix index's (CPU) and the disk tier's (DISK).
struct KvBlockHashSets {
  std::vector<uint64_t> cpu;
  std::vector<uint64_t> disk;
};

// A publisher's counters, cumulative since it started.
struct KvEventCounters {
  int64_t batches_published = 0;
  int64_t events_published = 0;
  int64_t events_dropped = 0;  // in batches a full queue refused
  int64_t replay_requests = 0;
};

// Receives the index's events in the order they happen.
class KvEventSink {
 public:
  virtual ~KvEventSink() = default;
  // One event; must not block (a sink buffers it).
  virtual void Emit(KvEvent event) = 0;
  // Marks the end of an engine step: the events since the last Flush form
  // one batch. Must not block either.
  virtual void Flush() = 0;
};

}  // namespace kvfork
