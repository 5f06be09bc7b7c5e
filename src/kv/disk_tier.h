// The disk tier of the prefix cache (issue 25): full KV blocks evicted from
// the pool, and every cached block at a clean shutdown, kept as one file per
// block (disk_block_file.h) under DIR/<fingerprint as 16 hex>/<hash>.kvb, so
// a later request (or the next process on the same DIR) reads them back
// instead of recomputing them.
//
// Writes: Enqueue copies the block into a bounded queue (never blocks; a full
// queue drops the write and counts it) and a writer thread writes
// temp file + fsync + rename, so a reader or a later process sees either
// the whole file or none: kill -9 loses at most the blocks being written.
// WriteNow writes on the caller's thread (clean shutdown).
// Partial blocks (disk_block_file.h): a finished sequence's last block,
// written only at a clean shutdown (WriteNow), named <key>.kvp by
// DiskPartialKey. The tier keeps their parent hashes and tokens in memory
// (from the write, or at start from their headers: one small read per
// partial file) so BestPartial finds, after a chain of full blocks, the
// partial child sharing the most leading tokens with a prompt, as the
// pool's tail copy does. They are never announced as KV events (only full
// blocks are), and count against capacity like any file.
// Reads: Read takes the header and checks it (magic, version, sizes, header
// checksum) and the identity the caller expects (fingerprint, hash, parent,
// tokens), then reads the payload straight into the caller's pool block (no
// bounce buffer) in chunks of kReadChunkBytes, each backed, read and
// checksummed before the next while it sits in L2 (one pass over memory
// instead of three); a file that fails is counted, deleted and reported as
// a miss, so the caller recomputes the block. Never served. Reads run on any thread (disk_loader.h's I/O
// threads); the tier times them (DiskTierStats::read_*) and logs a block's
// average cost when it closes.
// Bounded: LRU (by last write or read; at start by mtime) within
// capacity_bytes; the writer deletes the oldest files when over.
// Start: the index is rebuilt from the directory listing (one readdir and
// one stat per file: O(files)); leftover temp files of dead processes go.
// Change log (for the prefix index, TrackChanges, and for KV events,
// kv_events.h): once TrackChanges is called every full block written or
// lost is logged; once EnableChangeLog is called,
// every block the tier gains (a write completed) or loses (LRU, a corrupt
// or vanished file) is recorded with its identity, and the files found at
// start are announced by the writer thread as it reads their headers (the
// scan itself opens no file). The engine thread takes the log
// (TakeChanges) and turns it into BlockStored / BlockRemoved medium=DISK; a
// callback wakes it when the log grows. A block is logged as removed only
// after it was logged as stored, so the log replays into exactly the set of
// announced blocks.
// Sharing: the subdirectory is per fingerprint, so processes with other
// models or KV formats never touch each other's files; two processes with
// the same fingerprint may share it (renames are atomic, each keeps its own
// index of what it has seen; a file another evicted reads as a miss).
//
// Thread safety: every public method may be called from any thread.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <span>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "core/status.h"
#include "kv/disk_block_file.h"

