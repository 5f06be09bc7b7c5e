// AMX-INT8 prefill of block-quantized weights (quant_isa.h's QuantPanelFn),
// run by quant_matmul.cc on the amx level for calls of more than
// kDecodeMaxRows x rows: the 32-block formats Q8_0, Q4_0, Q4_1, Q5_0, Q5_1
// (PanelBlocks32, below), Q4_K and Q5_K (PanelK45), Q6_K (PanelQ6_K).
//
// C = X * W^T per 32-block: a C tile is 16 x rows x 16 W rows of int32, the
// exact sum of one block's 32 code products (TDPBSSD, s8 x s8). An A tile is
// 16 activation rows' 32 codes of the block, read in place (the rows are
// x_stride apart, zero past m); a B tile is the block's 32 codes of the 16 W
// rows in the layout TDPBSSD reads (tile row kk = the codes 4kk..4kk+3 of
// each W row), repacked per task from the ggml blocks into task scratch with
// the 16 rows' f32 scales beside them: one panel of 16 rows, reused by every
// 16 x rows, so the model is never copied whole.
//
// Reduction order (invariant 1): one block per TDPBSSD, so the int32 per
// (x row, W row, block) is the one avx512's Dot32Blocks sums from its
// vpdpbusd lanes; then, blocks in order, acc = fma(float(sum), d_w * d_x,
// acc) from acc = 0: Dot32Blocks' float chain, operation for operation. A
// row gives the same bits through either kernel, with any M or threads.
//
// Tile registers: tmm0-1 C (16 x 64 bytes), tmm2 and tmm4 A (16 rows x 32
// bytes), tmm3 and tmm5 B (8 rows x 64 bytes): two blocks in flight. The
// configuration is loaded at the start of every panel (it differs from
// amx_tiles.h's, which the bf16 kernels reload per call).
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"

#include <immintrin.h>

#include <cstddef>
#include <cstring>
#include <type_traits>
#include <utility>

#include "core/cpu_features.h"
#include "kernels/amx_tiles.h"
#include "kernels/quant_blocks.h"
#include "kernels/quant_codes32_avx512.h"
#include "kernels/quant_isa.h"
#include "kernels/scratch.h"

// The mins' vpdpwssd needs AVX512-VNNI: the *_amx.cc flags have it (every
// AMX CPU does), and QuantPanelKernel hands out these kernels only where the
// CPU has it.

namespace kvfork::amx {
namespace {

constexpr int kPanel = static_cast<int>(kQuantPanelRows);
static_assert(kPanel == 16, "one tile of W rows per panel");
// Row stride of packed B tiles and stored C tiles (a 64-bit register operand).
constexpr int64_t kTileStride = 64;

// Tile instructions on tile numbers fixed at compile time ("%c": the
// number without punctuation), so that one step serves every kernel's
// tiles. Memory clobbers as in amx_tiles.h.
template <int kT>
inline void TileZero() {
  __asm__ volatile("tilezero %%tmm%c0" ::"i"(kT));
}
template <int kT>
inline void TileLoad(const void* base, int64_t stride) {
  __asm__ volatile("tileloadd (%0,%1,1), %%tmm%c2" ::"r"(base), "r"(stride), "i"(kT) : "memory");
}
template <int kT>
inline void TileStore(void* base, int64_t stride) {
  __asm__ volatile("tilestored %%tmm%c0, (%1,%2,1)" ::"i"(kT), "r"(base), "r"(stride) : "memory");
}
// C += A * B on signed bytes (TDPBSSD), or signed A (activations) times
// unsigned B (weight codes, TDPBSUD). AT&T operand order: B, A, C.
template <bool kUnsignedB, int kC, int kA, int kB>
inline void TileDot() {
  if constexpr (kUnsignedB) {
    __asm__ volatile("tdpbsud %%tmm%c0, %%tmm%c1, %%tmm%c2" ::"i"(kB), "i"(kA), "i"(kC));
  } else {
    __asm__ volatile("tdpbssd %%tmm%c0, %%tmm%c1, %%tmm%c2" ::"i"(kB), "i"(kA), "i"(kC));
  }
}

// The tile step every panel kernel takes per (super-)block: zero C, then per
// chunk of K load A and B and multiply, then store C. kSlots blocks are in
// flight at once (Q8_0 runs two), each with kParts C tiles (one per B part,
// sharing the block's A: Q4_K/Q5_K's lo and hi, Q6_K's three digits),
// summed over kChunks chunks. Chunk k is bytes [64k, 64k + 64) of each of
// the 16 x rows (Q8_0's one chunk: the block's 32) and, per part, the B
// rows [16k, 16k + 16) (Q8_0: its 8); a packed block holds its parts one
// after another. Tiles: slot s's C tiles s * kParts + p first, then sets of
// one A and kParts B tiles that successive chunks take in turn, so a
// chunk's loads need not wait for the last chunk's products to free them.
template <bool kUnsignedB, int kSlots, int kParts, int kChunks>
struct TileStep {
  static constexpr int kCTiles = kSlots * kParts;
  static constexpr int kSets = (8 - kCTiles) / (1 + kParts);
  static_assert(kSets >= 1, "eight tiles");
  static constexpr int64_t kChunkBytes = 16 * kTileStride;  // one chunk's B rows of a part

