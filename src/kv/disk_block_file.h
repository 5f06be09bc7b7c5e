// The on-disk format of one KV block of the disk tier (disk_tier.h): one
// file per block, named by its stable hash (block_hash.h).
//
//   offset  field
//   0       magic "KVFBLK01" (8 bytes)
//   8       version (u32, 3), header_bytes (u32: 72 + 4 * num_tokens)
//   16      fingerprint (u64): everything that changes the bits (DiskFingerprint)
//   24      block hash (u64), 32 parent hash (u64), 40 flags (u32: bit 0 has a
//           parent, bit 1 partial block; the other bits 0)
//   44      num_tokens (u32), 48 payload_bytes (u64), 56 payload checksum (u64)
//   64      header checksum (u64): of bytes [0, 64) and the token ids
//   72      token ids (int32 each), then the payload (the pool block's bytes)
//
// Integers are little-endian (the hosts kvfork runs on). A file is valid
// only if every field checks: magic, version, sizes, both checksums, and the
// fingerprint, hash, parent and tokens the reader expects. A torn, truncated
// or foreign file therefore never passes (DecodeDiskBlockHeader,
// VerifyDiskPayload). Checksum: disk_checksum.h (four CRC32C lanes, at about
// memory speed); it detects corruption, it is not a MAC.
//
// Partial blocks (version 3): a finished sequence's last block, fewer than
// block_size tokens, written at a clean shutdown so a restarted server
// reuses the conversation's tail as the warm one does (docs/kv_cache.md).
// Its file holds the whole pool block (positions past its tokens are
// garbage, as in any block being written) and its key is DiskPartialKey: the
// chained hash of its tokens marked partial, so it never names a full block.
//
// Versions: 2 (2026-12-06) changed the checksum (version 1: a splitmix64 mix
// per 8-byte word, a third of the speed); 3 (2026-12-06) made word 40 a
// flags word with the partial bit. The version enters the fingerprint, so an
// older directory is another subdirectory this version never opens; an
// older file found in this version's directory fails the version check and
// is counted corrupt and deleted.
//
// Pure functions; thread-safe.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "core/status.h"
#include "kernels/kv_layout.h"
#include "kv/disk_checksum.h"

namespace kvfork {

inline constexpr uint32_t kDiskBlockVersion = 3;
inline constexpr size_t kDiskBlockFixedHeaderBytes = 72;

// The fingerprint of everything that changes a block's bits: the model's
// weights (model_fingerprint, from the caller), the KV layout (dtype, block
// size, layers, heads, head dim, block bytes) and the kernels' ISA level
// (isa_name: kernels differ in rounding between levels). Never 0.
uint64_t DiskFingerprint(uint64_t model_fingerprint, const KvLayout& layout,
                         const std::string& isa_name);

struct DiskBlockHeader {
  uint64_t fingerprint = 0;
  uint64_t block_hash = 0;
  std::optional<uint64_t> parent_hash;
  std::vector<int32_t> tokens;
  bool partial = false;  // a partial block (fewer tokens than a block holds)
  uint64_t payload_bytes = 0;
  uint64_t payload_checksum = 0;
};

// The key (and file name) of a partial block whose parent has parent_hash
// and whose token ids are tokens: their chained hash (block_hash.h), mixed
// with a tag so that it differs from the hash of any full block.
uint64_t DiskPartialKey(uint64_t parent_hash, std::span<const int32_t> tokens);

// The whole file: header, tokens, payload.
std::vector<uint8_t> EncodeDiskBlock(const DiskBlockHeader& header,
                                     std::span<const uint8_t> payload);

// Header bytes a file with num_tokens tokens has.
inline size_t DiskBlockHeaderBytes(size_t num_tokens) {
  return kDiskBlockFixedHeaderBytes + 4 * num_tokens;
}

// Parses the fixed header (first kDiskBlockFixedHeaderBytes bytes) and, given
// the bytes that follow, the token ids. DataLoss naming the field that is
// wrong (magic, version, sizes, header checksum); file_bytes is the file's
// size, which must equal header + payload exactly (a truncated file fails).
StatusOr<DiskBlockHeader> DecodeDiskBlockHeader(std::span<const uint8_t> header_bytes,
                                                uint64_t file_bytes);

// Checks a decoded header against what the reader expects (fingerprint,
// hash, parent, tokens, full or partial, payload size); FailedPrecondition
// naming the mismatch.
Status CheckDiskBlockIdentity(const DiskBlockHeader& header, uint64_t fingerprint,
                              uint64_t block_hash, std::optional<uint64_t> parent_hash,
                              std::span<const int32_t> tokens, bool partial,
                              size_t payload_bytes);

// DataLoss when the payload's checksum differs from the header's.
Status VerifyDiskPayload(const DiskBlockHeader& header, std::span<const uint8_t> payload);

}  // namespace kvfork
