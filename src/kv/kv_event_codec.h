// vLLM's KV-event wire format (msgpack), as vllm/distributed/kv_events.py
// defines it with msgspec (array_like=True, tag=True, omit_defaults=True)
// and llm-d-kv-cache's kvevents package decodes it:
//
//   EventBatch       = [ts: float64 seconds since the epoch, [event...],
//                       data_parallel_rank: int]
//   BlockStored      = ["BlockStored", block_hashes: [uint64], parent_block_hash:
//                       uint64 | nil, token_ids: [int], block_size: int,
//                       lora_id: nil, medium: str, lora_name: nil]
//   BlockRemoved     = ["BlockRemoved", block_hashes: [uint64], medium: str]
//   (medium: "CPU" for the RAM pool, "DISK" for the disk tier; KvMediumName)
//   AllBlocksCleared = ["AllBlocksCleared"]
//
// Each kvfork event carries one block (block_hashes has one entry and
// token_ids is that block's block_size tokens); vLLM may group a run of
// blocks into one event, which decoders handle the same way.
//
// Pure functions; thread-safe.
#pragma once

#include <cstdint>
#include <span>
#include <string>

#include "kv/kv_events.h"

namespace kvfork {

struct KvEventBatchHeader {
  double timestamp_s = 0;        // wall clock when the batch was closed
  int64_t block_size = 16;       // tokens per block (BlockStored.block_size)
  int64_t data_parallel_rank = 0;
};

// The msgpack bytes of one EventBatch.
std::string EncodeKvEventBatch(const KvEventBatchHeader& header, std::span<const KvEvent> events);

}  // namespace kvfork
