// AMX paged attention for bf16, int8, q4 and q4r KV (head_dim a multiple of
// 32, at most 256, block_size a multiple of 16); every other layout (f32 KV
// among them) runs avx512::PagedAttention.
//
// A task is one KV head of a span of query tokens of one sequence. Its query
// rows (token, query head of the GQA group) go 16 to a tile; keys go 32 at a
// time (a key group: positions [32 g, 32 g + 32), the same for every chunking)
// through an online softmax:
//
//   S^T = K * Q^T    A: 16 keys x 32 dims straight from the KV block (its
//                    natural [slot][head_dim] layout), B: Q^T packed once per
//                    tile, C: 16 keys x 16 query rows, two per key group.
//   softmax          AVX-512 with the 16 query rows in the lanes: no
//                    horizontal reductions; keys in position order.
//   O += P * V       A: P (16 rows x 32 keys), B: V packed once per key group
//                    for the whole span (pairs of keys interleaved), C: 16
//                    rows x 16 dims, then acc = acc * corr + C per row.
//
// Q and P enter the tiles as bf16 pairs hi + lo (hi = bf16(x), lo =
// bf16(x - hi)), two TDPBF16PS each, so they keep ~16 significant bits
// rather than bf16's 8; K and V are bf16 already and enter exactly.
//
// int8 KV (one f32 scale per row) enters the same tiles exactly: codes in
// [-127, 127] are bf16 integers. A key group's K rows are converted once per
// span into bf16 rows (PackedK) and its V rows into the packed B tiles, each
// with its 32 scales; a key's K scale multiplies its score row before the
// softmax scale, and its V scale multiplies its column of P after the sum
// of p (so l is the sum of the probabilities, and P' = p * s_v meets the
// integer codes). No dequantized copy of the cache is kept: the packed rows
// are one key group's, reused by every tile of the span.
//
// q4 KV (q4r reads alike: ops.cc rotates its queries and outputs): a value
// is (c - 8) * d with d the f16 scale of its row's 32-dim group, and a
// 32-dim chunk of a tile is exactly one group. So the tiles take the codes
// as the bf16 integers c - 8 (exact, one vpermw per 32 values from a
// 16-entry table) and the scales go where they are constant:
//
//   S    chunk c's C tile is stored and each key row times its d_k of group
//        c, summed over the chunks in order on AVX-512 (score = sum_c C_c *
//        d_k[c], the first a multiply, then FMAs);
//   O    P_c = p * d_v[c] (each key's column of P times its group-c V
//        scale, after l took the sum of p), split hi and lo per group, meets
//        the integer V codes of the group's two 16-dim B tiles.
//
// Per key group the codes are unpacked once for the span (K rows as they
// are, V rows interleaved by key pairs) and nothing is multiplied on them,
// so a decode step (one tile, G real rows) pays a few instructions per 32
// values plus G rows of P per group, where splitting every dequantized K
// and V value into bf16 hi and lo cost it 2x bf16 KV's attention time.
//
// Invariance (DESIGN.md invariant 1): every tile element depends only on its
// own A row and B column, so a query row's scores, probabilities and output
// are computed by the same operations in the same order whichever rows share
// its tile; a row whose context ends inside a key group sees the later keys
// masked (-inf scores: corr = exp(0) = 1, p = 0), and a group past its whole
// context leaves its state as it was, as in the avx512 kernel. Decode (one
// token) runs the same code. Results differ from the avx512 level's (another
// summation order, ~2^-17 relative rounding of Q and P), as levels may.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"

#include <atomic>
#include <cmath>
#include <cstring>

#include "kernels/amx_tiles.h"
#include "kernels/ops_isa.h"
#include "kernels/scratch.h"
#include "kernels/simd_avx512.h"

