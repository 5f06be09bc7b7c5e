#include "kv/disk_checksum.h"

#include <algorithm>
#include <array>
#include <cstring>

#include "kv/block_hash.h"

#if defined(__x86_64__) || defined(__i386__)
#include <nmmintrin.h>
#define KVFORK_DISK_CRC_X86 1
#endif

namespace kvfork {
namespace {

// CRC32C, reflected polynomial 0x82f63b78, one byte at a time.
constexpr std::array<uint32_t, 256> MakeTable() {
  std::array<uint32_t, 256> t{};
  for (uint32_t i = 0; i < 256; ++i) {
    uint32_t c = i;
    for (int k = 0; k < 8; ++k) c = (c & 1) ? (c >> 1) ^ 0x82f63b78u : c >> 1;
    t[i] = c;
  }
  return t;
}
constexpr std::array<uint32_t, 256> kTable = MakeTable();

uint32_t CrcBytePortable(uint32_t crc, uint8_t b) { return (crc >> 8) ^ kTable[(crc ^ b) & 0xff]; }

uint32_t CrcWordPortable(uint32_t crc, uint64_t w) {
  for (int k = 0; k < 8; ++k) crc = CrcBytePortable(crc, static_cast<uint8_t>(w >> (8 * k)));
  return crc;
}

void GroupsPortable(uint32_t lane[4], const uint8_t* p, size_t groups) {
  for (size_t g = 0; g < groups; ++g, p += 32) {
    for (int l = 0; l < 4; ++l) {
      uint64_t w;
      std::memcpy(&w, p + 8 * l, 8);
      lane[l] = CrcWordPortable(lane[l], w);
    }
  }
}

#ifdef KVFORK_DISK_CRC_X86
__attribute__((target("sse4.2"))) void GroupsSse42(uint32_t lane[4], const uint8_t* p,
                                                   size_t groups) {
  // Four independent chains in registers: the crc32 latency overlaps.
  uint64_t c0 = lane[0], c1 = lane[1], c2 = lane[2], c3 = lane[3];
  for (size_t g = 0; g < groups; ++g, p += 32) {
    uint64_t w[4];
    std::memcpy(w, p, 32);
    c0 = _mm_crc32_u64(c0, w[0]);
    c1 = _mm_crc32_u64(c1, w[1]);
    c2 = _mm_crc32_u64(c2, w[2]);
    c3 = _mm_crc32_u64(c3, w[3]);
  }
  lane[0] = static_cast<uint32_t>(c0);
  lane[1] = static_cast<uint32_t>(c1);
  lane[2] = static_cast<uint32_t>(c2);
  lane[3] = static_cast<uint32_t>(c3);
}

bool HasSse42() {
  static const bool has = __builtin_cpu_supports("sse4.2");
  return has;
}
#else
bool HasSse42() { return false; }
#endif

uint64_t Fold(const uint32_t lane[4], const uint8_t* tail, size_t tail_n, uint64_t total) {
  uint32_t l0 = lane[0];
  for (size_t i = 0; i < tail_n; ++i) l0 = CrcBytePortable(l0, tail[i]);
  const uint64_t a = (static_cast<uint64_t>(lane[1]) << 32) | l0;
  const uint64_t b = (static_cast<uint64_t>(lane[3]) << 32) | lane[2];
  return BlockHashMix(BlockHashMix(a ^ total) ^ b);
}

}  // namespace

void DiskChecksummer::Words(const uint8_t* data, size_t groups) {
#ifdef KVFORK_DISK_CRC_X86
  if (HasSse42()) {
    GroupsSse42(lane_, data, groups);
    return;
  }
#endif
  GroupsPortable(lane_, data, groups);
}

void DiskChecksummer::Update(const uint8_t* data, size_t n) {
  total_ += n;
  if (carried_ > 0) {
    const size_t take = std::min(n, 32 - carried_);
    std::memcpy(carry_ + carried_, data, take);
    carried_ += take;
    data += take;
    n -= take;
    if (carried_ < 32) return;
    Words(carry_, 1);
    carried_ = 0;
  }
  const size_t groups = n / 32;
  Words(data, groups);
  data += groups * 32;
  n -= groups * 32;
  std::memcpy(carry_, data, n);
  carried_ = n;
}

uint64_t DiskChecksummer::Finish() const { return Fold(lane_, carry_, carried_, total_); }

uint64_t DiskChecksum(const uint8_t* data, size_t n) {
  DiskChecksummer c;
  c.Update(data, n);
  return c.Finish();
}

uint64_t DiskChecksumPortable(const uint8_t* data, size_t n) {
  uint32_t lane[4] = {0xffffffffu, 0xffffffffu, 0xffffffffu, 0xffffffffu};
  const size_t groups = n / 32;
  GroupsPortable(lane, data, groups);
  return Fold(lane, data + groups * 32, n - groups * 32, n);
}

bool DiskChecksumUsesSse42() { return HasSse42(); }

}  // namespace kvfork
