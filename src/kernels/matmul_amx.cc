// AMX-BF16 MatMul: y[m, n] = sum_k x[m, k] * w[n, k] for bf16 weights
// (f32 weights run the AVX-512 kernel at this level); MatMulSiluMul, which
// takes the same rows of gate and up in one task and stores silu(gate) * up
// from their C tiles; and MatMulAddTo, which adds its C tiles into y (the
// Epilogue of a task).
//
// Computed as Y^T = W * X^T so the weights need no repacking: an A tile is
// 16 rows of W in their natural [N, K] layout (16 x 32 bf16, stride K; a task
// that passes over its rows more than once keeps a packed copy of the tiles
// its first pass loaded, see RunTask), a B
// tile is 32 k x 16 tokens of X, rounded to bf16 and packed once per call in
// the VNNI layout TDPBF16PS reads (tile row r = the pairs k = 2r, 2r+1 of
// each token), and a C tile is 16 weight rows x 16 tokens in f32.
//
// Reduction order (DESIGN.md invariant 1): every output element starts at
// zero and takes one TDPBF16PS per 32-k chunk, chunks in increasing k, with
// the same A data and its own token's column of B. Which other tokens share
// the B tile, how many token blocks or W rows a task covers, and which thread
// runs it change nothing in that sequence, so M=1 and M=512 and any thread
// count give equal bits; decode (M=1) runs this same kernel and stays bound
// by reading W. Choices made here depend only on the weight's shape: a W
// panel whose rows are not a multiple of 16 (N tail) or whose K is not a
// multiple of 32 (K tail) is copied zero-padded into scratch first; zero
// products add nothing (except the sign of an exact zero), the same for every M.
//
// Tile registers: tmm0-3 accumulators (C), tmm4-5 W (A), tmm6-7 X (B), all
// 16 rows x 64 bytes, except at M = 1, where C and B hold one token (16 rows
// x 4 bytes, TokenCols::k1; see PackXOneToken). Each thread loads the tile configuration before its
// first task of every MatMul call, so a pool thread never runs tile
// instructions without it (and a configuration some other library left on
// the thread between calls is replaced); once per call rather than per task
// because LDTILECFG also zeroes the tiles and costs ~3% of a decode GEMV.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"

#include <algorithm>
#include <atomic>
#include <cstring>

#include "kernels/amx_tiles.h"
#include "kernels/ops_isa.h"
#include "kernels/row_tasks.h"
#include "kernels/scratch.h"
#include "kernels/simd_avx512.h"