  // Slot kSlot's products: a = the 16 x rows' first chunk (x_stride
  // apart), b = the packed block's first B tile.
  template <int kSlot>
  static void Products(const int8_t* a, int64_t x_stride, const void* b) {
    static_assert(kSlot < kSlots, "a slot of this step");
    [&]<int... p>(std::integer_sequence<int, p...>) {
      (TileZero<kSlot * kParts + p>(), ...);
    }(std::make_integer_sequence<int, kParts>());
    [&]<int... k>(std::integer_sequence<int, k...>) {
      (Chunk<kSlot, k>(a + 64 * k, x_stride, static_cast<const uint8_t*>(b) + k * kChunkBytes),
       ...);
    }(std::make_integer_sequence<int, kChunks>());
  }
  // Slot kSlot's C tiles to c: kParts tiles of 16 x rows x 16 W rows, int32.
  template <int kSlot>
  static void Store(int32_t* c) {
    [&]<int... p>(std::integer_sequence<int, p...>) {
      (TileStore<kSlot * kParts + p>(c + 256 * p, kTileStride), ...);
    }(std::make_integer_sequence<int, kParts>());
  }

 private:
  template <int kSlot, int kChunk>
  static void Chunk(const int8_t* a, int64_t x_stride, const uint8_t* b) {
    constexpr int kA = kCTiles + (kSlot * kChunks + kChunk) % kSets * (1 + kParts);
    TileLoad<kA>(a, x_stride);
    [&]<int... p>(std::integer_sequence<int, p...>) {
      (TileLoad<kA + 1 + p>(b + p * kChunks * kChunkBytes, kTileStride), ...);
      (TileDot<kUnsignedB, kSlot * kParts + p, kA, kA + 1 + p>(), ...);
    }(std::make_integer_sequence<int, kParts>());
  }
};

// Two blocks in flight, one C tile each: C tmm0-1, A tmm2 and tmm4, B tmm3
// and tmm5 (LoadQ8TileConfig).
using Q8Step = TileStep<false, 2, 1, 1>;

void LoadQ8TileConfig() {
  TileConfig cfg;
  for (int t : {0, 1}) {  // C
    cfg.colsb[t] = 64;
    cfg.rows[t] = 16;
  }
  for (int t : {2, 4}) {  // A: 16 x rows x one block's 32 codes
    cfg.colsb[t] = 32;
    cfg.rows[t] = 16;
  }
  for (int t : {3, 5}) {  // B: 8 dwords of K x 16 W rows
    cfg.colsb[t] = 64;
    cfg.rows[t] = 8;
  }
  __asm__ volatile("ldtilecfg %0" ::"m"(cfg) : "memory");
}

template <typename Block>
constexpr bool kHasMin = std::is_same_v<Block, BlockQ4_1> || std::is_same_v<Block, BlockQ5_1>;

// One repacked 32-block of a panel: the B tile of signed codes (Q8_0's as
// stored, q - 8 for Q4_0, q - 16 for Q5_0, q for the *_1 formats: each fits a
// signed byte), then the rows' d_w as f32 and, for Q4_1 / Q5_1, their mins.
struct alignas(64) PackedQ8Block {
  int8_t b[8 * 64];
  float dw[16];
};
struct alignas(64) PackedMinBlock {
  int8_t b[8 * 64];
  float dw[16];
  float mw[16];
};
template <typename Block>
using PackedBlock32 = std::conditional_t<kHasMin<Block>, PackedMinBlock, PackedQ8Block>;

// Lane n: W row n's offset in bytes (row_bytes apart).
inline __m512i RowOffsets(int64_t row_bytes) {
  return _mm512_mullo_epi32(
      _mm512_set_epi32(15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0),
      _mm512_set1_epi32(static_cast<int>(row_bytes)));
}

// W rows [0, rows) of the panel, every block, into p[0, nb); rows past
// `rows` are zero codes with scale 0. Row n's codes 4kk..4kk+3 of block i go
// to p[i].b[64 kk + 4 n]: one gather per tile row.
void PackQ8Panel(const uint8_t* w, size_t row_bytes, int64_t rows, int64_t nb,
                 PackedQ8Block* p) {
  const __mmask16 live = static_cast<__mmask16>((1u << rows) - 1);
  const __m512i row_off = RowOffsets(static_cast<int64_t>(row_bytes));
  for (int64_t i = 0; i < nb; ++i) {
    const uint8_t* block = w + i * sizeof(BlockQ8_0);
    for (int kk = 0; kk < 8; ++kk) {
      const __m512i v = _mm512_mask_i32gather_epi32(_mm512_setzero_si512(), live, row_off,
                                                    block + 2 + 4 * kk, 1);
      _mm512_store_si512(p[i].b + 64 * kk, v);
    }
    // d is the block's first two bytes: the low half of a dword gather.
    const __m512i d = _mm512_mask_i32gather_epi32(_mm512_setzero_si512(), live, row_off, block, 1);
    _mm512_store_ps(p[i].dw, _mm512_cvtph_ps(_mm512_cvtepi32_epi16(d)));
  }
}

// The 4- and 5-bit formats: each row's 32 codes are unpacked (as the avx512
// kernels unpack them, quant_codes32_avx512.h) into a 16 x 32 byte staging
// tile, minus the format's offset, then gathered into the B layout as Q8_0's.
template <typename Block>
void PackNibblePanel(const uint8_t* w, size_t row_bytes, int64_t rows, int64_t nb,
                     PackedBlock32<Block>* p) {
  constexpr bool kQ5 = std::is_same_v<Block, BlockQ5_0> || std::is_same_v<Block, BlockQ5_1>;
  constexpr int kOffset = kHasMin<Block> ? 0 : (kQ5 ? 16 : 8);
  alignas(64) int8_t staged[16 * 32] = {};  // rows past `rows` stay zero
  const __m512i row_off = RowOffsets(32);
  for (int64_t i = 0; i < nb; ++i) {
    auto& out = p[i];
    for (int n = 0; n < 16; ++n) {
      if (n >= rows) {
        out.dw[n] = 0.0f;
        if constexpr (kHasMin<Block>) out.mw[n] = 0.0f;
        continue;
      }
      const Block& b = reinterpret_cast<const Block*>(w + n * row_bytes)[i];
      __m256i q = Nibbles32(b.qs);
      if constexpr (kQ5) q = AddHighBits(q, b.qh);
      q = _mm256_sub_epi8(q, _mm256_set1_epi8(kOffset));
      _mm256_store_si256(reinterpret_cast<__m256i*>(staged + 32 * n), q);
      out.dw[n] = _cvtsh_ss(b.d);
      if constexpr (kHasMin<Block>) out.mw[n] = _cvtsh_ss(b.m);
    }
    for (int kk = 0; kk < 8; ++kk)
      _mm512_store_si512(out.b + 64 * kk, _mm512_i32gather_epi32(row_off, staged + 4 * kk, 1));
  }
}

// acc[j] = fma(float(c[j][n]), d_w[n] * d_x[j], acc[j]): one block of a
// C tile (c, 16 x 16 int32) into the 16 x rows' accumulators.
inline void AccumulateBlock(const int32_t* c, const float* dw, const float* dx, __m512* acc) {
  const __m512 d = _mm512_load_ps(dw);
#pragma GCC unroll 16
  for (int j = 0; j < 16; ++j) {
    const __m512 sums = _mm512_cvtepi32_ps(_mm512_load_si512(c + 16 * j));
    acc[j] = _mm512_fmadd_ps(sums, _mm512_mul_ps(d, _mm512_set1_ps(dx[j])), acc[j]);
  }
}

// The *_1 formats' min term of one block, as avx512's Dot32Blocks adds it
// per (W row, x row): mins += (m_w * d_x) * float(sum32_x), two products
// and an add, never fused.
inline void AccumulateMins(const float* mw, const float* dx, const float* sx, __m512* mins) {
  const __m512 m = _mm512_load_ps(mw);
#pragma GCC unroll 16
  for (int j = 0; j < 16; ++j)
    mins[j] = _mm512_add_ps(
        mins[j], _mm512_mul_ps(_mm512_mul_ps(m, _mm512_set1_ps(dx[j])), _mm512_set1_ps(sx[j])));
}

// Every 32-block format: Q8_0, Q4_0, Q4_1, Q5_0, Q5_1.
template <typename Block>
void PanelBlocks32(const uint8_t* w, size_t row_bytes, int64_t rows, const Q8Row* x,
                   size_t x_stride, int64_t m, float* y, int64_t ldy) {
  using Packed = PackedBlock32<Block>;
  constexpr bool kMin = kHasMin<Block>;
  const int64_t nb = x[0].cols / 32;
  // The packed panel, then the d_x of 16 x rows per block (dx[16 i + j]) and,
  // for the *_1 formats, their 32-sums as float (sx[16 i + j]).
  const size_t per_block = sizeof(Packed) + (kMin ? 32 : 16) * sizeof(float);
  uint8_t* scratch =
      static_cast<uint8_t*>(ThreadScratch(kScratchTask, static_cast<size_t>(nb) * per_block));
  Packed* panel = reinterpret_cast<Packed*>(scratch);
  float* dx = reinterpret_cast<float*>(scratch + nb * sizeof(Packed));
  float* sx = dx + 16 * nb;
  if constexpr (std::is_same_v<Block, BlockQ8_0>) {
    PackQ8Panel(w, row_bytes, rows, nb, panel);
  } else {
    PackNibblePanel<Block>(w, row_bytes, rows, nb, panel);
  }
  LoadQ8TileConfig();
  alignas(64) int32_t c0[16 * 16], c1[16 * 16];
  const __mmask16 live = static_cast<__mmask16>((1u << rows) - 1);
  const int64_t stride = static_cast<int64_t>(x_stride);
  for (int64_t t = 0; t < m; t += 16) {
    for (int64_t i = 0; i < nb; ++i)
      for (int j = 0; j < 16; ++j) {
        dx[16 * i + j] = x[t + j].d[i];
        if constexpr (kMin) sx[16 * i + j] = static_cast<float>(x[t + j].sum32[i]);
      }
    const int8_t* xa = x[t].qs;
    __m512 acc[16], mins[16];
    for (__m512& a : acc) a = _mm512_setzero_ps();
    for (__m512& a : mins) a = _mm512_setzero_ps();
    auto accumulate = [&](const int32_t* c, int64_t b) {
      AccumulateBlock(c, panel[b].dw, dx + 16 * b, acc);
      if constexpr (kMin) AccumulateMins(panel[b].mw, dx + 16 * b, sx + 16 * b, mins);
    };
    int64_t i = 0;
    for (; i + 1 < nb; i += 2) {
      Q8Step::Products<0>(xa + 32 * i, stride, panel[i].b);
      Q8Step::Products<1>(xa + 32 * (i + 1), stride, panel[i + 1].b);
      Q8Step::Store<0>(c0);
      accumulate(c0, i);
      Q8Step::Store<1>(c1);
      accumulate(c1, i + 1);
    }
    if (i < nb) {
      Q8Step::Products<0>(xa + 32 * i, stride, panel[i].b);
      Q8Step::Store<0>(c0);
      accumulate(c0, i);
    }
#pragma GCC unroll 16
    for (int j = 0; j < 16; ++j) {
      if (t + j >= m) continue;
      const __m512 out = kMin ? _mm512_add_ps(acc[j], mins[j]) : acc[j];
      _mm512_mask_storeu_ps(y + (t + j) * ldy, live, out);
    }
  }
}

// Q4_K / Q5_K. A super-block's sum_j scale_j <q, x>_j comes from two C
// tiles over its 256 codes: codes times the scales' low 3 bits (lo) and times
// their high 3 bits (hi), each product at most 31 x 7 = 217, an unsigned
// byte (TDPBSUD: signed x, unsigned W), so sum = 8 hi + lo exactly. The mins
// term sum_j min_j sum32_j is vpmaddwd/vpdpwssd on the rows' min pairs and
// x's 32-sums (both fit 16 bits, as in DotK45Rows4). Then, as avx512's DotK45:
// acc = fma(float(sum), d * d_x, acc), min_acc = fma(float(mins), dmin * d_x,
// min_acc), super-blocks in order, y = acc - min_acc.
struct alignas(64) PackedK45Block {
  uint8_t lo[64 * 64];  // B rows kk = 0..63: codes 4kk..4kk+3 of each W row
  uint8_t hi[64 * 64];
  int32_t min_pairs[4][16];  // lane n: min 2p | min 2p + 1 << 16 of W row n
  float d[16], dmin[16];
};

// Bytes of q times the 16-bit factor of their dword lane (both words equal),
// every product under 256.
inline __m512i MulBytes(__m512i q, __m512i factor) {
  const __m512i even = _mm512_mullo_epi16(_mm512_and_si512(q, _mm512_set1_epi16(0x00ff)), factor);
  const __m512i odd = _mm512_mullo_epi16(_mm512_srli_epi16(q, 8), factor);
  return _mm512_or_si512(even, _mm512_slli_epi16(odd, 8));
}

template <bool kQ5>
void PackK45Panel(const uint8_t* w, size_t row_bytes, int64_t rows, int64_t nb,
                  PackedK45Block* p) {
  using Block = std::conditional_t<kQ5, BlockQ5_K, BlockQ4_K>;
  const __mmask16 live = static_cast<__mmask16>((1u << rows) - 1);
  const __m512i row_off = RowOffsets(static_cast<int64_t>(row_bytes));
  const __m512i m4 = _mm512_set1_epi8(0x0f), bit0 = _mm512_set1_epi8(1);
  for (int64_t i = 0; i < nb; ++i) {
    // Per sub-block j, lane n: scale_j of row n, low 3 and high 3 bits, in both words.
    alignas(64) int32_t s_lo[8][16] = {}, s_hi[8][16] = {};
    alignas(64) uint16_t d16[16] = {}, dmin16[16] = {};
    for (int64_t n = 0; n < rows; ++n) {
      const Block& b = reinterpret_cast<const Block*>(w + n * row_bytes)[i];
      const KScales k = DecodeKScales(b.scales);
      for (int j = 0; j < 8; ++j) {
        s_lo[j][n] = (k.scale(j) & 7) * 0x10001;
        s_hi[j][n] = (k.scale(j) >> 3) * 0x10001;
      }
      for (int q = 0; q < 4; ++q) p[i].min_pairs[q][n] = k.min(2 * q) | k.min(2 * q + 1) << 16;
      d16[n] = b.d;
      dmin16[n] = b.dmin;
    }
    for (int64_t n = rows; n < 16; ++n)
      for (int q = 0; q < 4; ++q) p[i].min_pairs[q][n] = 0;
    _mm512_store_ps(p[i].d, _mm512_cvtph_ps(_mm256_load_si256(reinterpret_cast<__m256i*>(d16))));
    _mm512_store_ps(p[i].dmin,
                    _mm512_cvtph_ps(_mm256_load_si256(reinterpret_cast<__m256i*>(dmin16))));
    const uint8_t* block = w + i * sizeof(Block);
    for (int c = 0; c < 4; ++c) {
      for (int g = 0; g < 8; ++g) {
        // qs bytes 32c + 4g..+3 of each row: low nibbles are elements
        // 64c + 4g.. (sub-block 2c, B row 16c + g), high nibbles 64c + 32 + 4g..
        // (sub-block 2c + 1, B row 16c + 8 + g).
        const __m512i v = _mm512_mask_i32gather_epi32(_mm512_setzero_si512(), live, row_off,
                                                      block + offsetof(Block, qs) + 32 * c + 4 * g, 1);
        __m512i q_lo = _mm512_and_si512(v, m4);
        __m512i q_hi = _mm512_and_si512(_mm512_srli_epi32(v, 4), m4);
        if constexpr (kQ5) {
          // Bit 2c (2c + 1) of qh[4g + b] tops element 64c + 4g + b (+ 32).
          const __m512i h = _mm512_mask_i32gather_epi32(_mm512_setzero_si512(), live, row_off,
                                                        block + offsetof(Block, qh) + 4 * g, 1);
          q_lo = _mm512_or_si512(
              q_lo, _mm512_slli_epi32(_mm512_and_si512(_mm512_srli_epi32(h, 2 * c), bit0), 4));
          q_hi = _mm512_or_si512(
              q_hi, _mm512_slli_epi32(_mm512_and_si512(_mm512_srli_epi32(h, 2 * c + 1), bit0), 4));
        }
        const int lo_row = 16 * c + g, hi_row = 16 * c + 8 + g;
        const __m512i f_lo0 = _mm512_load_si512(s_lo[2 * c]), f_hi0 = _mm512_load_si512(s_hi[2 * c]);
        const __m512i f_lo1 = _mm512_load_si512(s_lo[2 * c + 1]);
        const __m512i f_hi1 = _mm512_load_si512(s_hi[2 * c + 1]);
        _mm512_store_si512(p[i].lo + 64 * lo_row, MulBytes(q_lo, f_lo0));
        _mm512_store_si512(p[i].hi + 64 * lo_row, MulBytes(q_lo, f_hi0));
        _mm512_store_si512(p[i].lo + 64 * hi_row, MulBytes(q_hi, f_lo1));
        _mm512_store_si512(p[i].hi + 64 * hi_row, MulBytes(q_hi, f_hi1));
      }
    }
  }
}

// Codes times the scales' low bits (C tmm0) and high bits (tmm1) over the
// super-block's four chunks of 64: chunks alternate between A tmm2, B tmm3-4
// and A tmm5, B tmm6-7.
using K45Step = TileStep<true, 1, 2, 4>;
static_assert(offsetof(PackedK45Block, hi) == offsetof(PackedK45Block, lo) + 4 * 16 * kTileStride,
              "K45Step's part stride");

template <bool kQ5>
void PanelK45(const uint8_t* w, size_t row_bytes, int64_t rows, const Q8Row* x, size_t x_stride,
              int64_t m, float* y, int64_t ldy) {
  const int64_t nb = x[0].cols / kQK;
  // The packed panel, then per 16 x rows and super-block their d_x and
  // 32-sum pairs (sum32 2p | sum32 2p + 1 << 16), x row major within a block.
  uint8_t* scratch = static_cast<uint8_t*>(ThreadScratch(
      kScratchTask, static_cast<size_t>(nb) * (sizeof(PackedK45Block) + 16 * 5 * sizeof(float))));
  PackedK45Block* panel = reinterpret_cast<PackedK45Block*>(scratch);
  float* dx = reinterpret_cast<float*>(scratch + nb * sizeof(PackedK45Block));
  int32_t* sum_pairs = reinterpret_cast<int32_t*>(dx + 16 * nb);
  PackK45Panel<kQ5>(w, row_bytes, rows, nb, panel);
  LoadTileConfig();  // all tiles 16 x 64 bytes
  alignas(64) int32_t c[2][16 * 16];  // lo, hi
  alignas(64) float mins[16 * 16];
  const __mmask16 live = static_cast<__mmask16>((1u << rows) - 1);
  const int64_t stride = static_cast<int64_t>(x_stride);
  for (int64_t t = 0; t < m; t += 16) {
    for (int64_t i = 0; i < nb; ++i) {
      for (int j = 0; j < 16; ++j) {
        const Q8Row& xr = x[t + j];
        dx[16 * i + j] = xr.d[i];
        for (int q = 0; q < 4; ++q) {
          const int32_t* s32 = xr.sum32 + 8 * i + 2 * q;
          sum_pairs[(16 * i + j) * 4 + q] =
              static_cast<int32_t>((static_cast<uint32_t>(s32[0]) & 0xffffu) |
                                   static_cast<uint32_t>(s32[1]) << 16);
        }
      }
    }
    {  // The mins' chains, on their own: they do not depend on the tiles.
      __m512 min_acc[16];
      for (__m512& a : min_acc) a = _mm512_setzero_ps();
      for (int64_t i = 0; i < nb; ++i) {
        const PackedK45Block& b = panel[i];
        const __m512 dmin = _mm512_load_ps(b.dmin);
        __m512i mp[4];
        for (int q = 0; q < 4; ++q) mp[q] = _mm512_load_si512(b.min_pairs[q]);
#pragma GCC unroll 16
        for (int j = 0; j < 16; ++j) {
          const int32_t* sp = sum_pairs + (16 * i + j) * 4;
          __m512i s = _mm512_madd_epi16(mp[0], _mm512_set1_epi32(sp[0]));
          for (int q = 1; q < 4; ++q) s = _mm512_dpwssd_epi32(s, mp[q], _mm512_set1_epi32(sp[q]));
          min_acc[j] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(s),
                                       _mm512_mul_ps(dmin, _mm512_set1_ps(dx[16 * i + j])),
                                       min_acc[j]);
        }
      }
      for (int j = 0; j < 16; ++j) _mm512_store_ps(mins + 16 * j, min_acc[j]);
    }
    const int8_t* xa = x[t].qs;
    __m512 acc[16];
    for (__m512& a : acc) a = _mm512_setzero_ps();
    for (int64_t i = 0; i < nb; ++i) {
      const PackedK45Block& b = panel[i];
      K45Step::Products<0>(xa + kQK * i, stride, b.lo);
      K45Step::Store<0>(c[0]);
      const __m512 d = _mm512_load_ps(b.d);
#pragma GCC unroll 16
      for (int j = 0; j < 16; ++j) {
        const __m512i sum = _mm512_add_epi32(_mm512_slli_epi32(_mm512_load_si512(c[1] + 16 * j), 3),
                                             _mm512_load_si512(c[0] + 16 * j));
        acc[j] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(sum),
                                 _mm512_mul_ps(d, _mm512_set1_ps(dx[16 * i + j])), acc[j]);
      }
    }
#pragma GCC unroll 16
    for (int j = 0; j < 16; ++j) {
      if (t + j < m) {
        _mm512_mask_storeu_ps(y + (t + j) * ldy, live,
                              _mm512_sub_ps(acc[j], _mm512_load_ps(mins + 16 * j)));
      }
    }
  }
}

