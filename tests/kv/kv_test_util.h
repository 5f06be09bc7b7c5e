// Helpers shared by the KV cache unit tests: a tiny layout, a deterministic
// fake "forward" that writes a pattern derived from (token, position) into a
// sequence's blocks, and a prefill driver.
#pragma once

#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

#include "kernels/ops.h"
#include "kv/kv_cache.h"

// The cache's own invariant check (Check()), as a test expectation.
#define EXPECT_CHECK_OK(cache)           \
  do {                                   \
    Status s = (cache).Check();          \
    EXPECT_TRUE(s.ok()) << s.ToString(); \
  } while (0)

namespace kvfork::testing {

inline KvLayout TinyLayout(int block_size = 4, KvDType dtype = KvDType::kF32) {
  KvLayout l;
  l.num_layers = 2;
  l.num_kv_heads = 2;
  l.head_dim = 4;
  l.block_size = block_size;
  l.dtype = dtype;
  return l;
}

// A paged cache's options over TinyLayout with a disk tier in dir (1 GiB,
// a deep write queue, a fixed model fingerprint); callers add the rest.
inline KvCacheOptions DiskCacheOptions(const std::string& dir, int block_size, int64_t num_blocks) {
  KvCacheOptions o;
  o.layout = TinyLayout(block_size);
  o.num_blocks = num_blocks;
  o.disk_dir = dir;
  o.disk_capacity_bytes = int64_t{1} << 30;
  o.disk_queue_blocks = 1024;
  o.model_fingerprint = 42;
  return o;
}

inline float Pattern(int32_t token, int64_t pos, int plane, int d) {
  return static_cast<float>(token) * 1000.0f + static_cast<float>(pos) +
         static_cast<float>(plane) * 0.25f + static_cast<float>(d) * 0.0625f;
}

// The cache's tables as (layout, table, window, first layer) per layer group:
// one of every layer without groups.
struct GroupTable {
  const KvLayout* layout;
  uint8_t* const* table;
  int64_t window;
  int first_layer;  // the group's planes are numbered after the groups before it
};
inline std::vector<GroupTable> GroupTables(const KvCache& cache, SeqId seq) {
  std::vector<GroupTable> out;
  if (cache.kv_groups().empty()) return {{&cache.layout(), cache.BlockTable(seq), 0, 0}};
  int layer = 0;
  for (size_t g = 0; g < cache.kv_groups().size(); ++g) {
    const KvGroup& group = cache.kv_groups()[g];
    out.push_back(
        {&group.layout, cache.GroupBlockTable(seq, static_cast<int>(g)), group.window, layer});
    layer += group.layout.num_layers;
  }
  return out;
}

// Writes the pattern for positions [start, start + n) (f32 layouts only) in
// every layer group.
inline void FakeForward(const KvCache& cache, SeqId seq, const std::vector<int32_t>& tokens,
                        int64_t start, int64_t n) {
  for (const GroupTable& g : GroupTables(cache, seq)) {
    const KvLayout& l = *g.layout;
    for (int64_t p = start; p < start + n; ++p) {
      uint8_t* block = g.table[p / l.block_size];
      int slot = static_cast<int>(p % l.block_size);
      for (int layer = 0; layer < l.num_layers; ++layer) {
        for (int kv = 0; kv < 2; ++kv) {
          for (int h = 0; h < l.num_kv_heads; ++h) {
            int plane = ((g.first_layer + layer) * 2 + kv) * l.num_kv_heads + h;
            float* row = reinterpret_cast<float*>(block + l.PlaneOffset(layer, kv, h)) +
                         static_cast<size_t>(slot) * l.head_dim;
            for (int d = 0; d < l.head_dim; ++d) row[d] = Pattern(tokens[p], p, plane, d);
          }
        }
      }
    }
  }
}

// True when seq holds the pattern of its tokens at every position its next
// query can see: [0, NumTokens) in global groups, the window before
// NumTokens in sliding ones (the blocks before it are given back).
inline bool HoldsPattern(const KvCache& cache, SeqId seq) {
  auto tokens = cache.Tokens(seq);
  const int64_t n = static_cast<int64_t>(tokens.size());
  for (const GroupTable& g : GroupTables(cache, seq)) {
    const KvLayout& l = *g.layout;
    for (int64_t p = AttentionWindowStart(n, g.window); p < n; ++p) {
      const uint8_t* block = g.table[p / l.block_size];
      int slot = static_cast<int>(p % l.block_size);
      for (int layer = 0; layer < l.num_layers; ++layer) {
        for (int kv = 0; kv < 2; ++kv) {
          for (int h = 0; h < l.num_kv_heads; ++h) {
            int plane = ((g.first_layer + layer) * 2 + kv) * l.num_kv_heads + h;
            const float* row = reinterpret_cast<const float*>(block + l.PlaneOffset(layer, kv, h)) +
                               static_cast<size_t>(slot) * l.head_dim;
            for (int d = 0; d < l.head_dim; ++d)
              if (row[d] != Pattern(tokens[p], p, plane, d)) return false;
          }
        }
      }
    }
  }
  return true;
}

// Layer groups over TinyLayout's shape: `global` global layers and
// `sliding` layers with a window (global may be 0, as Mistral's).
inline std::vector<KvGroup> TinyGroups(int global, int sliding, int64_t window,
                                       int block_size = 4) {
  KvGroup g;
  g.layout = TinyLayout(block_size);
  g.layout.num_layers = global;
  KvGroup s = g;
  s.layout.num_layers = sliding;
  s.window = window;
  return {g, s};
}

// Admits prompt, "computes" the rest of it and appends; returns the sequence.
inline SeqId Prefill(KvCache& cache, const std::vector<int32_t>& prompt,
                     const std::string& salt = "", PrefixMatch* match = nullptr) {
  PrefixMatch m;
  StatusOr<SeqId> seq = cache.Admit(prompt, salt, static_cast<int64_t>(prompt.size()), &m);
  KVFORK_CHECK_MSG(seq.ok(), seq.status().ToString());
  FakeForward(cache, *seq, prompt, m.num_reused_tokens,
              static_cast<int64_t>(prompt.size()) - m.num_reused_tokens);
  std::vector<int32_t> rest(prompt.begin() + m.num_reused_tokens, prompt.end());
  Status st = cache.Append(*seq, rest);
  KVFORK_CHECK_MSG(st.ok(), st.ToString());
  if (match != nullptr) *match = m;
  return *seq;
}

inline std::vector<int32_t> Range(int32_t first, int n) {
  std::vector<int32_t> v(n);
  for (int i = 0; i < n; ++i) v[i] = first + i;
  return v;
}

inline std::vector<int32_t> Concat(std::vector<int32_t> a, const std::vector<int32_t>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

}  // namespace kvfork::testing