namespace kvfork::amx {
namespace {

using avx512::F32ToBf16Lanes;
using avx512::Mask16;
using avx512::Transpose16x16;

constexpr int64_t kTileK = 32;            // bf16 per A/B tile row
constexpr int64_t kBTileBytes = 16 * 64;  // one packed B tile
constexpr int64_t kTaskRows = 64;         // W rows per task: two 32-row panels
// At M <= 16 (decode) a task only streams its rows from DRAM once: longer
// runs per task read faster (a decode-like GEMV sweep, 2 threads: 64 rows
// 48.5 ms, 256 rows 47.1, 512 rows 46.6), while 256 still leaves q/k/v 16
// tasks and o_proj 4 to share, so a descheduled thread holds up little.
constexpr int64_t kDecodeTaskRows = 256;
// The one-token decode kernel prefetches each A tile's rows this many 32-k
// chunks ahead (DecodeKernel). Measured on a loaded VM, alternated, qwen3-0.6b
// BF16 decode (2 threads), 6 rounds: 51-74% of the limit without, 63-85% with
// 2 chunks; with W in L2 (one thread, n = 256, k = 1,024) 11.6 -> 10.7 us.
constexpr int64_t kDecodePrefetchChunks = 2;
// No software prefetch of W in the 16-token kernel: measured on Sapphire
// Rapids with one thread streaming W from DRAM at M=1 (before the one-token
// kernel), prefetching each row 4/8/16 chunks ahead
// (T0, T1 or NTA) or the next panel linearly into L2 lowered the GEMV from
// 14-16 GB/s (85-95% of a plain read loop) to 12.4-13.7 GB/s: the hardware
// prefetchers already follow the 16-32 row streams, and the extra load-port
// work only delays the tile loads.

// Rounds X to bf16 and packs it into B tiles: tile (tb, c) holds tokens
// [16 tb, 16 tb + 16) and k in [32 c, 32 c + 32) at xp + (tb * kc + c) * 512
// (uint16 units), row r = {x[t][32c + 2r], x[t][32c + 2r + 1]} for t = 0..15.
// Tokens past m and k past the end are zeros.
void PackX(const float* x, int64_t m, int64_t k, int64_t kc, uint16_t* xp, ThreadPool& pool) {
  const int64_t blocks = (m + 15) / 16;
  // Word w of the result: element w of the 32 (bf16 of lo in words 0, 2, ..,
  // of hi in words 32 + 0, 2, ..): pairs (2r, 2r+1) land in dword r.
  alignas(64) uint16_t idx_words[32];
  for (int w = 0; w < 32; ++w)
    idx_words[w] = static_cast<uint16_t>(w < 16 ? 2 * w : 32 + 2 * (w - 16));
  const __m512i idx = _mm512_load_si512(idx_words);
  pool.ParallelFor(blocks, [&](int64_t tb) {
    for (int64_t c = 0; c < kc; ++c) {
      const int64_t k0 = c * kTileK;
      const int64_t left = k - k0;
      __m512 v[16];
      for (int j = 0; j < 16; ++j) {
        const int64_t t = tb * 16 + j;
        if (t >= m) {
          v[j] = _mm512_setzero_ps();
          continue;
        }
        const float* src = x + t * k + k0;
        const __m512 lo = _mm512_maskz_loadu_ps(Mask16(left), src);
        const __m512 hi = _mm512_maskz_loadu_ps(Mask16(left > 16 ? left - 16 : 0), src + 16);
        v[j] = _mm512_castsi512_ps(
            _mm512_permutex2var_epi16(F32ToBf16Lanes(lo), idx, F32ToBf16Lanes(hi)));
      }
      Transpose16x16(v);
      uint16_t* dst = xp + (tb * kc + c) * (kBTileBytes / 2);
      for (int r = 0; r < 16; ++r) _mm512_store_ps(dst + r * 32, v[r]);
    }
  });
}

// Where the A tiles of a task's W rows are: tile (t, ch) (rows 16 t..16 t + 15,
// k chunk ch) at base + t * tile_step + ch * chunk_step, rows row_stride
// bytes apart. In place in W ([N, K]: row_stride = 2 K, chunk_step = 64) or
// packed one tile after another (row_stride = 64, chunk_step = 1 KB).
struct ATiles {
  const uint8_t* base = nullptr;
  int64_t row_stride = 0;
  int64_t chunk_step = 0;
  int64_t tile_step = 0;
};

// NA x NB C tiles over all kc chunks: A tiles t0 and t0 + 1 of w, B from
// packed X at b (the second B tile b_next bytes further). C tile (i, j) is
// stored at c + (2 i + j) * 256. With a_copy, every A tile loaded is also
// stored there, packed (tile (t, ch) at a_copy + (t * kc + ch) * 1 KB), so
// later passes over the same rows read contiguous tiles.
template <int NA, int NB>
inline void Kernel(const ATiles& w, int64_t t0, const uint8_t* b, int64_t b_next, int64_t kc,
                   float* c, uint8_t* a_copy) {
  const int64_t b_stride = 64;
  KVFORK_TILE_ZERO(0);
  if constexpr (NB == 2) KVFORK_TILE_ZERO(1);
  if constexpr (NA == 2) KVFORK_TILE_ZERO(2);
  if constexpr (NA == 2 && NB == 2) KVFORK_TILE_ZERO(3);
  const uint8_t* a = w.base + t0 * w.tile_step;
  const uint8_t* a1 = a + w.tile_step;
  const int64_t a_stride = w.row_stride;
  for (int64_t ch = 0; ch < kc; ++ch) {
    const int64_t off = ch * w.chunk_step;
    KVFORK_TILE_LOAD(4, a + off, a_stride);
    if constexpr (NA == 2) KVFORK_TILE_LOAD(5, a1 + off, a_stride);
    if (a_copy != nullptr) {
      const int64_t copy_stride = 64;
      uint8_t* dst = a_copy + (t0 * kc + ch) * 1024;
      KVFORK_TILE_STORE(4, dst, copy_stride);
      if constexpr (NA == 2) KVFORK_TILE_STORE(5, dst + kc * 1024, copy_stride);
    }
    const uint8_t* bc = b + ch * kBTileBytes;
    KVFORK_TILE_LOAD(6, bc, b_stride);
    if constexpr (NB == 2) KVFORK_TILE_LOAD(7, bc + b_next, b_stride);
    KVFORK_TILE_DP(0, 4, 6);
    if constexpr (NB == 2) KVFORK_TILE_DP(1, 4, 7);
    if constexpr (NA == 2) KVFORK_TILE_DP(2, 5, 6);
    if constexpr (NA == 2 && NB == 2) KVFORK_TILE_DP(3, 5, 7);
  }
  const int64_t c_stride = 64;
  KVFORK_TILE_STORE(0, c, c_stride);
  if constexpr (NB == 2) KVFORK_TILE_STORE(1, c + 256, c_stride);
  if constexpr (NA == 2) KVFORK_TILE_STORE(2, c + 512, c_stride);
  if constexpr (NA == 2 && NB == 2) KVFORK_TILE_STORE(3, c + 768, c_stride);
}

// What a task does with its C tiles.
enum class Epilogue {
  kStore,    // y = C
  kSiluMul,  // y = silu(C) * C of the up matrix's same rows (MatMulSiluMul)
  kAdd,      // y += C (MatMulAddTo)
};

// Writes C tile [16 W rows][16 tokens] into y[token, n0 + row] for the first
// `tokens` tokens and `rows` rows; with kSiluMul, silu(C) * C_up (SiluMul's
// lane math, so the bits equal SiluMul over the two stored products); with
// kAdd, y + C (AddInPlace's single add).
template <Epilogue E>
inline void StoreTransposed(const float* ct, const float* ct_up, int tokens, int rows, float* y,
                            int64_t n) {
  __m512 v[16];
  for (int i = 0; i < 16; ++i) {
    v[i] = _mm512_load_ps(ct + 16 * i);
    if constexpr (E == Epilogue::kSiluMul)
      v[i] = avx512::SiluMulLanes(v[i], _mm512_load_ps(ct_up + 16 * i));
  }
  Transpose16x16(v);
  const __mmask16 mask = Mask16(rows);
  for (int j = 0; j < tokens; ++j) {
    __m512 out = v[j];
    if constexpr (E == Epilogue::kAdd) out = _mm512_add_ps(_mm512_maskz_loadu_ps(mask, y + j * n), out);
    _mm512_mask_storeu_ps(y + j * n, mask, out);
  }
}

// Copies W rows [0, rows) (w points at the first, K = k) into A tiles one
// after another at dst: tile (t, ch) is 16 rows x 64 bytes at
// dst + (t * kc + ch) * 1 KB; rows past `rows` and k past K are zeros.
void PackA(const uint16_t* w, int64_t k, int64_t rows, int64_t kc, uint8_t* dst) {
  const int64_t tiles16 = (rows + 15) / 16;
  for (int64_t t = 0; t < tiles16; ++t) {
    for (int64_t ch = 0; ch < kc; ++ch) {
      const int64_t k0 = ch * kTileK;
      const __mmask32 mask = avx512::Mask32(k - k0);
      uint8_t* tile = dst + (t * kc + ch) * 1024;
      for (int r = 0; r < 16; ++r) {
        const int64_t row = t * 16 + r;
        const __m512i v = row < rows ? _mm512_maskz_loadu_epi16(mask, w + row * k + k0)
                                     : _mm512_setzero_si512();
        _mm512_store_si512(tile + r * 64, v);
      }
    }
  }
}

// The A tiles of one matrix's W rows [n0, n0 + rows) during a task.
struct TaskRows {
  ATiles a;
  uint8_t* a_copy = nullptr;  // filled during the first pass over the token blocks

