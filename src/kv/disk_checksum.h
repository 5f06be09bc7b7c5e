// The disk tier's checksum (disk_block_file.h, version 2): four CRC32C
// (Castagnoli) lanes over the 8-byte words of the data, word i in lane i % 4,
// then the bytes after the last whole 32-byte group into lane 0, and the four
// lane values and the length folded into 64 bits with the splitmix64 step:
//
//   lane[l] = CRC32C over words l, l + 4, l + 8, ... (init 0xffffffff, no final xor)
//   sum     = Mix(Mix((lane1 << 32 | lane0) ^ n) ^ (lane3 << 32 | lane2))
//
// Why this one: each lane keeps CRC32C's guarantees for its words (every
// burst of up to 32 bits, every 1-3 bit error, in blocks far longer than
// ours), and four independent lanes let the SSE4.2 crc32 instruction (3
// cycles latency, 1 per cycle) run at ~8 bytes a cycle, about the speed a
// core copies memory. The version-1 checksum (a splitmix64 mix per word, two
// dependent multiplies) ran at about a third of that. It detects corruption;
// it is not a MAC.
//
// The SSE4.2 path is chosen at run time; the portable one (a byte table) gives
// the same values everywhere (DiskChecksum.Sse42MatchesPortable).
//
// Pure functions and a value type; thread-safe.
#pragma once

#include <cstddef>
#include <cstdint>

namespace kvfork {

// Streams the checksum over any split of the data into Update calls.
class DiskChecksummer {
 public:
  void Update(const uint8_t* data, size_t n);
  uint64_t Finish() const;

 private:
  void Words(const uint8_t* data, size_t groups);  // groups of 32 bytes
  uint32_t lane_[4] = {0xffffffffu, 0xffffffffu, 0xffffffffu, 0xffffffffu};
  uint8_t carry_[32];   // bytes of an unfinished 32-byte group
  size_t carried_ = 0;
  uint64_t total_ = 0;
};

// The checksum of n bytes.
uint64_t DiskChecksum(const uint8_t* data, size_t n);

// The same value computed without SSE4.2 (tests compare the two).
uint64_t DiskChecksumPortable(const uint8_t* data, size_t n);

// Whether DiskChecksum runs on the SSE4.2 crc32 instruction here.
bool DiskChecksumUsesSse42();

}  // namespace kvfork