// Q6_K. Its int8 sub-block scales s are split into balanced base-7 digits,
// s = d0 + 7 d1 + 49 d2 with each d in [-3, 3], so (q - 32) d fits a signed
// byte (at most 96): three C tiles over the super-block's 256 codes
// (TDPBSSD) give sum = C0 + 7 (C1 + 7 C2) = sum_j s_j <q - 32, x>_j exactly.
// Then, as avx512's DotQ6_K: acc = fma(float(sum), d * d_x, acc),
// super-blocks in order.
struct alignas(64) PackedQ6KBlock {
  int8_t part[3][64 * 64];  // B rows kk = 0..63 per digit: (q - 32) d_k, codes 4kk..4kk+3
  float d[16];
};

// Signed bytes of v times the signed 16-bit factor of their dword lane (both
// words equal), every product within a signed byte.
inline __m512i MulBytesSigned(__m512i v, __m512i factor) {
  const __m512i even = _mm512_mullo_epi16(_mm512_srai_epi16(_mm512_slli_epi16(v, 8), 8), factor);
  const __m512i odd = _mm512_mullo_epi16(_mm512_srai_epi16(v, 8), factor);
  return _mm512_or_si512(_mm512_and_si512(even, _mm512_set1_epi16(0x00ff)),
                         _mm512_slli_epi16(odd, 8));
}

