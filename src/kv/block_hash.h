// The identity of a cached KV block: a stable chained 64-bit hash of
// (parent block's hash, the block's token ids, the cache salt's bytes).
//
//   salt_key(salt)    = 0 for "", else a hash of the salt's bytes (never 0)
//   root_seed(salt)   = Mix(0x5a17 ^ salt_key(salt))
//   hash(block)       = fold Mix(h ^ uint32(token)) over its token ids,
//                       starting from hash(parent), or root_seed for a
//                       first block
//
// Mix is the splitmix64 finalizer. Everything is defined on values (token ids
// as unsigned 32-bit, salt bytes read as little-endian 64-bit words), so the
// hash is the same in every process, after a restart, on every machine: the
// KV events that routers consume (kv_event_codec.h), /v1/cache/stats's block
// dump and, later, the disk tier's file names use it. It is only a name: the
// prefix index verifies parent, salt and every token on a hit, so a collision
// cannot hand out the wrong K/V. docs/kv_cache.md states the algorithm.
//
// Pure functions; thread-safe. Cost O(tokens).
#pragma once

#include <cstdint>
#include <span>
#include <string_view>

namespace kvfork {

// The splitmix64 finalizer: one well-mixed 64-bit step.
uint64_t BlockHashMix(uint64_t x);

// 0 for the empty salt; otherwise a 64-bit hash of its bytes, never 0.
uint64_t SaltKeyOf(std::string_view salt);

// The chain's start for the first block of a prompt under salt_key.
uint64_t RootBlockHashSeed(uint64_t salt_key);

// The hash of a block whose parent has parent_hash (or RootBlockHashSeed for
// a first block) and whose token ids are tokens (full or partial block).
uint64_t ChainBlockHash(uint64_t parent_hash, std::span<const int32_t> tokens);

}  // namespace kvfork