namespace kvfork::amx {
namespace {

using avx512::Exp;
using avx512::Transpose16x16;

constexpr int kRows = 16;         // query rows per tile
constexpr int kGroupKeys = 32;    // keys per online-softmax step
constexpr int kMaxHeadDim = 256;  // acc and packed Q sizes
constexpr int kSpanTiles = 8;     // tiles per task, sharing each packed V
constexpr int64_t kTileStride = 64;  // bytes between rows of a packed tile

bool Supported(const KvLayout& l) {
  return (l.dtype == KvDType::kBf16 || l.dtype == KvDType::kInt8 || IsQ4(l.dtype)) &&
         l.head_dim % 32 == 0 && l.head_dim <= kMaxHeadDim && l.block_size % 16 == 0;
}

// One tile of query rows: row i = token i / G of the tile, head i % G of the
// group; rows past tokens * G are padding (zero queries, never stored).
struct alignas(64) QueryTile {
  uint16_t qt[kMaxHeadDim / 32][2][kRows * 32];  // Q^T B tiles per 32 dims: hi, lo
  float acc[kRows][kMaxHeadDim];                 // O, unnormalized
  int32_t ctx[kRows];                            // keys a row sees: positions < ctx
  int32_t first[kRows];                          // and >= first (its sliding window)
  float m[kRows];                                // running max score
  float l[kRows];                                // running sum of p
  int64_t t0;                                    // first query token (of the sequence)
  int tokens;
  int rows;  // real rows, tokens * G
  int64_t ctx_end;  // the largest ctx
};

// The V rows of one key group, packed for the whole span: B tile d (dims
// [16 d, 16 d + 16)) row k = {V[2k][n], V[2k+1][n]} for n in the chunk.
struct alignas(64) PackedV {
  uint16_t tiles[kMaxHeadDim / 16][kRows * 32];  // q4 KV: the integer codes c - 8
  float scale[kGroupKeys];  // int8 KV: each key's V scale (0 past the keys written)
  // q4 KV: d_v of group g of key j at [g][j], keys in lanes for P (0 past
  // the keys written).
  float q4_scale[kMaxHeadDim / 32][kGroupKeys];
};

// int8 and q4 KV: the K rows of one key group as bf16 in the block's row
// layout ([key][head_dim], stride head_dim * 2 bytes), and their scales (0
// past the keys written, whose rows are zeros).
struct alignas(64) PackedK {
  uint16_t rows[kGroupKeys * kMaxHeadDim];  // key j at j * head_dim; q4: codes c - 8
  float scale[kGroupKeys];                  // int8 KV
  float q4_scale[kGroupKeys * kMaxHeadDim / 32];  // q4 KV: d_k of key j, group g at j * groups + g
};

// 32 bf16 of x (f32, 32 values) as hi and lo = bf16(x - hi), in order. hi
// back in f32 is one word permute per 16 values: bf16 word k into the high
// word of dword k, the low word zeroed (a widen and shift did the same in
// three instructions, the high half after an extract).
inline void SplitBf16(__m512 x0, __m512 x1, __m512i* hi, __m512i* lo) {
  const __m512bh h = _mm512_cvtne2ps_pbh(x1, x0);
  __m512i hb;
  std::memcpy(&hb, &h, sizeof(hb));
  const __m512i lanes = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
  const __mmask32 high_words = 0xAAAAAAAAu;
  const __m512 h0 = _mm512_castsi512_ps(
      _mm512_maskz_permutexvar_epi16(high_words, _mm512_slli_epi32(lanes, 16), hb));
  const __m512 h1 = _mm512_castsi512_ps(_mm512_maskz_permutexvar_epi16(
      high_words, _mm512_slli_epi32(_mm512_add_epi32(lanes, _mm512_set1_epi32(16)), 16), hb));
  const __m512bh lb = _mm512_cvtne2ps_pbh(_mm512_sub_ps(x1, h1), _mm512_sub_ps(x0, h0));
  *hi = hb;
  std::memcpy(lo, &lb, sizeof(*lo));
}

void InitTile(const KvLayout& l, int num_heads, int G, const AttentionSeq& s, int64_t t0,
              int tokens, int kvh, QueryTile* tile) {
  const int hd = l.head_dim;
  const int rows = tokens * G;
  tile->t0 = t0;
  tile->tokens = tokens;
  tile->rows = rows;
  for (int i = 0; i < kRows; ++i) {
    // Padding rows copy row 0's context so their math stays finite.
    tile->ctx[i] = static_cast<int32_t>(s.start_pos + t0 + (i < rows ? i / G : 0) + 1);
    tile->first[i] = static_cast<int32_t>(AttentionWindowStart(tile->ctx[i] - 1, s.window));
    tile->m[i] = -INFINITY;
    tile->l[i] = 0.0f;
  }
  tile->ctx_end = s.start_pos + t0 + tokens;
  for (int i = 0; i < rows; ++i) std::memset(tile->acc[i], 0, static_cast<size_t>(hd) * sizeof(float));
  for (int c = 0; c < hd / 32; ++c) {
    __m512 hi[kRows], lo[kRows];
    for (int i = 0; i < kRows; ++i) {
      if (i >= rows) {
        hi[i] = lo[i] = _mm512_setzero_ps();
        continue;
      }
      const float* q = s.q + ((t0 + i / G) * num_heads + kvh * G + i % G) * hd + c * 32;
      __m512i h, o;
      SplitBf16(_mm512_loadu_ps(q), _mm512_loadu_ps(q + 16), &h, &o);
      hi[i] = _mm512_castsi512_ps(h);  // dword r = dims (2r, 2r + 1)
      lo[i] = _mm512_castsi512_ps(o);
    }
    Transpose16x16(hi);  // row r = dims (2r, 2r + 1) of every query row
    Transpose16x16(lo);
    for (int r = 0; r < kRows; ++r) {
      _mm512_store_ps(tile->qt[c][0] + r * 32, hi[r]);
      _mm512_store_ps(tile->qt[c][1] + r * 32, lo[r]);
    }
  }
}

// Address of K (kv = 0) or V (kv = 1) row of position pos.
inline const uint8_t* KvRow(const KvLayout& l, const AttentionSeq& s, int layer, int kv, int kvh,
                            int64_t pos) {
  const int bs = l.block_size;
  return s.blocks[pos / bs] + l.PlaneOffset(layer, kv, kvh) +
         static_cast<size_t>(pos % bs) * l.RowBytes();
}

// The f32 scale of an int8 K or V row.
inline const float& KvScale(const KvLayout& l, const AttentionSeq& s, int layer, int kv, int kvh,
                            int64_t pos) {
  const int bs = l.block_size;
  const uint8_t* scales = s.blocks[pos / bs] + l.ScaleOffset(layer, kv, kvh);
  return reinterpret_cast<const float*>(scales)[pos % bs];
}

// Dims [32 c, 32 c + 32) of a K or V row as 32 bf16: loaded as they are
// (bf16 KV) or converted from int8 codes, which bf16 holds exactly.
inline __m512i RowChunkBf16(KvDType dtype, const uint8_t* row, int c) {
  if (dtype == KvDType::kBf16) return _mm512_loadu_si512(row + c * 64);
  const __m128i* p = reinterpret_cast<const __m128i*>(row + c * 32);
  const __m512 lo = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128(p)));
  const __m512 hi = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128(p + 1)));
  const __m512bh b = _mm512_cvtne2ps_pbh(hi, lo);
  __m512i out;
  std::memcpy(&out, &b, sizeof(out));
  return out;
}