namespace kvfork {

struct DiskTierOptions {
  std::string dir;              // --kv-disk-dir (created if missing)
  int64_t capacity_bytes = 0;   // --kv-disk-gib * 2^30; > 0
  uint64_t fingerprint = 0;     // DiskFingerprint(...), never 0
  int64_t queue_blocks = 64;    // writes waiting at most; more are dropped
  bool fsync = true;            // fsync each file before its rename
  // Whether Read backs the destination's pages (MADV_POPULATE_WRITE) before
  // each piece it reads into them; on. Off only to measure what it saves
  // (bench/disk/disk_read_profile.cc).
  bool prefault = true;
  // Tests: called at the start of every Read (on the reading thread) with the
  // block's hash, e.g. to sleep like a slow disk. Empty in production.
  std::function<void(uint64_t hash)> read_hook;
};

// Counters, cumulative since Open unless "now".
struct DiskTierStats {
  int64_t blocks = 0;             // now: files in the index
  int64_t bytes = 0;              // now: their sizes
  int64_t hits_blocks = 0;        // reads that returned a valid block
  int64_t misses_blocks = 0;      // reads of a file that was gone
  int64_t bytes_read = 0;
  int64_t bytes_written = 0;
  int64_t blocks_written = 0;
  int64_t writes_dropped = 0;     // queue full
  int64_t write_errors = 0;       // a write failed (disk full, read-only dir)
  int64_t corrupt_blocks = 0;     // failed a check on read; deleted
  int64_t evicted_blocks = 0;     // deleted to stay within capacity
  int64_t scanned_files = 0;      // at Open
  int64_t partial_blocks = 0;     // now: of blocks, partial ones
  // Where the valid reads' time went, wall-clock ns summed over reads (each
  // read runs on one thread; several run at once): open + fstat + the
  // header's read and checks (read_open_ns), the payload's reads into the
  // pool block with the pages backed first (read_io_ns: page-cache copy and
  // page zeroing), the payload checksum (read_check_ns). read_ns is all of
  // it; read_ns / hits_blocks is a block's cost.
  int64_t read_ns = 0;
  int64_t read_open_ns = 0;
  int64_t read_io_ns = 0;
  int64_t read_check_ns = 0;
};

// A block the tier gained (stored: identity from the write or the file's
// header) or lost (removed: hash only). Full blocks only.
struct DiskTierChange {
  bool stored = true;
  // Part of the announced set (EnableChangeLog): a KV event; a change only
  // tracked (TrackChanges) is for the prefix index alone.
  bool announced = false;
  uint64_t hash = 0;
  std::optional<uint64_t> parent_hash;
  std::vector<int32_t> tokens;
};

// One block to write: its identity and a copy of its pool bytes.
struct DiskBlockWrite {
  uint64_t hash = 0;
  std::optional<uint64_t> parent_hash;
  std::vector<int32_t> tokens;
  std::vector<uint8_t> payload;
  // A partial block: hash is DiskPartialKey(parent, tokens), parent_hash set.
  bool partial = false;
};

// A partial block on disk that shares matched leading tokens with a prompt.
struct DiskPartialMatch {
  uint64_t key = 0;             // DiskPartialKey: its name
  std::vector<int32_t> tokens;  // all its token ids (what Read checks)
  int matched = 0;              // leading tokens equal to the prompt's, >= 1
};

class DiskTier {
 public:
  // Creates DIR/<fingerprint>/ if needed, indexes its files, starts the
  // writer. InvalidArgument/FailedPrecondition naming the directory when it
  // cannot be created or listed.
  static StatusOr<std::unique_ptr<DiskTier>> Open(const DiskTierOptions& options);
  // Finishes the queued writes, then stops the writer.
  ~DiskTier();
  DiskTier(const DiskTier&) = delete;
  DiskTier& operator=(const DiskTier&) = delete;

  const std::string& block_dir() const { return block_dir_; }
  // True when a file for hash is indexed (it may still fail its checks).
  bool Contains(uint64_t hash) const;
  // Queues a write unless the queue is full (then counts a drop and returns
  // false) or the block is already on disk or queued. Never blocks on I/O.
  bool Enqueue(DiskBlockWrite block);
  // The same, but the copy is made (by make) only when the write will be
  // queued: a full queue costs the caller no copy of the block's bytes.
  bool Enqueue(uint64_t hash, const std::function<DiskBlockWrite()>& make);
  // Writes on this thread without an fsync per file (clean shutdown: call
  // Sync once after the last); Status of the write. The only way a partial
  // block is written.
  Status WriteNow(const DiskBlockWrite& block);
  // Flushes the block directory's file system (syncfs): what WriteNow wrote
  // is durable after it returns.
  void Sync();
  // Reads the block into dst (payload_bytes bytes) after checking it is the
  // block (hash, parent, tokens, full or partial) of this fingerprint.
  // NotFound when there is no valid file (gone, or corrupt: then it was
  // counted and deleted); dst holds garbage then. A partial block is read by
  // its key, with all its tokens (DiskPartialMatch).
  Status Read(uint64_t hash, std::optional<uint64_t> parent_hash, std::span<const int32_t> tokens,
              uint8_t* dst, size_t payload_bytes, bool partial = false);
  // Every indexed block, the most recently written or read first (at start:
  // newest mtime first, the partial blocks before the full ones), as (hash
  // or key, partial). Cost O(blocks).
  std::vector<std::pair<uint64_t, bool>> NewestFirst() const;
  // A block file's header (identity: parent hash, token ids, partial), read
  // and checked (magic, version, sizes, header checksum, fingerprint, its
  // name) without its payload. NotFound when the file is gone (then
  // forgotten); a file that fails a check is counted, deleted and reported
  // as NotFound, as Read does.
  StatusOr<DiskBlockHeader> ReadIdentity(uint64_t hash, bool partial = false);
  // Among the partial blocks whose parent has parent_hash, the one whose
  // leading tokens match the most of tokens[0, max); none when no partial
  // block matches a token. Cost O(partial children of that parent x block).
  std::optional<DiskPartialMatch> BestPartial(uint64_t parent_hash,
                                              std::span<const int32_t> tokens) const;
  // The payload is read and checksummed in pieces of this size, well under
  // a core's L2 (1-2 MiB where measured), so a piece is still cached when
  // it is checksummed.
  static constexpr size_t kReadChunkBytes = 256 * 1024;

