// How the avx2 and avx512 PagedAttention kernels split a call into tasks:
// tiles of 1, 2 or 4 consecutive query tokens of one sequence and one KV head
// (every query head of its GQA group), and spans of up to kSpanTiles such
// tiles that walk the block table once, each block's K and V planes serving
// every tile of the span while they are in cache.
//
// Which tokens share a tile or a span never changes a result: each kernel
// runs every (token, head) through the same operations in the same order as
// if it ran alone (attention_avx2.cc). Include only from ISA translation
// units; everything here has internal linkage (ops_isa.h).
#pragma once

#include <cstdint>
#include <span>

#include "kernels/ops.h"

namespace kvfork {
namespace {

// Tiles per span. With one tile per task, a 22-token prefill over 3,400
// cached tokens read each KV plane six times and waited on memory (perf on
// the avx512 level: the widening loads of K and V were most of its time).
constexpr int kSpanTiles = 8;

// Query tokens per tile for GQA group size `group`: tokens * group (token,
// head) rows share every K and V row a tile reads; at most 4 tokens, and 1
// where the group is above 4, so a tile has at most 16 rows.
constexpr int MaxTileTokens(int group) { return group <= 4 ? 4 : 1; }
constexpr int kMaxTileRows = 16;

struct AttentionTask {
  const AttentionSeq* seq;
  int64_t t;   // first query token of the span
  int kvh;     // KV head
  int tile;    // 0, 1, 2: tiles of 1, 2 or 4 tokens
  int ntiles;  // tiles in the span
};

// Fills tasks (room for sum of num_tokens * num_kv_heads) and returns their
// count: each sequence's tokens in the largest tiles that fit (max_tile 1, 2
// or 4), spans of up to kSpanTiles tiles, one task per span and KV head.
inline int64_t PlanAttentionTasks(std::span<const AttentionSeq> seqs, int num_kv_heads,
                                  int max_tile, AttentionTask* tasks) {
  int64_t n = 0;
  for (const AttentionSeq& s : seqs) {
    for (int64_t t = 0; t < s.num_tokens;) {
      const int64_t left = s.num_tokens - t;
      const int tile = left >= 4 && max_tile >= 4 ? 2 : left >= 2 && max_tile >= 2 ? 1 : 0;
      const int64_t fit = left >> tile;  // whole tiles of this size left
      const int ntiles = static_cast<int>(fit < kSpanTiles ? fit : kSpanTiles);
      for (int h = 0; h < num_kv_heads; ++h) tasks[n++] = AttentionTask{&s, t, h, tile, ntiles};
      t += int64_t{ntiles} << tile;
    }
  }
  return n;
}

}  // namespace
}  // namespace kvfork