// The f16 scales of a q4 K or V row.
inline const uint16_t* Q4Scales(const KvLayout& l, const AttentionSeq& s, int layer, int kv,
                                int kvh, int64_t pos) {
  const int bs = l.block_size;
  return reinterpret_cast<const uint16_t*>(s.blocks[pos / bs] + l.Q4ScaleOffset(layer, kv, kvh) +
                                           static_cast<size_t>(pos % bs) * l.RowScaleBytes());
}

// The bf16 integers c - 8 for the nibbles c = 0..15, twice (words c and
// 16 + c): vpermw reads the low 5 bits of each word index, so a code byte
// indexes its low nibble's level whatever its high nibble's lowest bit.
inline __m512i Q4LevelsBf16() {
  const __m512 levels =
      _mm512_setr_ps(-8, -7, -6, -5, -4, -3, -2, -1, 0, 1, 2, 3, 4, 5, 6, 7);
  const __m512bh b = _mm512_cvtne2ps_pbh(levels, levels);  // exact: small integers
  __m512i out;
  std::memcpy(&out, &b, sizeof(out));
  return out;
}

// Dims [32 c, 32 c + 32) of a q4 row (kv_layout.h) as 32 bf16 integers
// c - 8 in dim order: the group's 16 code bytes widened to words, the low
// nibbles (dims 32 c + i) then the high ones (32 c + 16 + i) looked up.
inline __m512i Q4ChunkCodes(const uint8_t* codes, int c, __m512i levels) {
  const __m256i b =
      _mm256_cvtepu8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(codes + c * 16)));
  const __m512i idx = _mm512_inserti64x4(_mm512_castsi256_si512(b), _mm256_srli_epi16(b, 4), 1);
  return _mm512_permutexvar_epi16(idx, levels);
}

// Dims [32 c, 32 c + 32) of the q4 V rows of keys a and b (nullptr: a key
// not written, read as zeros) as one row of each of the group's two B tiles:
// words 2i and 2i + 1 are a's and b's dim 32 c + i (*lo) and 32 c + 16 + i
// (*hi). Interleaving the code bytes before widening gives the pair order.
inline void Q4PairCodes(const uint8_t* a, const uint8_t* b, int c, __m512i levels, __m512i* lo,
                        __m512i* hi) {
  const __m128i zero_level = _mm_set1_epi8(static_cast<char>(0x88));  // both nibbles 8: 0
  const __m128i x =
      a ? _mm_loadu_si128(reinterpret_cast<const __m128i*>(a + c * 16)) : zero_level;
  const __m128i y =
      b ? _mm_loadu_si128(reinterpret_cast<const __m128i*>(b + c * 16)) : zero_level;
  const __m512i w = _mm512_cvtepu8_epi16(
      _mm256_inserti128_si256(_mm256_castsi128_si256(_mm_unpacklo_epi8(x, y)),
                              _mm_unpackhi_epi8(x, y), 1));
  *lo = _mm512_permutexvar_epi16(w, levels);
  *hi = _mm512_permutexvar_epi16(_mm512_srli_epi16(w, 4), levels);
}

// The scales of q4 keys [g0, g0 + 32) of a K (kv = 0) or V plane as f32,
// out[j * groups + g] for key j and 32-dim group g; zeros at or past n_keys.
// Keys [g0, g0 + 16) and [g0 + 16, g0 + 32) each lie in one block
// (block_size is a multiple of 16), their scales contiguous there.
void Q4GroupScales(const KvLayout& l, const AttentionSeq& s, int layer, int kv, int kvh,
                   int64_t g0, int n_keys, float* out) {
  const int groups = l.head_dim / 32;
  for (int h = 0; h < 2; ++h) {
    float* dst = out + 16 * h * groups;
    if (16 * h >= n_keys) {
      std::memset(dst, 0, sizeof(float) * 16 * groups);
      continue;
    }
    const uint16_t* src = Q4Scales(l, s, layer, kv, kvh, g0 + 16 * h);
    for (int o = 0; o < 16 * groups; o += 16)
      _mm512_storeu_ps(dst + o, _mm512_cvtph_ps(_mm256_loadu_si256(
                                    reinterpret_cast<const __m256i*>(src + o))));
  }
  // Slots of the last block not written yet hold whatever was there.
  for (int j = n_keys; j < kGroupKeys; ++j)
    for (int g = 0; g < groups; ++g) out[j * groups + g] = 0.0f;
}