void PackQ6KPanel(const uint8_t* w, size_t row_bytes, int64_t rows, int64_t nb,
                  PackedQ6KBlock* p) {
  const __mmask16 live = static_cast<__mmask16>((1u << rows) - 1);
  const __m512i row_off = RowOffsets(static_cast<int64_t>(row_bytes));
  const __m512i m4 = _mm512_set1_epi8(0x0f), m3 = _mm512_set1_epi8(0x03);
  for (int64_t i = 0; i < nb; ++i) {
    // Per digit and sub-block j, lane n: digit of row n's scale j, in both words.
    alignas(64) int32_t digit[3][16][16] = {};
    alignas(64) uint16_t d16[16] = {};
    for (int64_t n = 0; n < rows; ++n) {
      const BlockQ6_K& b = reinterpret_cast<const BlockQ6_K*>(w + n * row_bytes)[i];
      for (int j = 0; j < 16; ++j) {
        int v = b.scales[j];
        for (int k = 0; k < 3; ++k) {
          const int r = ((v % 7) + 7) % 7;
          const int dk = r > 3 ? r - 7 : r;
          digit[k][j][n] = static_cast<int32_t>(static_cast<uint16_t>(dk) * 0x10001u);
          v = (v - dk) / 7;
        }
      }
      d16[n] = b.d;
    }
    _mm512_store_ps(p[i].d, _mm512_cvtph_ps(_mm256_load_si256(reinterpret_cast<__m256i*>(d16))));
    const uint8_t* block = w + i * sizeof(BlockQ6_K);
    for (int kk = 0; kk < 64; ++kk) {
      // Codes 4kk..4kk+3: half h, quarter s, l from 4 (kk % 8) (quant_blocks.h).
      const int h = kk / 32, s = kk / 8 % 4, l0 = 4 * (kk % 8);
      const __m512i ql = _mm512_mask_i32gather_epi32(
          _mm512_setzero_si512(), live, row_off, block + 64 * h + 32 * (s & 1) + l0, 1);
      const __m512i qh = _mm512_mask_i32gather_epi32(
          _mm512_setzero_si512(), live, row_off, block + offsetof(BlockQ6_K, qh) + 32 * h + l0, 1);
      const __m512i nib = _mm512_and_si512(s >= 2 ? _mm512_srli_epi32(ql, 4) : ql, m4);
      const __m512i high = _mm512_slli_epi32(_mm512_and_si512(_mm512_srli_epi32(qh, 2 * s), m3), 4);
      const __m512i v = _mm512_sub_epi8(_mm512_or_si512(nib, high), _mm512_set1_epi8(32));
      for (int k = 0; k < 3; ++k)
        _mm512_store_si512(p[i].part[k] + 64 * kk,
                           MulBytesSigned(v, _mm512_load_si512(digit[k][kk / 4])));
    }
  }
}

