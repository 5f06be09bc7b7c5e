#include "kv/disk_block_file.h"

#include <cstring>

#include "kv/block_hash.h"

namespace kvfork {
namespace {

constexpr char kMagic[8] = {'K', 'V', 'F', 'B', 'L', 'K', '0', '1'};
// The flags word at offset 40.
constexpr uint32_t kHasParent = 1;
constexpr uint32_t kPartial = 2;
// Mixed into a partial block's chained hash (DiskPartialKey).
constexpr uint64_t kPartialTag = 0x9a27141b10c4ull;

template <typename T>
void Put(std::vector<uint8_t>* out, size_t at, T v) {
  std::memcpy(out->data() + at, &v, sizeof(T));
}

template <typename T>
T Get(std::span<const uint8_t> in, size_t at) {
  T v;
  std::memcpy(&v, in.data() + at, sizeof(T));
  return v;
}

}  // namespace

uint64_t DiskFingerprint(uint64_t model_fingerprint, const KvLayout& layout,
                         const std::string& isa_name) {
  uint64_t h = BlockHashMix(0xd15c ^ model_fingerprint);
  for (uint64_t v : {static_cast<uint64_t>(layout.dtype), static_cast<uint64_t>(layout.block_size),
                     static_cast<uint64_t>(layout.num_layers),
                     static_cast<uint64_t>(layout.num_kv_heads),
                     static_cast<uint64_t>(layout.head_dim),
                     static_cast<uint64_t>(layout.BlockBytes()), uint64_t{kDiskBlockVersion}}) {
    h = BlockHashMix(h ^ v);
  }
  h = BlockHashMix(h ^ DiskChecksum(reinterpret_cast<const uint8_t*>(isa_name.data()),
                                    isa_name.size()));
  return h == 0 ? 1 : h;
}

uint64_t DiskPartialKey(uint64_t parent_hash, std::span<const int32_t> tokens) {
  return BlockHashMix(ChainBlockHash(parent_hash, tokens) ^ kPartialTag);
}

std::vector<uint8_t> EncodeDiskBlock(const DiskBlockHeader& header,
                                     std::span<const uint8_t> payload) {
  const size_t hb = DiskBlockHeaderBytes(header.tokens.size());
  std::vector<uint8_t> out(hb + payload.size());
  std::memcpy(out.data(), kMagic, 8);
  Put<uint32_t>(&out, 8, kDiskBlockVersion);
  Put<uint32_t>(&out, 12, static_cast<uint32_t>(hb));
  Put<uint64_t>(&out, 16, header.fingerprint);
  Put<uint64_t>(&out, 24, header.block_hash);
  Put<uint64_t>(&out, 32, header.parent_hash.value_or(0));
  Put<uint32_t>(&out, 40, (header.parent_hash.has_value() ? kHasParent : 0u) |
                              (header.partial ? kPartial : 0u));
  Put<uint32_t>(&out, 44, static_cast<uint32_t>(header.tokens.size()));
  Put<uint64_t>(&out, 48, payload.size());
  Put<uint64_t>(&out, 56, DiskChecksum(payload.data(), payload.size()));
  std::memcpy(out.data() + kDiskBlockFixedHeaderBytes, header.tokens.data(),
              4 * header.tokens.size());
  // The header checksum covers [0, 64) and the tokens, skipping its own slot.
  uint64_t hc = DiskChecksum(out.data(), 64);
  hc = BlockHashMix(hc ^ DiskChecksum(out.data() + kDiskBlockFixedHeaderBytes,
                                      4 * header.tokens.size()));
  Put<uint64_t>(&out, 64, hc);
  if (!payload.empty()) std::memcpy(out.data() + hb, payload.data(), payload.size());
  return out;
}

StatusOr<DiskBlockHeader> DecodeDiskBlockHeader(std::span<const uint8_t> bytes,
                                                uint64_t file_bytes) {
  if (bytes.size() < kDiskBlockFixedHeaderBytes || file_bytes < kDiskBlockFixedHeaderBytes)
    return DataLossError("KV disk block: truncated header (" + std::to_string(file_bytes) +
                         " bytes)");
  if (std::memcmp(bytes.data(), kMagic, 8) != 0)
    return DataLossError("KV disk block: bad magic (not a kvfork block file)");
  const uint32_t version = Get<uint32_t>(bytes, 8);
  if (version != kDiskBlockVersion)
    return DataLossError("KV disk block: version " + std::to_string(version) + ", expected " +
                         std::to_string(kDiskBlockVersion));
  const uint32_t flags = Get<uint32_t>(bytes, 40);
  if ((flags & ~(kHasParent | kPartial)) != 0)
    return DataLossError("KV disk block: unknown flags " + std::to_string(flags));
  const uint32_t hb = Get<uint32_t>(bytes, 12);
  const uint32_t num_tokens = Get<uint32_t>(bytes, 44);
  // No block holds 0 tokens (a partial one has at least 1); refusing them
  // here also keeps the token copy below off an empty vector's null data().
  if (num_tokens == 0) return DataLossError("KV disk block: no tokens");
  if (num_tokens > (1u << 20) || hb != DiskBlockHeaderBytes(num_tokens))
    return DataLossError("KV disk block: header size " + std::to_string(hb) +
                         " does not match its " + std::to_string(num_tokens) + " tokens");
  const uint64_t payload_bytes = Get<uint64_t>(bytes, 48);
  if (file_bytes < hb || file_bytes - hb != payload_bytes)
    return DataLossError("KV disk block: file has " + std::to_string(file_bytes) +
                         " bytes, header says " + std::to_string(hb) + " + " +
                         std::to_string(payload_bytes) + " (truncated or torn)");
  if (bytes.size() < hb)
    return DataLossError("KV disk block: token ids truncated");
  uint64_t hc = DiskChecksum(bytes.data(), 64);
  hc = BlockHashMix(hc ^ DiskChecksum(bytes.data() + kDiskBlockFixedHeaderBytes, 4 * num_tokens));
  if (hc != Get<uint64_t>(bytes, 64)) return DataLossError("KV disk block: header checksum mismatch");
  DiskBlockHeader h;
  h.fingerprint = Get<uint64_t>(bytes, 16);
  h.block_hash = Get<uint64_t>(bytes, 24);
  if ((flags & kHasParent) != 0) h.parent_hash = Get<uint64_t>(bytes, 32);
  h.partial = (flags & kPartial) != 0;
  h.tokens.resize(num_tokens);
  std::memcpy(h.tokens.data(), bytes.data() + kDiskBlockFixedHeaderBytes, 4 * num_tokens);
  h.payload_bytes = payload_bytes;
  h.payload_checksum = Get<uint64_t>(bytes, 56);
  return h;
}

Status CheckDiskBlockIdentity(const DiskBlockHeader& header, uint64_t fingerprint,
                              uint64_t block_hash, std::optional<uint64_t> parent_hash,
                              std::span<const int32_t> tokens, bool partial,
                              size_t payload_bytes) {
  if (header.fingerprint != fingerprint)
    return FailedPreconditionError("KV disk block: fingerprint differs (another model, KV "
                                   "format or kernel ISA level)");
  if (header.block_hash != block_hash) return FailedPreconditionError("KV disk block: hash differs");
  if (header.parent_hash != parent_hash)
    return FailedPreconditionError("KV disk block: parent hash differs");
  if (header.partial != partial)
    return FailedPreconditionError(std::string("KV disk block: a ") +
                                   (header.partial ? "partial" : "full") + " block, expected a " +
                                   (partial ? "partial" : "full") + " one");
  if (header.tokens.size() != tokens.size() ||
      std::memcmp(header.tokens.data(), tokens.data(), 4 * tokens.size()) != 0)
    return FailedPreconditionError("KV disk block: token ids differ");
  if (header.payload_bytes != payload_bytes)
    return FailedPreconditionError("KV disk block: payload of " +
                                   std::to_string(header.payload_bytes) + " bytes, the pool's "
                                   "blocks have " + std::to_string(payload_bytes));
  return OkStatus();
}

Status VerifyDiskPayload(const DiskBlockHeader& header, std::span<const uint8_t> payload) {
  if (payload.size() != header.payload_bytes ||
      DiskChecksum(payload.data(), payload.size()) != header.payload_checksum)
    return DataLossError("KV disk block: payload checksum mismatch");
  return OkStatus();
}

}  // namespace kvfork