// q4 KV: K rows [g0, g0 + 32) as the bf16 integer codes c - 8 and their
// scales, zeros at or past n_keys.
void PackKQ4(const KvLayout& l, const AttentionSeq& s, int layer, int kvh, int64_t g0, int n_keys,
             PackedK* pk) {
  const int hd = l.head_dim;
  const __m512i levels = Q4LevelsBf16();
  for (int j = 0; j < kGroupKeys; ++j) {
    uint16_t* dst = pk->rows + j * hd;
    if (j >= n_keys) {
      std::memset(dst, 0, static_cast<size_t>(hd) * 2);
      continue;
    }
    const uint8_t* row = KvRow(l, s, layer, 0, kvh, g0 + j);
    for (int c = 0; c < hd / 32; ++c) _mm512_storeu_si512(dst + c * 32, Q4ChunkCodes(row, c, levels));
  }
  Q4GroupScales(l, s, layer, 0, kvh, g0, n_keys, pk->q4_scale);
}

// q4 KV: V rows [g0, g0 + 32) as integer-code B tiles, interleaved by key
// pairs, and their scales by group with keys in lanes; keys at or past
// n_keys read as zeros (scale 0).
void PackVQ4(const KvLayout& l, const AttentionSeq& s, int layer, int kvh, int64_t g0, int n_keys,
             PackedV* pv) {
  const int hd = l.head_dim, groups = hd / 32;
  const __m512i levels = Q4LevelsBf16();
  for (int k = 0; k < kGroupKeys / 2; ++k) {
    const int j = 2 * k;
    const uint8_t* va = j < n_keys ? KvRow(l, s, layer, 1, kvh, g0 + j) : nullptr;
    const uint8_t* vb = j + 1 < n_keys ? KvRow(l, s, layer, 1, kvh, g0 + j + 1) : nullptr;
    for (int c = 0; c < groups; ++c) {
      __m512i lo, hi;
      Q4PairCodes(va, vb, c, levels, &lo, &hi);
      _mm512_store_si512(pv->tiles[2 * c] + k * 32, lo);
      _mm512_store_si512(pv->tiles[2 * c + 1] + k * 32, hi);
    }
  }
  alignas(64) float by_key[kGroupKeys * kMaxHeadDim / 32];
  Q4GroupScales(l, s, layer, 1, kvh, g0, n_keys, by_key);
  const __m512i key_offsets =
      _mm512_mullo_epi32(_mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15),
                         _mm512_set1_epi32(groups));
  for (int g = 0; g < groups; ++g)
    for (int h = 0; h < 2; ++h)
      _mm512_store_ps(pv->q4_scale[g] + 16 * h,
                      _mm512_i32gather_ps(
                          _mm512_add_epi32(key_offsets, _mm512_set1_epi32(16 * h * groups + g)),
                          by_key, 4));
}

// int8 KV: K rows [g0, g0 + 32) as bf16 rows, zeros (scale 0) at or past n_keys.
void PackK(const KvLayout& l, const AttentionSeq& s, int layer, int kvh, int64_t g0, int n_keys,
           PackedK* pk) {
  const int hd = l.head_dim;
  for (int j = 0; j < kGroupKeys; ++j) {
    uint16_t* dst = pk->rows + j * hd;
    if (j >= n_keys) {
      std::memset(dst, 0, static_cast<size_t>(hd) * 2);
      pk->scale[j] = 0.0f;
      continue;
    }
    const uint8_t* row = KvRow(l, s, layer, 0, kvh, g0 + j);
    for (int c = 0; c < hd / 32; ++c)
      _mm512_storeu_si512(dst + c * 32, RowChunkBf16(KvDType::kInt8, row, c));
    pk->scale[j] = KvScale(l, s, layer, 0, kvh, g0 + j);
  }
}

// bf16 and int8 KV: V rows [g0, g0 + 32) interleaved by key pairs; keys at
// or past n_keys (not written yet) are zeros, so their p = 0 adds nothing.
void PackV(const KvLayout& l, const AttentionSeq& s, int layer, int kvh, int64_t g0, int n_keys,
           PackedV* pv) {
  const int hd = l.head_dim;
  alignas(64) uint16_t idx_lo[32], idx_hi[32];
  for (int n = 0; n < 16; ++n) {
    idx_lo[2 * n] = static_cast<uint16_t>(n);
    idx_lo[2 * n + 1] = static_cast<uint16_t>(32 + n);
    idx_hi[2 * n] = static_cast<uint16_t>(16 + n);
    idx_hi[2 * n + 1] = static_cast<uint16_t>(48 + n);
  }
  const __m512i ilo = _mm512_load_si512(idx_lo), ihi = _mm512_load_si512(idx_hi);
  for (int k = 0; k < kGroupKeys / 2; ++k) {
    const int j = 2 * k;
    const uint8_t* va = j < n_keys ? KvRow(l, s, layer, 1, kvh, g0 + j) : nullptr;
    const uint8_t* vb = j + 1 < n_keys ? KvRow(l, s, layer, 1, kvh, g0 + j + 1) : nullptr;
    if (l.dtype == KvDType::kInt8) {
      pv->scale[j] = va ? KvScale(l, s, layer, 1, kvh, g0 + j) : 0.0f;
      pv->scale[j + 1] = vb ? KvScale(l, s, layer, 1, kvh, g0 + j + 1) : 0.0f;
    }
    for (int c = 0; c < hd / 32; ++c) {
      const __m512i a = va ? RowChunkBf16(l.dtype, va, c) : _mm512_setzero_si512();
      const __m512i b = vb ? RowChunkBf16(l.dtype, vb, c) : _mm512_setzero_si512();
      _mm512_store_si512(pv->tiles[2 * c] + k * 32, _mm512_permutex2var_epi16(a, ilo, b));
      _mm512_store_si512(pv->tiles[2 * c + 1] + k * 32, _mm512_permutex2var_epi16(a, ihi, b));
    }
  }
}