  // Waits until the queue is empty and the writer idle (tests).
  void Drain();
  DiskTierStats Stats() const;
  // The file of a block, or of a partial block's key (tests corrupt them).
  std::string PathOf(uint64_t hash, bool partial = false) const;

  // Starts the change log; the files indexed now are announced in the
  // background (their headers are read by the writer thread; a file whose
  // header fails is dropped as corrupt). wake (may be empty) is called,
  // from any thread and without the tier's lock, after changes are logged;
  // SetWake(nullptr) returns only when no call of the old one runs.
  void EnableChangeLog();
  // Logs every full block written or lost from now on, announced or not
  // (the prefix index's view of the tier; a removal of a block never
  // announced is logged with announced false). The files indexed now are
  // not logged: the caller lists them (NewestFirst). Cheap: one entry a
  // write or loss, taken each engine step.
  void TrackChanges();
  void SetWake(std::function<void()> wake);
  // The changes logged since the last call, in order.
  std::vector<DiskTierChange> TakeChanges();
  // Hashes of every indexed block, sorted (a subscriber's DISK set equals it
  // once the log is taken and no write or announcement is pending).
  std::vector<uint64_t> Hashes() const;

 private:
  struct Entry {
    int64_t bytes = 0;
    uint64_t tick = 0;
    bool announced = false;  // logged as stored (change log on)
    bool partial = false;    // a partial block: also in partials_[parent]
    uint64_t parent = 0;     // a partial block's parent hash
  };
  struct Partial {
    uint64_t key = 0;
    std::vector<int32_t> tokens;
  };
  explicit DiskTier(const DiskTierOptions& options, std::string block_dir);
  Status Scan();
  void WriterLoop();
  Status WriteFile(const DiskBlockWrite& block, bool fsync);
  // Under mu_: index a file written or found (partial: its identity).
  void AddLocked(uint64_t hash, int64_t bytes, uint64_t tick,
                 const DiskBlockHeader* partial = nullptr);
  // Under mu_: makes an indexed block the most recently used.
  void TouchLocked(uint64_t hash);
  void RemoveLocked(uint64_t hash);
  // RemoveLocked for a block the tier loses; logs its removal if announced.
  // Returns whether a change was logged (the caller wakes after unlocking).
  bool ForgetLocked(uint64_t hash);
  // Logs a stored change for an indexed block: announced if the change
  // log is on and it was not yet; tracked if written (not a scanned file's
  // header) and TrackChanges is on. Returns whether it was announced.
  bool AnnounceLocked(uint64_t hash, std::optional<uint64_t> parent_hash,
                      std::vector<int32_t> tokens, bool written);
  // Reads and checks a block file's header (the writer's announcements).
  StatusOr<DiskBlockHeader> ReadHeader(uint64_t hash, bool partial = false) const;
  void Wake();
  bool EvictOverCapacityLocked();
  void DropCorrupt(uint64_t hash, const Status& why, bool partial = false);

  DiskTierOptions options_;
  std::string block_dir_;
  mutable std::mutex mu_;
  std::condition_variable cv_;       // queue non-empty, or stopping
  std::condition_variable idle_cv_;  // queue empty and writer idle
  std::deque<DiskBlockWrite> queue_;
  std::set<uint64_t> queued_;        // hashes in queue_, being copied or being written
  int64_t reserved_ = 0;             // queue slots taken by copies being made
  bool writing_ = false;
  bool stop_ = false;
  std::unordered_map<uint64_t, Entry> index_;
  // Partial blocks by their parent's hash (few: one per conversation); Stats
  // counts them here.
  std::unordered_map<uint64_t, std::vector<Partial>> partials_;
  std::set<std::pair<uint64_t, uint64_t>> lru_;  // (tick, hash)
  uint64_t clock_ = 0;
  int64_t bytes_ = 0;
  DiskTierStats stats_;
  uint64_t temp_counter_ = 0;
  bool log_changes_ = false;  // announce (KV events)
  bool track_changes_ = false;  // log every change (the prefix index)
  std::vector<DiskTierChange> changes_;
  std::deque<uint64_t> to_announce_;  // indexed at EnableChangeLog, headers not yet read
  std::mutex wake_mu_;                // held while wake_ runs, and to replace it
  std::function<void()> wake_;
  std::thread writer_;  // last: starts after every member above exists
};

}  // namespace kvfork
