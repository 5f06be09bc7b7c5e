// AMX tile instructions and the tile configurations the AMX kernels use (all
// eight tiles 16 rows x 64 bytes, or the bf16 decode's one-token tiles).
// Include only from translation units compiled with the AMX flags (*_amx.cc);
// everything has internal linkage.
#pragma once

#include <cstdint>

// Tile instructions as asm with a memory clobber: GCC 12's _tile_loadd and
// _tile_stored do not tell the compiler they read or write memory.
#define KVFORK_TILE_ZERO(t) __asm__ volatile("tilezero %%tmm" #t ::)
#define KVFORK_TILE_LOAD(t, base, stride) \
  __asm__ volatile("tileloadd (%0,%1,1), %%tmm" #t ::"r"(base), "r"(stride) : "memory")
#define KVFORK_TILE_STORE(t, base, stride) \
  __asm__ volatile("tilestored %%tmm" #t ", (%0,%1,1)" ::"r"(base), "r"(stride) : "memory")
// C += A * B (AT&T operand order: B, A, C).
#define KVFORK_TILE_DP(c, a, b) __asm__ volatile("tdpbf16ps %%tmm" #b ", %%tmm" #a ", %%tmm" #c ::)

namespace kvfork::amx {
namespace {

struct alignas(64) TileConfig {
  uint8_t palette = 1;
  uint8_t start_row = 0;
  uint8_t reserved[14] = {};
  uint16_t colsb[16] = {};
  uint8_t rows[16] = {};
};

// How many tokens the token tiles (C: tmm0-3, B: tmm6-7) hold: 16 (every tile
// 16 rows x 64 bytes), or one for the bf16 decode GEMV (C and B tiles 16 rows
// x 4 bytes: one f32, or one bf16 pair, per row; A tiles tmm4-5 stay 16 x 64).
enum class TokenCols { k16, k1 };

inline void LoadTileConfig(TokenCols tokens = TokenCols::k16) {
  TileConfig cfg;
  for (int t = 0; t < 8; ++t) {
    const bool token_tile = t != 4 && t != 5;
    cfg.colsb[t] = tokens == TokenCols::k1 && token_tile ? 4 : 64;
    cfg.rows[t] = 16;
  }
  __asm__ volatile("ldtilecfg %0" ::"m"(cfg) : "memory");
}

// Loads the configuration on this thread unless it already did for `call`
// (a number unique to one kernel call): once per call and thread, so every
// pool thread has it before its first tile instruction, and one some other
// library left between calls is replaced. Not per task: LDTILECFG also zeroes
// the tiles and costs ~3% of a decode GEMV.
inline void ConfigureTilesFor(uint64_t call, TokenCols tokens = TokenCols::k16) {
  thread_local uint64_t configured_for = 0;
  if (configured_for != call) {
    LoadTileConfig(tokens);
    configured_for = call;
  }
}

}  // namespace
}  // namespace kvfork::amx