// The next key group's K and V rows, prefetched into L2 a few lines at a time
// during the current group's work: a decode step does little work per group
// (one tile), so without this each group first waits for its 2 * head_dim
// lines from DRAM with at most the fill buffers' worth in flight, then
// computes. All at once at the group's start, the prefetches stall on those
// same fill buffers; spread over the work they overlap it. Measured (28
// layers of qwen3-0.6b attention, one query token, 2 threads, 2 MB pages):
// 2,048 keys 18.5 -> 14.2 ms per step, 600 keys 5.3 -> 4.15 ms; an L1 hint
// was slower than L2, two groups ahead no better than one.
struct GroupPrefetch {
  const char* half[4] = {};  // K keys 0-15, K 16-31, V 0-15, V 16-31 (nullptr: none)
  int lines_per_half = 0;
  int next = 0;
  int total = 0;
  // Line `next` is line `line` of half `cur`, walked without a division per
  // line (Step runs hundreds of lines a group).
  int cur = 0;
  int line = 0;

  // Keys [g0, g0 + 32) of a span whose keys below span_end exist.
  GroupPrefetch(const KvLayout& l, const AttentionSeq& s, int layer, int kvh, int64_t g0,
                int64_t span_end)
      : lines_per_half(static_cast<int>(16 * l.RowBytes() / 64)),
        total(4 * lines_per_half) {
    for (int h = 0; h < 2; ++h) {
      if (g0 + 16 * h >= span_end) break;  // no block holds these keys yet
      half[h] = reinterpret_cast<const char*>(KvRow(l, s, layer, 0, kvh, g0 + 16 * h));
      half[2 + h] = reinterpret_cast<const char*>(KvRow(l, s, layer, 1, kvh, g0 + 16 * h));
      // int8: the 16 keys' K and V scales sit in their own lines at the
      // block's end; four lines a group, fetched now rather than waited for.
      if (l.dtype == KvDType::kInt8)
        for (int kv = 0; kv < 2; ++kv)
          _mm_prefetch(reinterpret_cast<const char*>(&KvScale(l, s, layer, kv, kvh, g0 + 16 * h)),
                       _MM_HINT_T1);
      // q4: the 16 keys' f16 scales follow the plane's codes (2 lines at
      // head_dim 128).
      if (IsQ4(l.dtype))
        for (int kv = 0; kv < 2; ++kv) {
          const char* sc =
              reinterpret_cast<const char*>(Q4Scales(l, s, layer, kv, kvh, g0 + 16 * h));
          for (size_t o = 0; o < 16 * l.RowScaleBytes(); o += 64) _mm_prefetch(sc + o, _MM_HINT_T1);
        }
    }
  }
  void Step(int n) {
    for (; n > 0 && next < total; --n, ++next) {
      if (line == lines_per_half) {
        line = 0;
        ++cur;
      }
      if (half[cur] != nullptr) _mm_prefetch(half[cur] + line * 64, _MM_HINT_T1);
      ++line;
    }
  }
};

// acc = acc * corr + O for dims [16 d, 16 d + 32) of the tile's real rows,
// O in tmm0 (dims 16 d..) and tmm1 (16 d + 16..).
inline void AddPv(int d, const float* corr_rows, QueryTile* tile) {
  alignas(64) float o[2][kRows][16];
  KVFORK_TILE_STORE(0, o[0], kTileStride);
  KVFORK_TILE_STORE(1, o[1], kTileStride);
  for (int i = 0; i < tile->rows; ++i) {
    const __m512 c = _mm512_set1_ps(corr_rows[i]);
    float* a = tile->acc[i] + d * 16;
    _mm512_store_ps(a, _mm512_fmadd_ps(_mm512_load_ps(a), c, _mm512_load_ps(o[0][i])));
    _mm512_store_ps(a + 16, _mm512_fmadd_ps(_mm512_load_ps(a + 16), c, _mm512_load_ps(o[1][i])));
  }
}

// One step of P x V: O for dims [16 d, 16 d + 32) = P * V's chunks d and
// d + 1, P's hi and lo halves already in tmm2 and tmm3 (hi first, then lo,
// into each O tile: the same order for every format), then AddPv.
void PvChunkPair(int d, const PackedV& pv, const float* corr_rows, QueryTile* tile) {
  KVFORK_TILE_ZERO(0);
  KVFORK_TILE_ZERO(1);
  KVFORK_TILE_LOAD(4, pv.tiles[d], kTileStride);
  KVFORK_TILE_LOAD(5, pv.tiles[d + 1], kTileStride);
  KVFORK_TILE_DP(0, 2, 4);
  KVFORK_TILE_DP(0, 3, 4);
  KVFORK_TILE_DP(1, 2, 5);
  KVFORK_TILE_DP(1, 3, 5);
  AddPv(d, corr_rows, tile);
}

