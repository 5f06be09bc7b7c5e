// WriteKv and PagedAttention on every ISA: KV bytes equal to the reference's
// (int8, q4 and q4r included), attention close to the reference (1e-5
// relative + 1e-5 absolute: both read the same stored values, only the
// summation order and exp differ; the dot products of bf16, int8, q4 and q4r
// KV on the avx512 level round q and p to bf16: AttentionTolerance), q4 / q4r
// attention close to f32
// attention over the values they dequantize to, and bitwise chunking invariance: a
// sequence's outputs are identical whether its tokens come in one call or in
// chunks of 1, 3 or 16 (writing KV as we go), and alone or batched.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <memory>
#include <tuple>
#include <vector>

#include "kernel_test_util.h"
#include "kernels/kv_q4.h"
#include "kernels/ops.h"
#include "kernels/reference.h"
#include "test_env.h"

namespace kvfork {
namespace {

using testing::RandomFloats;
using testing::SameBits;
using testing::ScopedIsa;
using testing::SupportedIsas;

// A sequence's blocks, allocated in scrambled order so block i is not at
// base + i * block_bytes.
struct Blocks {
  explicit Blocks(const KvLayout& layout, int64_t tokens) {
    const int64_t n = (tokens + layout.block_size - 1) / layout.block_size;
    const size_t bytes = layout.BlockBytes();
    storage.resize(static_cast<size_t>(n) * bytes + 64);
    uint8_t* base =
        reinterpret_cast<uint8_t*>((reinterpret_cast<uintptr_t>(storage.data()) + 63) / 64 * 64);
    for (int64_t i = 0; i < n; ++i) ptrs.push_back(base + static_cast<size_t>((i * 7) % n) * bytes);
  }
  std::vector<uint8_t> storage;
  std::vector<uint8_t*> ptrs;
};

// q4 and q4r take head_dim in multiples of 32 (one scale per 32 values): the
// shapes below round up for them (3 -> 32, 40 and 64 -> 64, 68 -> 96).
KvLayout MakeLayout(KvDType dtype, int head_dim, int block_size) {
  KvLayout l;
  l.num_layers = 2;
  l.num_kv_heads = 2;
  l.head_dim = IsQ4(dtype) ? (head_dim + kQ4Group - 1) / kQ4Group * kQ4Group : head_dim;
  l.block_size = block_size;
  l.dtype = dtype;
  return l;
}

// How close a level's attention must be to the reference's: 1e-5 relative +
// 1e-5 absolute where both multiply in f32 or keep ~16 bits of q and p (the
// amx tiles; only the summation order and exp differ). bf16, int8, q4 and
// q4r KV on the avx512 level, and on the amx level for the layouts its tiles
// do not take (head_dim not a multiple of 32 or above 256, blocks not a
// multiple of 16), run vdpbf16ps with q and the probabilities rounded to
// bf16, as llama.cpp rounds q to its K type: the error then follows the
// scores' size (bf16 keeps 2^-9 of a score, ~0.01 of the scores of up to ~5
// these random cases reach; seen up to 4.3e-3 on outputs). int8 and q4 KV's
// codes and scales stay exact there; what is rounded is q, and p times V's
// scale (int8's row scale, q4's group scale), the same 2^-9 of each term as
// bf16's p. docs/kernels.md has what it costs a model's logits.
float AttentionTolerance(Isa isa, const KvLayout& l) {
  const bool amx_tiles = l.head_dim % 32 == 0 && l.head_dim <= 256 && l.block_size % 16 == 0;
  const bool bf16_dots =
      l.dtype != KvDType::kF32 && (isa == Isa::kAvx512 || (isa == Isa::kAmx && !amx_tiles));
  return bf16_dots ? 1e-2f : 1e-5f;
}

class AttentionTest : public ::testing::TestWithParam<KvDType> {};

TEST_P(AttentionTest, WriteKvBytesEqualReference) {
  for (int shape_dim : {64, 68, 3}) {
    KvLayout l = MakeLayout(GetParam(), shape_dim, 16);
    const int head_dim = l.head_dim;
    const int64_t tokens = 37;
    const int64_t row = l.num_kv_heads * head_dim;
    std::vector<float> k = RandomFloats(tokens * row, 21, -4, 4),
                       v = RandomFloats(tokens * row, 22);
    k[5] = 0.0f;
    for (int d = 0; d < head_dim; ++d) v[row + d] = 0.0f;  // an all-zero row: scale 0
    Blocks want(l, tokens);
    for (uint8_t* b : want.ptrs) std::memset(b, 0, l.BlockBytes());
    reference::WriteKv(l, 1, want.ptrs.data(), 0, tokens, k.data(), v.data());
    for (Isa isa : SupportedIsas()) {
      ScopedIsa scoped(isa);
      Blocks got(l, tokens);
      for (uint8_t* b : got.ptrs) std::memset(b, 0, l.BlockBytes());
      WriteKv(l, 1, got.ptrs.data(), 0, 20, k.data(), v.data());
      WriteKv(l, 1, got.ptrs.data(), 20, tokens - 20, k.data() + 20 * row, v.data() + 20 * row);
      for (size_t i = 0; i < want.ptrs.size(); ++i)
        ASSERT_EQ(std::memcmp(want.ptrs[i], got.ptrs[i], l.BlockBytes()), 0)
            << IsaName(isa) << " " << KvDTypeName(l.dtype) << " head_dim=" << head_dim << " block "
            << i;
    }
  }
}

struct Case {
  KvLayout layout;
  int num_heads = 4;
  int64_t tokens = 0;
  int64_t window = 0;  // AttentionSeq::window
  std::vector<float> q, k, v;
};

Case MakeCase(KvDType dtype, int shape_dim, int64_t tokens, uint32_t seed, int num_heads = 4,
              int block_size = 16) {
  Case c;
  c.num_heads = num_heads;
  c.layout = MakeLayout(dtype, shape_dim, block_size);
  const int head_dim = c.layout.head_dim;
  c.tokens = tokens;
  c.q = RandomFloats(tokens * c.num_heads * head_dim, seed, -2, 2);
  c.k = RandomFloats(tokens * c.layout.num_kv_heads * head_dim, seed + 1, -2, 2);
  c.v = RandomFloats(tokens * c.layout.num_kv_heads * head_dim, seed + 2);
  return c;
}

// Runs a sequence through WriteKv + PagedAttention in chunks of `chunk` tokens,
// on blocks whose every byte is `fill` before the first write.
std::vector<float> RunChunked(const Case& c, int64_t chunk, ThreadPool& pool,
                              uint8_t fill = 0) {
  const KvLayout& l = c.layout;
  const float scale = 1.0f / std::sqrt(static_cast<float>(l.head_dim));
  Blocks blocks(l, c.tokens);
  for (uint8_t* b : blocks.ptrs) std::memset(b, fill, l.BlockBytes());
  std::vector<float> out(c.q.size(), -7.0f);
  const int64_t qrow = c.num_heads * l.head_dim, kvrow = l.num_kv_heads * l.head_dim;
  for (int64_t p = 0; p < c.tokens; p += chunk) {
    const int64_t n = std::min(chunk, c.tokens - p);
    WriteKv(l, 1, blocks.ptrs.data(), p, n, c.k.data() + p * kvrow, c.v.data() + p * kvrow);
    AttentionSeq s{c.q.data() + p * qrow, out.data() + p * qrow, n, p, blocks.ptrs.data(),
                   c.window};
    PagedAttention(l, 1, c.num_heads, scale, std::span<const AttentionSeq>(&s, 1), pool);
  }
  return out;
}

TEST_P(AttentionTest, MatchesReference) {
  ThreadPool pool(2);
  // GQA groups of 2 (head_dim 64, 68, 128), 1 (MHA), 4, 3, 8 and 16 query
  // heads per KV head; bf16 and int8 KV with head_dim 64, 96 or 128 run the amx
  // level's tile kernel (16 query rows per tile, so 1 to 8 tokens a tile),
  // 150 tokens: several key groups of 32 and several tiles per task.
  for (auto [head_dim, num_heads, tokens] :
       {std::tuple{64, 4, 45}, {68, 4, 45}, {40, 2, 45}, {72, 8, 45}, {128, 4, 150},
        {96, 6, 150}, {64, 16, 150}, {64, 32, 70}}) {
    Case c = MakeCase(GetParam(), head_dim, tokens, 30, num_heads);
    std::vector<float> want;
    {
      ScopedIsa scoped(Isa::kScalar);
      want = RunChunked(c, c.tokens, pool);
    }
    for (Isa isa : SupportedIsas()) {
      ScopedIsa scoped(isa);
      const float tol = AttentionTolerance(isa, c.layout);
      std::vector<float> got = RunChunked(c, c.tokens, pool);
      for (size_t i = 0; i < got.size(); ++i)
        ASSERT_NEAR(got[i], want[i], tol + tol * std::fabs(want[i]))
            << IsaName(isa) << " " << KvDTypeName(GetParam()) << " head_dim=" << head_dim
            << " heads=" << num_heads << " at " << i;
    }
  }
}

TEST_P(AttentionTest, ChunkingThreadsAndBatchingDoNotChangeBits) {
  // The SIMD paths run 1, 2 or 4 query tokens per task where the GQA group is
  // at most 4 (tokens of one tile see keys masked past their own position):
  // groups 2, 1 and 8, and blocks of 16 and of 32 keys. The amx level's tile
  // kernel (bf16 and int8 KV, head_dim 64 or 128 here) puts 16 / group tokens in a
  // tile and 8 tiles in a task; 150 tokens cross tiles, tasks and key groups
  // of 32, and blocks of 48 split a key group across two blocks. The avx512
  // level scores a span of several tiles with K transposed (KeysT), decode
  // and single tiles with K's rows: groups 5 and 7 (10 and 14 heads) leave 1
  // and 3 rows past its groups of 4 (LaneScores). The avx2 level reads int8
  // K and V as stored in spans of one tile (decode: chunk 1) and converted
  // to f32 rows per block otherwise (head_dim 68 always so).
  for (auto [head_dim, num_heads, block_size, tokens] :
       {std::tuple{68, 4, 16, 50}, {68, 4, 32, 50}, {68, 2, 16, 50}, {68, 16, 16, 50},
        {64, 4, 16, 150}, {128, 4, 32, 150}, {64, 2, 48, 150}, {128, 16, 16, 70},
        {64, 6, 16, 70}, {64, 10, 16, 150}, {96, 14, 32, 70}}) {
    Case c = MakeCase(GetParam(), head_dim, tokens, 40, num_heads, block_size);
    for (Isa isa : SupportedIsas()) {
      ScopedIsa scoped(isa);
      ThreadPool pool1(1), pool3(3);
      const std::vector<float> whole = RunChunked(c, c.tokens, pool1);
      for (int64_t chunk : {1, 3, 16}) {
        std::vector<float> got = RunChunked(c, chunk, chunk == 3 ? pool3 : pool1);
        size_t at = 0;
        ASSERT_TRUE(SameBits(whole.data(), got.data(), got.size(), &at))
            << IsaName(isa) << " " << KvDTypeName(GetParam()) << " chunk=" << chunk
            << " head_dim=" << head_dim << " heads=" << num_heads << " block=" << block_size
            << " at " << at;
      }
      // Two sequences in one call (one a decode step, one a prefill chunk) give
      // the same bits as each alone.
      const KvLayout& l = c.layout;
      const float scale = 1.0f / std::sqrt(static_cast<float>(l.head_dim));
      const int64_t qrow = c.num_heads * l.head_dim;
      Blocks a(l, c.tokens), b(l, c.tokens);
      WriteKv(l, 1, a.ptrs.data(), 0, c.tokens, c.k.data(), c.v.data());
      WriteKv(l, 1, b.ptrs.data(), 0, 30, c.k.data(), c.v.data());
      std::vector<float> out_a(qrow), out_b(10 * qrow);
      AttentionSeq seqs[2] = {
          {c.q.data() + (c.tokens - 1) * qrow, out_a.data(), 1, c.tokens - 1, a.ptrs.data()},
          {c.q.data() + 20 * qrow, out_b.data(), 10, 20, b.ptrs.data()}};
      PagedAttention(l, 1, c.num_heads, scale, std::span<const AttentionSeq>(seqs, 2), pool3);
      ASSERT_TRUE(SameBits(out_a.data(), whole.data() + (c.tokens - 1) * qrow, qrow))
          << IsaName(isa);
      ASSERT_TRUE(SameBits(out_b.data(), whole.data() + 20 * qrow, 10 * qrow)) << IsaName(isa);
    }
  }
}

// Blocks of an odd number of keys: the avx512 level's bf16 kernel takes V in
// pairs of keys (vdpbf16ps), so every block ends in half a pair, whose
// missing key must add nothing; chunks of 1 (decode steps), 2 and 5 end calls
// on either key of a pair. Against the reference and bitwise against the
// whole sequence in one call, every level, GQA groups 2, 4 and 8. Group 4
// runs tiles of 4, 2 and 1 tokens (16, 8 and 4 rows), so the avx512 q4
// kernel's P·V passes take 1, 2 and 4 accumulator vectors (half a 32-dim
// group, one, two; head_dim 96 ends in a pass with one group of two): the
// decode row must keep the prefill row's bits across those splits. The
// avx512 level's bf16 and int8 kernel takes one softmax step per group of
// whole blocks of at least 128 keys (130 with blocks of 5, 136 with 17):
// 300 and 280 tokens cross two group boundaries, inside 16-key vectors.
TEST_P(AttentionTest, OddBlockSizesMatchReferenceAndKeepBits) {
  ThreadPool pool1(1), pool3(3);
  for (auto [head_dim, num_heads, block_size, tokens] :
       {std::tuple{64, 4, 5, 41}, {68, 4, 17, 60}, {128, 16, 33, 70}, {40, 2, 1, 9},
        {64, 8, 5, 41}, {96, 8, 17, 40}, {64, 4, 5, 300}, {96, 8, 17, 280}}) {
    const Case c = MakeCase(GetParam(), head_dim, tokens, 90, num_heads, block_size);
    std::vector<float> want;
    {
      ScopedIsa scoped(Isa::kScalar);
      want = RunChunked(c, c.tokens, pool1);
    }
    for (Isa isa : SupportedIsas()) {
      ScopedIsa scoped(isa);
      const std::vector<float> whole = RunChunked(c, c.tokens, pool3);
      const float tol = AttentionTolerance(isa, c.layout);
      for (size_t i = 0; i < whole.size(); ++i)
        ASSERT_NEAR(whole[i], want[i], tol + tol * std::fabs(want[i]))
            << IsaName(isa) << " " << KvDTypeName(GetParam()) << " block=" << block_size
            << " at " << i;
      for (int64_t chunk : {1, 2, 5}) {
        const std::vector<float> got = RunChunked(c, chunk, chunk == 1 ? pool1 : pool3);
        size_t at = 0;
        ASSERT_TRUE(SameBits(whole.data(), got.data(), got.size(), &at))
            << IsaName(isa) << " " << KvDTypeName(GetParam()) << " chunk=" << chunk
            << " block=" << block_size << " at " << at;
      }
    }
  }
}

// The slots of a block not written yet hold whatever the pool left there
// (another sequence's K and V, or bytes that read as NaN scales and codes).
// A call reads its last block, and the amx level converts whole 16-key
// halves of it, scales included: those slots must change no bit of the
// output. Every level, chunks of 1 and 7 (so most calls end inside a
// block), blocks of 16 and 48, against the same run on zeroed blocks.
TEST_P(AttentionTest, UnwrittenSlotsChangeNoBit) {
  ThreadPool pool(2);
  for (auto [head_dim, num_heads, block_size, tokens] :
       {std::tuple{128, 16, 16, 45}, {64, 4, 48, 70}, {96, 6, 16, 37}}) {
    const Case c = MakeCase(GetParam(), head_dim, tokens, 50, num_heads, block_size);
    for (Isa isa : SupportedIsas()) {
      ScopedIsa scoped(isa);
      for (int64_t chunk : {1, 7}) {
        const std::vector<float> want = RunChunked(c, chunk, pool, 0x00);
        for (uint8_t fill : {0xff, 0x7c, 0x5a}) {  // all NaN; NaN f16, huge bf16; finite
          const std::vector<float> got = RunChunked(c, chunk, pool, fill);
          size_t at = 0;
          ASSERT_TRUE(SameBits(want.data(), got.data(), got.size(), &at))
              << IsaName(isa) << " " << KvDTypeName(GetParam()) << " head_dim=" << head_dim
              << " block=" << block_size << " chunk=" << chunk << " fill=" << int{fill}
              << " at " << at;
        }
      }
    }
  }
}

// Sliding windows: every level against the reference, and the bits of a
// sequence independent of chunking, threads and batching, with windows that
// start inside blocks (7, 33), on block (16) and key-group (32) boundaries,
// of one key, and wider than the context. The tiles of 1 to 4 (avx2,
// avx512) or 16 / G (amx) tokens put rows with different window starts
// together, and the first block or key group a task walks is fully masked
// for some of its rows.
TEST_P(AttentionTest, SlidingWindowMatchesReferenceAndKeepsBits) {
  ThreadPool pool1(1), pool3(3);
  using Shape = std::tuple<int64_t, int64_t, int64_t, int64_t>;
  std::vector<Shape> shapes = {{68, 4, 16, 90},  {64, 2, 16, 150},  {128, 4, 32, 150},
                               {64, 16, 16, 70}, {64, 6, 48, 150}, {40, 2, 16, 60}};
  std::vector<int64_t> windows = {1, 7, 16, 32, 33, 200};
  // Under the sanitizers (about 20x slower here: 150 s for the three KV
  // formats), the odd head sizes and the window edges: a window of one, one
  // just past a block, and one longer than the context.
  if (testing::kSanitizedBuild) {
    shapes = {{68, 4, 16, 90}, {64, 6, 48, 150}, {40, 2, 16, 60}};
    windows = {1, 33, 200};
  }
  for (auto [head_dim, num_heads, block_size, tokens] : shapes) {
    for (int64_t window : windows) {
      Case c = MakeCase(GetParam(), head_dim, tokens, 50, num_heads, block_size);
      c.window = window;
      std::vector<float> want;
      {
        ScopedIsa scoped(Isa::kScalar);
        want = RunChunked(c, c.tokens, pool1);
      }
      const std::string where = std::string(KvDTypeName(GetParam())) +
                                " head_dim=" + std::to_string(head_dim) +
                                " heads=" + std::to_string(num_heads) +
                                " block=" + std::to_string(block_size) +
                                " window=" + std::to_string(window);
      for (Isa isa : SupportedIsas()) {
        ScopedIsa scoped(isa);
        const std::vector<float> whole = RunChunked(c, c.tokens, pool1);
        const float tol = AttentionTolerance(isa, c.layout);
        for (size_t i = 0; i < whole.size(); ++i)
          ASSERT_NEAR(whole[i], want[i], tol + tol * std::fabs(want[i]))
              << IsaName(isa) << " " << where << " at " << i;
        for (int64_t chunk : {1, 3, 16}) {
          std::vector<float> got = RunChunked(c, chunk, chunk == 3 ? pool3 : pool1);
          size_t at = 0;
          ASSERT_TRUE(SameBits(whole.data(), got.data(), got.size(), &at))
              << IsaName(isa) << " " << where << " chunk=" << chunk << " at " << at;
        }
        // A decode step batched with a prefill chunk of another sequence.
        const KvLayout& l = c.layout;
        const float scale = 1.0f / std::sqrt(static_cast<float>(l.head_dim));
        const int64_t qrow = c.num_heads * l.head_dim;
        Blocks a(l, c.tokens), b(l, c.tokens);
        WriteKv(l, 1, a.ptrs.data(), 0, c.tokens, c.k.data(), c.v.data());
        WriteKv(l, 1, b.ptrs.data(), 0, 50, c.k.data(), c.v.data());
        std::vector<float> out_a(qrow), out_b(13 * qrow);
        AttentionSeq seqs[2] = {{c.q.data() + (c.tokens - 1) * qrow, out_a.data(), 1,
                                 c.tokens - 1, a.ptrs.data(), window},
                                {c.q.data() + 37 * qrow, out_b.data(), 13, 37, b.ptrs.data(),
                                 window}};
        PagedAttention(l, 1, c.num_heads, scale, std::span<const AttentionSeq>(seqs, 2), pool3);
        ASSERT_TRUE(SameBits(out_a.data(), whole.data() + (c.tokens - 1) * qrow, qrow))
            << IsaName(isa) << " " << where;
        ASSERT_TRUE(SameBits(out_b.data(), whole.data() + 37 * qrow, 13 * qrow))
            << IsaName(isa) << " " << where;
      }
    }
  }
}

// The window cuts: keys before it do not change a bit of the output (their
// K and V are overwritten with other values), and a window shorter than the
// context gives another result than none.
TEST_P(AttentionTest, KeysBeforeTheWindowAreNotAttended) {
  ThreadPool pool(2);
  const int64_t tokens = 100, window = 21;
  Case c = MakeCase(GetParam(), 64, tokens, 60, 4, 16);
  c.window = window;
  const KvLayout& l = c.layout;
  const float scale = 1.0f / std::sqrt(static_cast<float>(l.head_dim));
  const int64_t qrow = c.num_heads * l.head_dim, kvrow = l.num_kv_heads * l.head_dim;
  const int64_t cut = tokens - window;  // the last query sees positions [cut, tokens)
  const std::vector<float> k2 = RandomFloats(cut * kvrow, 61, -2, 2), v2 = RandomFloats(cut * kvrow, 62);
  for (Isa isa : SupportedIsas()) {
    ScopedIsa scoped(isa);
    auto last_row = [&](const std::vector<float>& k, const std::vector<float>& v, int64_t w) {
      Blocks blocks(l, tokens);
      WriteKv(l, 1, blocks.ptrs.data(), 0, tokens, k.data(), v.data());
      std::vector<float> out(qrow);
      AttentionSeq s{c.q.data() + (tokens - 1) * qrow, out.data(), 1, tokens - 1,
                     blocks.ptrs.data(), w};
      PagedAttention(l, 1, c.num_heads, scale, std::span<const AttentionSeq>(&s, 1), pool);
      return out;
    };
    std::vector<float> k = c.k, v = c.v;
    std::copy(k2.begin(), k2.end(), k.begin());
    std::copy(v2.begin(), v2.end(), v.begin());
    const std::vector<float> want = last_row(c.k, c.v, window);
    ASSERT_TRUE(SameBits(want.data(), last_row(k, v, window).data(), qrow)) << IsaName(isa);
    EXPECT_FALSE(SameBits(want.data(), last_row(c.k, c.v, 0).data(), qrow)) << IsaName(isa);
    EXPECT_FALSE(SameBits(want.data(), last_row(c.k, c.v, window + 1).data(), qrow))
        << IsaName(isa);
  }
}

// q4 and q4r attention on every level against f32 attention over the values
// their blocks hold (read back with the reference reader, rotated back for
// q4r): the kernels convert the codes exactly, so q4 is as close as f32 KV
// is to itself (1e-5) where q and p keep ~16 bits or more; q4r adds the
// rotations of q and of the output (1e-4). The avx512 level's dot path rounds
// q and the weights to bf16: AttentionTolerance there.
TEST(AttentionQ4, MatchesF32AttentionOverTheDequantizedValues) {
  ThreadPool pool(2);
  for (KvDType dtype : {KvDType::kQ4, KvDType::kQ4r}) {
    for (auto [head_dim, num_heads, tokens] : {std::tuple{128, 4, 70}, {96, 6, 45}, {64, 16, 40}}) {
      const Case c = MakeCase(dtype, head_dim, tokens, 80, num_heads);
      const KvLayout& l = c.layout;
      Blocks blocks(l, tokens);
      WriteKv(l, 1, blocks.ptrs.data(), 0, tokens, c.k.data(), c.v.data());
      Case f = c;
      f.layout.dtype = KvDType::kF32;
      for (int64_t t = 0; t < tokens; ++t) {
        for (int h = 0; h < l.num_kv_heads; ++h) {
          for (int kv = 0; kv < 2; ++kv) {
            float* row = (kv == 0 ? f.k : f.v).data() + (t * l.num_kv_heads + h) * head_dim;
            for (int d = 0; d < head_dim; ++d)
              row[d] = reference::ReadKv(l, 1, kv, blocks.ptrs.data(), t, h, d);
            if (dtype == KvDType::kQ4r) HadamardRotate(row, head_dim);
          }
        }
      }
      std::vector<float> want;
      {
        ScopedIsa scoped(Isa::kScalar);
        want = RunChunked(f, tokens, pool);
      }
      const float f32_tol = dtype == KvDType::kQ4 ? 1e-5f : 1e-4f;
      for (Isa isa : SupportedIsas()) {
        ScopedIsa scoped(isa);
        const float tol = std::max(f32_tol, AttentionTolerance(isa, l));
        const std::vector<float> got = RunChunked(c, 7, pool);
        for (size_t i = 0; i < got.size(); ++i)
          ASSERT_NEAR(got[i], want[i], tol + tol * std::fabs(want[i]))
              << IsaName(isa) << " " << KvDTypeName(dtype) << " head_dim=" << head_dim
              << " at " << i;
        // The avx2 and scalar levels run q4 through their f32 kernel on the
        // values converted exactly: the f32 KV's bits on the same level.
        if (dtype == KvDType::kQ4 && (isa == Isa::kAvx2 || isa == Isa::kScalar)) {
          const std::vector<float> f32_kv = RunChunked(f, 7, pool);
          size_t at = 0;
          ASSERT_TRUE(SameBits(f32_kv.data(), got.data(), got.size(), &at))
              << IsaName(isa) << " head_dim=" << head_dim << " at " << at;
        }
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(KvDTypes, AttentionTest,
                         ::testing::Values(KvDType::kF32, KvDType::kBf16, KvDType::kInt8,
                                           KvDType::kQ4, KvDType::kQ4r),
                         [](const auto& info) { return std::string(KvDTypeName(info.param)); });

}  // namespace
}  // namespace kvfork
