#include "kv/kv_event_codec.h"

#include <string_view>

// Only the packer: no Boost (msgpack-cxx needs it for its Boost adaptors only).
#define MSGPACK_NO_BOOST 1
#include <msgpack/pack.hpp>
#include <msgpack/sbuffer.hpp>

namespace kvfork {
namespace {

using Packer = msgpack::packer<msgpack::sbuffer>;

void PackStr(Packer& pk, std::string_view s) {
  pk.pack_str(static_cast<uint32_t>(s.size()));
  pk.pack_str_body(s.data(), static_cast<uint32_t>(s.size()));
}

void PackEvent(Packer& pk, const KvEventBatchHeader& h, const KvEvent& e) {
  switch (e.kind) {
    case KvEvent::Kind::kBlockStored:
      pk.pack_array(8);
      PackStr(pk, "BlockStored");
      pk.pack_array(1);
      pk.pack_uint64(e.block_hash);
      if (e.parent_hash) {
        pk.pack_uint64(*e.parent_hash);
      } else {
        pk.pack_nil();
      }
      pk.pack_array(static_cast<uint32_t>(e.token_ids.size()));
      for (int32_t t : e.token_ids) pk.pack_int32(t);
      pk.pack_int64(h.block_size);
      pk.pack_nil();  // lora_id: no LoRA adapters
      PackStr(pk, KvMediumName(e.medium));
      pk.pack_nil();  // lora_name
      return;
    case KvEvent::Kind::kBlockRemoved:
      pk.pack_array(3);
      PackStr(pk, "BlockRemoved");
      pk.pack_array(1);
      pk.pack_uint64(e.block_hash);
      PackStr(pk, KvMediumName(e.medium));
      return;
    case KvEvent::Kind::kAllBlocksCleared:
      pk.pack_array(1);
      PackStr(pk, "AllBlocksCleared");
      return;
  }
}

}  // namespace

std::string EncodeKvEventBatch(const KvEventBatchHeader& header, std::span<const KvEvent> events) {
  msgpack::sbuffer buf;
  Packer pk(buf);
  pk.pack_array(3);
  pk.pack_double(header.timestamp_s);
  pk.pack_array(static_cast<uint32_t>(events.size()));
  for (const KvEvent& e : events) PackEvent(pk, header, e);
  pk.pack_int64(header.data_parallel_rank);
  return std::string(buf.data(), buf.size());
}

}  // namespace kvfork