// q4 KV: S^T of one key group (keys in rows) into st. Per 32-dim chunk c
// (q4 group c) the K codes of keys 0-15 (tmm0) and 16-31 (tmm1) meet Q_hi
// and Q_lo, loaded once for both, and the C tiles are stored; then each
// key's row is multiplied by its d_k of group c and the chunks summed in
// order (the first a multiply, then one FMA each) in a register: per
// element a fixed sequence, whatever else shares the tile. All chunks' tile
// products come first, so they overlap one another and the stores.
void ScoresQ4(int hd, bool second, const PackedK& pk, const QueryTile& tile, GroupPrefetch& pf,
              float (*st)[kRows]) {
  const int groups = hd / 32;
  const int64_t row_bytes = int64_t{hd} * 2;
  alignas(64) float part[kMaxHeadDim / 32][kGroupKeys][kRows];  // [chunk][key][query row]
  for (int c = 0; c < groups; ++c) {
    pf.Step(16);
    KVFORK_TILE_ZERO(0);
    KVFORK_TILE_LOAD(4, tile.qt[c][0], kTileStride);
    KVFORK_TILE_LOAD(5, tile.qt[c][1], kTileStride);
    KVFORK_TILE_LOAD(2, pk.rows + c * 32, row_bytes);
    KVFORK_TILE_DP(0, 2, 4);
    if (second) {
      KVFORK_TILE_ZERO(1);
      KVFORK_TILE_LOAD(3, pk.rows + 16 * hd + c * 32, row_bytes);
      KVFORK_TILE_DP(1, 3, 4);
    }
    KVFORK_TILE_DP(0, 2, 5);
    KVFORK_TILE_STORE(0, part[c][0], kTileStride);
    if (second) {
      KVFORK_TILE_DP(1, 3, 5);
      KVFORK_TILE_STORE(1, part[c][16], kTileStride);
    }
  }
  const int keys = second ? kGroupKeys : 16;
  for (int j = 0; j < keys; ++j) {
    const float* dk = pk.q4_scale + j * groups;
    __m512 acc = _mm512_mul_ps(_mm512_load_ps(part[0][j]), _mm512_set1_ps(dk[0]));
    for (int c = 1; c < groups; ++c)
      acc = _mm512_fmadd_ps(_mm512_load_ps(part[c][j]), _mm512_set1_ps(dk[c]), acc);
    _mm512_store_ps(st[j], acc);
  }
  // Keys 16-31 not written: masked below.
  for (int j = keys; j < kGroupKeys; ++j) _mm512_store_ps(st[j], _mm512_setzero_ps());
}

// q4 KV: acc = acc * corr + P_g * V_g for each 32-dim group g (two 16-dim
// chunks): P_g is P (sc[i], sc[16 + i]: row i's keys 0-15 and 16-31) times
// each key's d_v of group g, split into hi and lo A tiles for the tile's
// real rows only; V_g the group's two integer-code B tiles.
void AccumulatePvQ4(int hd, const __m512* sc, const PackedV& pv, const float* corr_rows,
                    QueryTile* tile, GroupPrefetch& pf) {
  const int rows = tile->rows;
  alignas(64) uint16_t p_hi[kRows * 32], p_lo[kRows * 32];
  // Padding rows: zeros once (their O is never read).
  for (int i = rows; i < kRows; ++i) {
    _mm512_store_si512(p_hi + i * 32, _mm512_setzero_si512());
    _mm512_store_si512(p_lo + i * 32, _mm512_setzero_si512());
  }
  for (int d = 0; d < hd / 16; d += 2) {
    pf.Step(16);
    const float* dv = pv.q4_scale[d / 2];
    const __m512 dv0 = _mm512_load_ps(dv), dv1 = _mm512_load_ps(dv + 16);
    for (int i = 0; i < rows; ++i) {
      __m512i h, o;
      SplitBf16(_mm512_mul_ps(sc[i], dv0), _mm512_mul_ps(sc[16 + i], dv1), &h, &o);
      _mm512_store_si512(p_hi + i * 32, h);
      _mm512_store_si512(p_lo + i * 32, o);
    }
    KVFORK_TILE_LOAD(2, p_hi, kTileStride);
    KVFORK_TILE_LOAD(3, p_lo, kTileStride);
    PvChunkPair(d, pv, corr_rows, tile);
  }
}