// 7 v, exactly.
inline __m512i Times7(__m512i v) { return _mm512_sub_epi32(_mm512_slli_epi32(v, 3), v); }

// The three digits' C tiles tmm0-2 over the super-block's four chunks of
// 64, each chunk's A in tmm3 and B in tmm4-6.
using Q6KStep = TileStep<false, 1, 3, 4>;

void PanelQ6_K(const uint8_t* w, size_t row_bytes, int64_t rows, const Q8Row* x, size_t x_stride,
               int64_t m, float* y, int64_t ldy) {
  const int64_t nb = x[0].cols / kQK;
  uint8_t* scratch = static_cast<uint8_t*>(ThreadScratch(
      kScratchTask, static_cast<size_t>(nb) * (sizeof(PackedQ6KBlock) + 16 * sizeof(float))));
  PackedQ6KBlock* panel = reinterpret_cast<PackedQ6KBlock*>(scratch);
  float* dx = reinterpret_cast<float*>(scratch + nb * sizeof(PackedQ6KBlock));
  PackQ6KPanel(w, row_bytes, rows, nb, panel);
  LoadTileConfig();  // all tiles 16 x 64 bytes
  alignas(64) int32_t c[3][16 * 16];
  const __mmask16 live = static_cast<__mmask16>((1u << rows) - 1);
  const int64_t stride = static_cast<int64_t>(x_stride);
  for (int64_t t = 0; t < m; t += 16) {
    for (int64_t i = 0; i < nb; ++i)
      for (int j = 0; j < 16; ++j) dx[16 * i + j] = x[t + j].d[i];
    const int8_t* xa = x[t].qs;
    __m512 acc[16];
    for (__m512& a : acc) a = _mm512_setzero_ps();
    for (int64_t i = 0; i < nb; ++i) {
      const PackedQ6KBlock& b = panel[i];
      Q6KStep::Products<0>(xa + kQK * i, stride, b.part[0]);
      Q6KStep::Store<0>(c[0]);
      const __m512 d = _mm512_load_ps(b.d);
#pragma GCC unroll 16
      for (int j = 0; j < 16; ++j) {
        const __m512i c12 =
            _mm512_add_epi32(Times7(_mm512_load_si512(c[2] + 16 * j)), _mm512_load_si512(c[1] + 16 * j));
        const __m512i sum = _mm512_add_epi32(Times7(c12), _mm512_load_si512(c[0] + 16 * j));
        acc[j] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(sum),
                                 _mm512_mul_ps(d, _mm512_set1_ps(dx[16 * i + j])), acc[j]);
      }
    }
#pragma GCC unroll 16
    for (int j = 0; j < 16; ++j)
      if (t + j < m) _mm512_mask_storeu_ps(y + (t + j) * ldy, live, acc[j]);
  }
}

}  // namespace

QuantPanelFn QuantPanelKernel(DType weights) {
  const CpuFeatures& f = DetectCpuFeatures();
  if (!f.amx_int8 || !f.avx512_vnni) return nullptr;
  switch (weights) {
    case DType::kQ8_0:
      return PanelBlocks32<BlockQ8_0>;
    case DType::kQ4_0:
      return PanelBlocks32<BlockQ4_0>;
    case DType::kQ4_1:
      return PanelBlocks32<BlockQ4_1>;
    case DType::kQ5_0:
      return PanelBlocks32<BlockQ5_0>;
    case DType::kQ5_1:
      return PanelBlocks32<BlockQ5_1>;
    case DType::kQ4_K:
      return PanelK45<false>;
    case DType::kQ5_K:
      return PanelK45<true>;
    case DType::kQ6_K:
      return PanelQ6_K;
    default:
      return nullptr;
  }
}

}  // namespace kvfork::amx