  // packed: tiles16 * kc KB of scratch, used when the rows are ragged or more
  // than one pass follows.
  TaskRows(const uint16_t* w, int64_t k, int64_t n0, int64_t rows, int64_t kc,
           int64_t token_blocks, uint8_t* packed)
      : a{reinterpret_cast<const uint8_t*>(w + n0 * k), k * 2, 64, 16 * k * 2} {
    if (k % kTileK != 0 || rows % 16 != 0) {
      // A ragged panel needs zero padding: pack it first.
      PackA(w + n0 * k, k, rows, kc, packed);
      a = {packed, 64, 1024, kc * 1024};
    } else if (token_blocks > 2) {
      // Later passes re-read the panel from L2, where contiguous 1 KB tiles
      // load faster than 16 rows K apart; the first pass stores the tiles it
      // loads (from DRAM, overlapped with its products) packed.
      a_copy = packed;
    }
  }
  void PassDone(int64_t kc) {
    if (a_copy != nullptr) {
      a = {a_copy, 64, 1024, kc * 1024};
      a_copy = nullptr;
    }
  }
};

// Output tiles of W rows p * 16 .. for the token blocks at t0 and the next,
// through epilogue E (kSiluMul: up holds the same rows of the up matrix).
template <Epilogue E, int NA, int NB>
void Panel(const TaskRows& w, const TaskRows* up, int64_t p, const uint8_t* b, int64_t b_next,
           int64_t kc, int64_t t0, int64_t m, int64_t r0, int64_t rows_left, float* y, int64_t n) {
  alignas(64) float c[4 * 256];
  alignas(64) float cu[E == Epilogue::kSiluMul ? 4 * 256 : 1];
  Kernel<NA, NB>(w.a, p, b, b_next, kc, c, w.a_copy);
  if constexpr (E == Epilogue::kSiluMul) Kernel<NA, NB>(up->a, p, b, b_next, kc, cu, up->a_copy);
  for (int i = 0; i < NA; ++i) {
    const int rows = static_cast<int>(std::min<int64_t>(16, rows_left - 16 * i));
    for (int j = 0; j < NB; ++j) {
      const int tokens = static_cast<int>(std::min<int64_t>(16, m - t0 - 16 * j));
      const int tile = (2 * i + j) * 256;
      StoreTransposed<E>(c + tile, E == Epilogue::kSiluMul ? cu + tile : nullptr, tokens, rows,
                         y + (t0 + 16 * j) * n + r0 + 16 * i, n);
    }
  }
}

// Decode (M = 1) runs on one-token tiles (TokenCols::k1): X is packed as kc
// chunks of 32 bf16 (64 bytes, a B tile of 16 rows x 4 bytes: row r = the
// pair k = 2r, 2r+1), so a chunk loads 64 bytes of X instead of a 1 KB tile
// whose other 15 token columns are zeros, and a C tile is 16 floats that
// need no transpose. Each output still takes one TDPBF16PS per chunk, in k
// order, from the same A row and its own token's column of B, so it keeps
// the bits of the 16-token tiles. One 16-row panel at a time: interleaving
// 2, 3 or 4 panels per chunk was slower with W in L2 (one thread, n = 256,
// k = 1,024: 45 ns a row for 1 panel, 56, 65 and 73 for 2, 3 and 4), as 32+
// rows 2 KB apart contend for the same L1 sets.
void PackXOneToken(const float* x, int64_t k, int64_t kc, uint16_t* xp) {
  for (int64_t c = 0; c < kc; ++c) {
    const int64_t k0 = c * kTileK, left = k - k0;
    const __m512 lo = _mm512_maskz_loadu_ps(Mask16(left), x + k0);
    const __m512 hi = _mm512_maskz_loadu_ps(Mask16(left > 16 ? left - 16 : 0), x + k0 + 16);
    avx512::StoreBf16(xp + c * kTileK, F32ToBf16Lanes(lo));
    avx512::StoreBf16(xp + c * kTileK + 16, F32ToBf16Lanes(hi));
  }
}

// A tile t of w (16 rows) over all kc chunks against the one-token X at x
// (tmm0 C, tmm4 A, tmm6 B); the 16 sums stored at c. Each chunk first
// prefetches (T0) its 16 rows kDecodePrefetchChunks chunks ahead: a tile load
// is one instruction over 16 lines 2K apart, which the L1 prefetchers do not
// follow. The 16-token kernel lost speed to such prefetches (see
// kDecodePrefetchChunks); this one gains, from L2 and from DRAM.
inline void DecodeKernel(const ATiles& w, int64_t t, const uint8_t* x, int64_t kc, float* c) {
  KVFORK_TILE_ZERO(0);
  const uint8_t* a = w.base + t * w.tile_step;
  const int64_t a_stride = w.row_stride, x_stride = 4;
  const int64_t ahead = kDecodePrefetchChunks * w.chunk_step;
  for (int64_t ch = 0; ch < kc; ++ch) {
    if (ch + kDecodePrefetchChunks < kc) {
      const char* next = reinterpret_cast<const char*>(a + ch * w.chunk_step + ahead);
      for (int r = 0; r < 16; ++r) _mm_prefetch(next + r * a_stride, _MM_HINT_T0);
    }
    KVFORK_TILE_LOAD(6, x + ch * 64, x_stride);
    KVFORK_TILE_LOAD(4, a + ch * w.chunk_step, a_stride);
    KVFORK_TILE_DP(0, 4, 6);
  }
  const int64_t c_stride = 4;
  KVFORK_TILE_STORE(0, c, c_stride);
}

// Outputs of W rows r0 .. r0 + 15 (A tile p; rows_left from r0 on) for the
// one token, through epilogue E: StoreTransposed's lane math per element.
template <Epilogue E>
void DecodePanel(const TaskRows& w, const TaskRows* up, int64_t p, const uint8_t* x, int64_t kc,
                 int64_t r0, int64_t rows_left, float* y) {
  alignas(64) float c[16];
  alignas(64) float cu[16];
  DecodeKernel(w.a, p, x, kc, c);
  __m512 v = _mm512_load_ps(c);
  if constexpr (E == Epilogue::kSiluMul) {
    DecodeKernel(up->a, p, x, kc, cu);
    v = avx512::SiluMulLanes(v, _mm512_load_ps(cu));
  }
  const __mmask16 mask = Mask16(rows_left);
  if constexpr (E == Epilogue::kAdd) v = _mm512_add_ps(_mm512_maskz_loadu_ps(mask, y + r0), v);
  _mm512_mask_storeu_ps(y + r0, mask, v);
}

// RunTask at M = 1: xp from PackXOneToken, and the thread holds the k1 tiles.
template <Epilogue E>
void RunDecodeTask(const uint16_t* w, const uint16_t* up, int64_t k, int64_t n0, int64_t rows,
                   const uint16_t* xp, int64_t kc, float* y) {
  constexpr bool kPair = E == Epilogue::kSiluMul;
  const int64_t tiles16 = (rows + 15) / 16;
  const int64_t packed_bytes = tiles16 * kc * 1024;
  uint8_t* packed = static_cast<uint8_t*>(
      ThreadScratch(kScratchTask, static_cast<size_t>((kPair ? 2 : 1) * packed_bytes)));
  const TaskRows wr(w, k, n0, rows, kc, 1, packed);
  const TaskRows ur = kPair ? TaskRows(up, k, n0, rows, kc, 1, packed + packed_bytes) : wr;
  const uint8_t* x = reinterpret_cast<const uint8_t*>(xp);
  for (int64_t p = 0; p < tiles16; ++p)
    DecodePanel<E>(wr, kPair ? &ur : nullptr, p, x, kc, n0 + p * 16, rows - p * 16, y);
}

// W rows [n0, n0 + rows) for every token, into y through epilogue E; for
// kSiluMul, up is the up matrix (w's shape), whose same rows the task takes.
template <Epilogue E>
void RunTask(const uint16_t* w, const uint16_t* up, int64_t k, int64_t n0, int64_t rows,
             const uint16_t* xp, int64_t m, int64_t kc, float* y, int64_t n) {
  constexpr bool kPair = E == Epilogue::kSiluMul;
  const int64_t tiles16 = (rows + 15) / 16;
  const int64_t token_blocks = (m + 15) / 16;
  const int64_t packed_bytes = tiles16 * kc * 1024;
  uint8_t* packed = static_cast<uint8_t*>(
      ThreadScratch(kScratchTask, static_cast<size_t>((kPair ? 2 : 1) * packed_bytes)));
  TaskRows wr(w, k, n0, rows, kc, token_blocks, packed);
  TaskRows ur = kPair ? TaskRows(up, k, n0, rows, kc, token_blocks, packed + packed_bytes) : wr;
  const TaskRows* upr = kPair ? &ur : nullptr;
  const int64_t b_next = kc * kBTileBytes;
  const uint8_t* xb = reinterpret_cast<const uint8_t*>(xp);
  // At M <= 16 the task streams W once from DRAM, and 16-row panels read it
  // faster than 32-row ones: 16 row streams instead of 32 (a decode-like GEMV
  // sweep, 2 threads: 26.2 -> 27.9 GB/s; at M = 32 they were no faster).
  const int64_t panel_tiles = token_blocks == 1 ? 1 : 2;
  for (int64_t tb = 0; tb < token_blocks; tb += 2) {
    const bool two_b = tb + 1 < token_blocks;
    const uint8_t* b = xb + tb * b_next;
    for (int64_t p = 0; p < tiles16; p += panel_tiles) {
      const bool two_a = panel_tiles == 2 && p + 1 < tiles16;
      const int64_t r0 = n0 + p * 16, rows_left = rows - p * 16;
      if (two_a && two_b) {
        Panel<E, 2, 2>(wr, upr, p, b, b_next, kc, tb * 16, m, r0, rows_left, y, n);
      } else if (two_a) {
        Panel<E, 2, 1>(wr, upr, p, b, b_next, kc, tb * 16, m, r0, rows_left, y, n);
      } else if (two_b) {
        Panel<E, 1, 2>(wr, upr, p, b, b_next, kc, tb * 16, m, r0, rows_left, y, n);
      } else {
        Panel<E, 1, 1>(wr, upr, p, b, b_next, kc, tb * 16, m, r0, rows_left, y, n);
      }
    }
    wr.PassDone(kc);
    ur.PassDone(kc);
  }
}

// W rows [n0, n0 + rows) for the call's m tokens through epilogue E: the
// one-token kernel at M = 1, the 16-token one otherwise (y has n columns).
template <Epilogue E>
void RunRows(const uint16_t* w, const uint16_t* up, int64_t k, int64_t n0, int64_t rows,
             const uint16_t* xp, int64_t m, int64_t kc, float* y, int64_t n) {
  if (m == 1) {
    RunDecodeTask<E>(w, up, k, n0, rows, xp, kc, y);
  } else {
    RunTask<E>(w, up, k, n0, rows, xp, m, kc, y, n);
  }
}

// Rounds and packs x for a call in the caller's scratch: token_blocks * kc B
// tiles, or at M = 1 kc one-token chunks (PackXOneToken).
uint16_t* PackedX(const float* x, int64_t m, int64_t k, int64_t kc, ThreadPool& pool) {
  const int64_t token_blocks = (m + 15) / 16;
  uint16_t* xp = static_cast<uint16_t*>(
      ThreadScratch(kScratchCaller, static_cast<size_t>(token_blocks * kc * kBTileBytes)));
  if (m == 1) {
    PackXOneToken(x, k, kc, xp);
  } else {
    PackX(x, m, k, kc, xp, pool);
  }
  return xp;
}

// The tiles a call with m tokens runs on.
TokenCols TokenColsFor(int64_t m) { return m == 1 ? TokenCols::k1 : TokenCols::k16; }

// A number unique to one kernel call, for ConfigureTilesFor.
uint64_t NextCall() {
  static std::atomic<uint64_t> calls{0};
  return calls.fetch_add(1, std::memory_order_relaxed) + 1;
}

// W rows per task for a call with m tokens.
int64_t TaskRowsFor(int64_t m) { return m <= 16 ? kDecodeTaskRows : kTaskRows; }

// Every target's rows, into its y through epilogue E (kStore or kAdd), as the
// tasks of one ParallelFor.
template <Epilogue E>
void RunTargets(const float* x, int64_t m, std::span<const MatMulTarget> targets,
                ThreadPool& pool) {
  const int64_t k = targets[0].w.cols;
  const int64_t kc = (k + kTileK - 1) / kTileK;
  const uint16_t* xp = PackedX(x, m, k, kc, pool);
  const RowTasks tasks(targets, TaskRowsFor(m));
  const uint64_t call = NextCall();
  pool.ParallelFor(tasks.size(), [&](int64_t t) {
    ConfigureTilesFor(call, TokenColsFor(m));
    const RowTasks::Task task = tasks[t];
    const MatrixView& w = task.target->w;
    RunRows<E>(static_cast<const uint16_t*>(w.data), nullptr, k, task.row0, task.rows, xp, m, kc,
               task.target->y, w.rows);
  });
}

}  // namespace

void MatMulShared(const float* x, int64_t m, std::span<const MatMulTarget> targets,
                  ThreadPool& pool) {
  if (targets[0].w.dtype != DType::kBf16) return avx512::MatMulShared(x, m, targets, pool);
  RunTargets<Epilogue::kStore>(x, m, targets, pool);
}

void MatMulSiluMul(const float* x, int64_t m, const MatrixView& gate, const MatrixView& up,
                   float* out, ThreadPool& pool) {
  const int64_t k = gate.cols, n = gate.rows;
  const int64_t kc = (k + kTileK - 1) / kTileK;
  const uint16_t* xp = PackedX(x, m, k, kc, pool);
  // A task does the same rows of both matrices, so each holds as much work
  // as two tasks of MatMulShared over {gate, up}.
  const int64_t task_rows = TaskRowsFor(m);
  const uint64_t call = NextCall();
  pool.ParallelFor((n + task_rows - 1) / task_rows, [&](int64_t t) {
    ConfigureTilesFor(call, TokenColsFor(m));
    const int64_t n0 = t * task_rows, rows = std::min(task_rows, n - n0);
    RunRows<Epilogue::kSiluMul>(static_cast<const uint16_t*>(gate.data),
                                static_cast<const uint16_t*>(up.data), k, n0, rows, xp, m, kc,
                                out, n);
  });
}

void MatMulAddTo(const float* x, int64_t m, const MatrixView& w, float* sum, ThreadPool& pool) {
  const MatMulTarget target{w, sum};
  RunTargets<Epilogue::kAdd>(x, m, std::span<const MatMulTarget>(&target, 1), pool);
}

}  // namespace kvfork::amx