// One key group [g0, g0 + 32) for one tile (g0 < tile->ctx_end); span_end:
// keys written for the span (positions below it exist in the block table).
// pf takes 16 steps per S and per PV chunk and head_dim / 32 per key: 2 *
// head_dim lines in all, the whole next group.
// pk: the group's K rows as bf16 (int8 KV; q4 KV: the integer codes;
// nullptr for bf16 KV, read in place).
void TileGroup(const KvLayout& l, const AttentionSeq& s, int layer, int kvh, float scale,
               int64_t g0, int64_t span_end, const PackedK* pk, const PackedV& pv,
               QueryTile* tile, GroupPrefetch& pf) {
  const int hd = l.head_dim;
  const int64_t row_bytes = int64_t{hd} * 2;  // of bf16 rows, in place or packed
  const bool second = g0 + 16 < span_end;  // keys 16..31 of the group exist
  const bool int8 = l.dtype == KvDType::kInt8;
  const bool q4 = IsQ4(l.dtype);

  // S^T: keys in rows, query rows in columns (tmm0: keys 0-15, tmm1: 16-31).
  alignas(64) float st[kGroupKeys][kRows];
  if (q4) {
    ScoresQ4(hd, second, *pk, *tile, pf, st);
  } else {
    const uint8_t* k0 = pk ? reinterpret_cast<const uint8_t*>(pk->rows)
                           : KvRow(l, s, layer, 0, kvh, g0);
    const uint8_t* k1 = !second ? nullptr
                        : pk    ? reinterpret_cast<const uint8_t*>(pk->rows + 16 * hd)
                                : KvRow(l, s, layer, 0, kvh, g0 + 16);
    KVFORK_TILE_ZERO(0);
    KVFORK_TILE_ZERO(1);
    for (int c = 0; c < hd / 32; ++c) {
      pf.Step(16);
      KVFORK_TILE_LOAD(4, tile->qt[c][0], kTileStride);
      KVFORK_TILE_LOAD(5, tile->qt[c][1], kTileStride);
      KVFORK_TILE_LOAD(2, k0 + c * 64, row_bytes);
      KVFORK_TILE_DP(0, 2, 4);
      KVFORK_TILE_DP(0, 2, 5);
      if (second) {
        KVFORK_TILE_LOAD(3, k1 + c * 64, row_bytes);
        KVFORK_TILE_DP(1, 3, 4);
        KVFORK_TILE_DP(1, 3, 5);
      }
    }
    KVFORK_TILE_STORE(0, st[0], kTileStride);
    KVFORK_TILE_STORE(1, st[16], kTileStride);  // zeros when !second: masked below
  }

  // Online softmax, lanes = query rows, keys in position order.
  const __m512i ctx = _mm512_load_si512(tile->ctx);
  const __m512i first = _mm512_load_si512(tile->first);
  const __m512 vscale = _mm512_set1_ps(scale), neg_inf = _mm512_set1_ps(-INFINITY);
  const __m512 m_old = _mm512_load_ps(tile->m);
  __m512 m_new = m_old;
  __m512 sc[kGroupKeys];
  for (int j = 0; j < kGroupKeys; ++j) {
    const __m512i pos = _mm512_set1_epi32(static_cast<int32_t>(g0 + j));
    const __mmask16 seen = _mm512_cmplt_epi32_mask(pos, ctx) & _mm512_cmpge_epi32_mask(pos, first);
    pf.Step(hd / 32);
    __m512 dot = _mm512_load_ps(st[j]);
    if (int8) dot = _mm512_mul_ps(dot, _mm512_set1_ps(pk->scale[j]));  // the key's scale
    sc[j] = _mm512_mask_blend_ps(seen, neg_inf, _mm512_mul_ps(dot, vscale));
    m_new = _mm512_max_ps(sc[j], m_new);
  }
  // Rows that have seen no key yet and see none here (before their window)
  // subtract 0: corr = exp(-inf) = 0 and p = 0 keep their state (-inf, 0, 0).
  const __m512 m_sub = _mm512_mask_blend_ps(_mm512_cmp_ps_mask(m_new, neg_inf, _CMP_EQ_OQ), m_new,
                                            _mm512_setzero_ps());
  const __m512 corr = Exp(_mm512_sub_ps(m_old, m_sub));
  for (int j = 0; j < kGroupKeys; ++j) sc[j] = Exp(_mm512_sub_ps(sc[j], m_sub));
  // Sum of p by one fixed tree over the 32 keys.
  __m512 t[16];
  for (int j = 0; j < 16; ++j) t[j] = _mm512_add_ps(sc[2 * j], sc[2 * j + 1]);
  for (int w = 8; w >= 1; w /= 2)
    for (int j = 0; j < w; ++j) t[j] = _mm512_add_ps(t[2 * j], t[2 * j + 1]);
  _mm512_store_ps(tile->l, _mm512_add_ps(_mm512_mul_ps(_mm512_load_ps(tile->l), corr), t[0]));
  _mm512_store_ps(tile->m, m_new);
  // int8 V: each key's column of P times its V scale, after l took the sum.
  if (int8)
    for (int j = 0; j < kGroupKeys; ++j) sc[j] = _mm512_mul_ps(sc[j], _mm512_set1_ps(pv.scale[j]));

  alignas(64) float corr_rows[kRows];
  _mm512_store_ps(corr_rows, corr);
  Transpose16x16(sc);       // sc[i] = keys 0-15 of row i
  Transpose16x16(sc + 16);  // sc[16 + i] = keys 16-31 of row i
  if (q4) return AccumulatePvQ4(hd, sc, pv, corr_rows, tile, pf);

  // P rows (query row, 32 keys) as hi and lo A tiles. Only the tile's real
  // rows are split and, below, accumulated (a decode step has G of 16):
  // padding rows of P are zeros and their O is never read.
  const int rows = tile->rows;
  alignas(64) uint16_t p_hi[kRows * 32], p_lo[kRows * 32];
  for (int i = 0; i < kRows; ++i) {
    __m512i h = _mm512_setzero_si512(), o = h;
    if (i < rows) SplitBf16(sc[i], sc[16 + i], &h, &o);
    _mm512_store_si512(p_hi + i * 32, h);
    _mm512_store_si512(p_lo + i * 32, o);
  }

  // O chunk = P * V, two 16-dim chunks at a time; then acc = acc * corr + O.
  KVFORK_TILE_LOAD(2, p_hi, kTileStride);
  KVFORK_TILE_LOAD(3, p_lo, kTileStride);
  for (int d = 0; d < hd / 16; d += 2) {
    pf.Step(16);
    PvChunkPair(d, pv, corr_rows, tile);
  }
}

void FinishTile(const KvLayout& l, int num_heads, int G, const AttentionSeq& s, int kvh,
                const QueryTile& tile) {
  const int hd = l.head_dim;
  for (int i = 0; i < tile.rows; ++i) {
    float* out = s.out + ((tile.t0 + i / G) * num_heads + kvh * G + i % G) * hd;
    const __m512 vl = _mm512_set1_ps(tile.l[i]);
    for (int d = 0; d < hd; d += 16)
      _mm512_storeu_ps(out + d, _mm512_div_ps(_mm512_load_ps(tile.acc[i] + d), vl));
  }
}

struct Task {
  const AttentionSeq* seq;
  int64_t t0;  // first query token of the span
  int64_t tokens;
  int kvh;
};

// Tokens [t0, t0 + tokens) against KV head kvh, in tiles of 16 / G tokens
// that walk the key groups together, each group's V packed once.
void AttendSpan(const KvLayout& l, int layer, int num_heads, float scale, const Task& task) {
  const AttentionSeq& s = *task.seq;
  const int G = num_heads / l.num_kv_heads;
  const int per_tile = kRows / G;
  const int ntiles = static_cast<int>((task.tokens + per_tile - 1) / per_tile);
  const bool int8 = l.dtype == KvDType::kInt8, q4 = IsQ4(l.dtype);
  uint8_t* scratch = static_cast<uint8_t*>(ThreadScratch(
      kScratchTask, sizeof(PackedV) + sizeof(PackedK) + ntiles * sizeof(QueryTile)));
  auto* pv = reinterpret_cast<PackedV*>(scratch);
  auto* pk = int8 || q4 ? reinterpret_cast<PackedK*>(scratch + sizeof(PackedV)) : nullptr;
  auto* tiles = reinterpret_cast<QueryTile*>(scratch + sizeof(PackedV) + sizeof(PackedK));
  for (int k = 0; k < ntiles; ++k) {
    const int64_t t = task.t0 + int64_t{k} * per_tile;
    const int tokens = static_cast<int>(
        task.tokens - (t - task.t0) < per_tile ? task.tokens - (t - task.t0) : per_tile);
    InitTile(l, num_heads, G, s, t, tokens, task.kvh, &tiles[k]);
  }
  const int64_t span_end = s.start_pos + task.t0 + task.tokens;  // keys written
  // Key groups wholly before the first query's window are seen by no row.
  const int64_t first_key = AttentionWindowStart(s.start_pos + task.t0, s.window);
  for (int64_t g0 = first_key / kGroupKeys * kGroupKeys; g0 < span_end; g0 += kGroupKeys) {
    const int n_keys = static_cast<int>(span_end - g0 < kGroupKeys ? span_end - g0 : kGroupKeys);
    if (q4) {
      PackVQ4(l, s, layer, task.kvh, g0, n_keys, pv);
      PackKQ4(l, s, layer, task.kvh, g0, n_keys, pk);
    } else {
      PackV(l, s, layer, task.kvh, g0, n_keys, pv);
    }
    if (int8) PackK(l, s, layer, task.kvh, g0, n_keys, pk);
    GroupPrefetch pf(l, s, layer, task.kvh, g0 + kGroupKeys, span_end);
    for (int k = 0; k < ntiles; ++k)
      if (g0 < tiles[k].ctx_end && g0 + kGroupKeys > tiles[k].first[0])
        TileGroup(l, s, layer, task.kvh, scale, g0, span_end, pk, *pv, &tiles[k], pf);
  }
  for (int k = 0; k < ntiles; ++k) FinishTile(l, num_heads, G, s, task.kvh, tiles[k]);
}

}  // namespace

void PagedAttention(const KvLayout& layout, int layer, int num_heads, float scale,
                    std::span<const AttentionSeq> seqs, ThreadPool& pool) {
  if (!Supported(layout)) return avx512::PagedAttention(layout, layer, num_heads, scale, seqs, pool);
  const int G = num_heads / layout.num_kv_heads;
  const int64_t span_tokens = int64_t{kRows / G} * kSpanTiles;
  int64_t total = 0;
  for (size_t i = 0; i < seqs.size(); ++i)
    total += (seqs[i].num_tokens + span_tokens - 1) / span_tokens * layout.num_kv_heads;
  if (total == 0) return;
  Task* tasks =
      static_cast<Task*>(ThreadScratch(kScratchCaller, static_cast<size_t>(total) * sizeof(Task)));
  int64_t n = 0;
  for (size_t i = 0; i < seqs.size(); ++i) {
    const AttentionSeq& s = seqs[i];
    for (int64_t t = 0; t < s.num_tokens; t += span_tokens)
      for (int h = 0; h < layout.num_kv_heads; ++h)
        tasks[n++] = Task{&s, t, s.num_tokens - t < span_tokens ? s.num_tokens - t : span_tokens, h};
  }
  static std::atomic<uint64_t> calls{0};
  const uint64_t call = calls.fetch_add(1, std::memory_order_relaxed) + 1;
  pool.ParallelFor(n, [&](int64_t i) {
    ConfigureTilesFor(call);
    AttendSpan(layout, layer, num_heads, scale, tasks[i]);
  });
}

}  // namespace kvfork::amx
