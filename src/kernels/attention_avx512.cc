// AVX-512 KV writes and paged attention: the AVX2 file's algorithms at 16
// lanes (see attention_avx2.cc for why the order is chunking-invariant), with
// scores reduced 16 keys at a time and K/V rows read once per GQA group.
// f32 KV runs f32 FMAs on its rows (TileBlock); bf16 and int8 KV run both
// products as bf16 dot products (vdpbf16ps) on K and V as stored (int8 codes
// converted in registers), with q and p rounded to bf16 (TileGroupDot).
// q4 / q4r KV (kv_layout.h) runs the same dot path on its codes, converted
// to bf16 integers in registers, with each 32-dim group's scale applied to
// the group's partial score and to p (TileGroupDotQ4). The tile and softmax
// pieces all three share are in attention_avx512_tile.h, the bf16/int8 dot
// kernel in attention_avx512_dot.h (its K, and K transposed for the scores
// of prefill spans, in attention_avx512_keys.h), the q4 one in
// attention_avx512_q4dot.h.
// GCC 12's AVX-512 intrinsic headers build some results from _mm512_undefined_*
// and then warn about them (a known false positive).
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"

#include "kernels/attention_avx512_q4dot.h"
#include "kernels/scratch.h"

namespace kvfork::avx512 {
namespace {

void StoreRow(const KvLayout& l, uint8_t* block, int layer, int kv, int head, int64_t slot,
              const float* src) {
  const int hd = l.head_dim;
  uint8_t* plane = block + l.PlaneOffset(layer, kv, head);
  switch (l.dtype) {
    case KvDType::kF32:
      std::memcpy(reinterpret_cast<float*>(plane) + slot * hd, src,
                  static_cast<size_t>(hd) * sizeof(float));
      break;
    case KvDType::kBf16: {
      uint16_t* p = reinterpret_cast<uint16_t*>(plane) + slot * hd;
      for (int d = 0; d < hd; d += 16)
        StoreBf16(p + d, F32ToBf16Lanes(_mm512_maskz_loadu_ps(Mask16(hd - d), src + d)), hd - d);
      break;
    }
    case KvDType::kInt8: {
      const __m512 abs_mask = _mm512_castsi512_ps(_mm512_set1_epi32(0x7fffffff));
      __m512 amax = _mm512_setzero_ps();
      for (int d = 0; d < hd; d += 16) {
        __m512 v = _mm512_and_ps(_mm512_maskz_loadu_ps(Mask16(hd - d), src + d), abs_mask);
        amax = _mm512_max_ps(v, amax);  // a NaN is skipped, as std::max(amax, NaN) does
      }
      const float s = Hmax(amax) / 127.0f;
      const __m512 vinv = _mm512_set1_ps(s > 0.0f ? 1.0f / s : 0.0f);
      const __m512 lo = _mm512_set1_ps(-127.0f), hi = _mm512_set1_ps(127.0f);
      int8_t* p = reinterpret_cast<int8_t*>(plane) + slot * hd;
      for (int d = 0; d < hd; d += 16) {
        const __mmask16 mask = Mask16(hd - d);
        __m512 q = _mm512_roundscale_ps(_mm512_mul_ps(_mm512_maskz_loadu_ps(mask, src + d), vinv),
                                        _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
        q = _mm512_min_ps(_mm512_max_ps(q, lo), hi);  // NaN -> -127, as the reference
        _mm512_mask_cvtepi32_storeu_epi8(p + d, mask, _mm512_cvtps_epi32(q));
      }
      reinterpret_cast<float*>(block + l.ScaleOffset(layer, kv, head))[slot] = s;
      break;
    }
    case KvDType::kQ4:
    case KvDType::kQ4r:
      break;  // ops.cc writes q4 rows (WriteKvQ4, kv_q4_isa.h)
  }
}

// The keys of the block at position b0 (b0 < the tile's last context).
// kPrefetch: next_block (not null) is the block read after this one.
template <int G, int Q, bool kPrefetch>
void TileBlock(const KvLayout& l, int layer, float scale, const AttentionSeq& s, int kvh,
               int64_t b0, const uint8_t* next_block, Tile<G, Q>* tile) {
  constexpr int VU = kVecUnroll<G, Q>;
  const int hd = l.head_dim, bs = l.block_size;
  const int nvec = (hd + 15) / 16;
  const size_t row_bytes = l.RowBytes();
  const bool int8 = l.dtype == KvDType::kInt8;
  const float* q = tile->q;
  float* acc = tile->acc;
  float* ms = tile->ms;
  float* ls = tile->ls;

  alignas(64) float scores[Q * G][kMaxBlockSize + 16];
  __m512 dots[Q * G][16];
  const uint8_t* block = s.blocks[b0 / bs];
  const BlockKeys<Q> keys = KeysOfBlock<Q>(s, tile->t0, b0, bs);
  const int n = keys.n, n16 = keys.n16;
  // The next block's K and V rows, fetched while this block's keys are scored:
  // each 16-key plane is its own 4 KB page (bf16, head_dim 128), which the
  // hardware prefetchers do not enter before the first demand miss. Into L2
  // (T1): on a Zen 4 VM, 28 layers of decode attention took 2.5-3.0 ms at
  // 512 keys against 3.2-3.5 with T0 (into L1, whose few miss buffers the
  // 128 lines of a block fill), and decode after 2,048 tokens ran 30 against
  // 22-24 tok/s; two blocks ahead was no better.
  const auto [kplane, vplane, next_k, next_v] =
      HeadPlanesOf(l, block, next_block, layer, kvh);
  const float* kscale = Int8ScalesOf(l, block, layer, 0, kvh);
  const float* vscale = Int8ScalesOf(l, block, layer, 1, kvh);
  // Scores, 16 keys at a time (keys past n give zero vectors, masked below).
  for (int j0 = 0; j0 < n; j0 += 16) {
    for (int jj = 0; jj < 16; ++jj) {
      const int j = j0 + jj;
      __m512 dot[Q * G];
      for (int i = 0; i < Q * G; ++i) dot[i] = _mm512_setzero_ps();
      if (kPrefetch && j < bs)
        PrefetchPlanes</*kIntoL1=*/false>(next_k, next_v, j * row_bytes, (j + 1) * row_bytes);
      if (j < n) {
        const uint8_t* krow = kplane + j * row_bytes;
        for (int v = 0; v < nvec; ++v) {
          const __m512 kv = LoadKv(l.dtype, krow, v * 16, hd - v * 16);
          for (int i = 0; i < Q * G; ++i)
            dot[i] = _mm512_fmadd_ps(_mm512_load_ps(q + (i * nvec + v) * 16), kv, dot[i]);
        }
      }
      for (int i = 0; i < Q * G; ++i) dots[i][jj] = dot[i];
    }
    StoreScores<G, Q>(dots, keys, j0, scale, int8 ? kscale + j0 : nullptr, n - j0, scores);
  }
  // Online softmax per (token, head); -inf scores give p = 0. l sums p, and
  // P·V takes p (int8: times V's row scale) in place of the scores.
  __m512 vcorr[Q * G];
  SoftmaxRows(scores, n16, ms, ls, vcorr, [&](int i, int j, __m512 p) {
    const __m512 w = int8 ? _mm512_mul_ps(p, _mm512_maskz_loadu_ps(Mask16(n - j), vscale + j)) : p;
    _mm512_store_ps(scores[i] + j, w);
    return p;
  });
  // acc = acc * corr + sum over the block's keys in order of p[j] * V[j].
  for (int v0 = 0; v0 < nvec; v0 += VU) {
    __m512 a[Q * G][VU];
    for (int i = 0; i < Q * G; ++i)
      for (int u = 0; u < VU; ++u)
        if (v0 + u < nvec)
          a[i][u] = _mm512_mul_ps(_mm512_load_ps(acc + (i * nvec + v0 + u) * 16), vcorr[i]);
    const uint8_t* vrow = vplane;
    for (int j = 0; j < n; ++j, vrow += row_bytes) {
      __m512 vv[VU];
      for (int u = 0; u < VU; ++u)
        if (v0 + u < nvec) vv[u] = LoadKv(l.dtype, vrow, (v0 + u) * 16, hd - (v0 + u) * 16);
      for (int i = 0; i < Q * G; ++i) {
        const __m512 p = _mm512_set1_ps(scores[i][j]);
        for (int u = 0; u < VU; ++u)
          if (v0 + u < nvec) a[i][u] = _mm512_fmadd_ps(p, vv[u], a[i][u]);
      }
    }
    for (int i = 0; i < Q * G; ++i)
      for (int u = 0; u < VU; ++u)
        if (v0 + u < nvec) _mm512_store_ps(acc + (i * nvec + v0 + u) * 16, a[i][u]);
  }
}

template <int G, int Q>
void TileFinish(const KvLayout& l, int num_heads, const AttentionSeq& s, int kvh,
                const Tile<G, Q>& tile) {
  const int hd = l.head_dim;
  const int nvec = (hd + 15) / 16;
  const int64_t t0 = tile.t0;
  const float* acc = tile.acc;
  const float* ls = tile.ls;
  for (int i = 0; i < Q * G; ++i) {
    float* out = s.out + ((t0 + i / G) * num_heads + kvh * G + i % G) * hd;
    const __m512 vl = _mm512_set1_ps(ls[i]);
    for (int v = 0; v < nvec; ++v)
      _mm512_mask_storeu_ps(out + v * 16, Mask16(hd - v * 16),
                            _mm512_div_ps(_mm512_load_ps(acc + (i * nvec + v) * 16), vl));
  }
}

// Tiles [0, ntiles) of Q tokens from t0 against KV head kvh. Each tile's
// state sees the same operations in the same order as if it ran alone.
template <int G, int Q>
void AttendSpan(const KvLayout& l, int layer, int num_heads, float scale, const AttentionSeq& s,
                int64_t t0, int ntiles, int kvh) {
  // vdpbf16ps (TileGroupDot, TileGroupDotQ4); f32 KV keeps the f32 FMAs.
  const bool q4 = IsQ4(l.dtype);
  const bool dot = l.dtype != KvDType::kF32;
  const bool int8 = l.dtype == KvDType::kInt8;
  // The dot kernels take a softmax step per group of blocks (TileGroupDot),
  // f32 one per block.
  const int w = dot ? SoftmaxGroupWidth(l.block_size) : l.block_size;
  // Spans of several tiles score bf16 and int8 K transposed once per group
  // (KeysT): same bits, fewer instructions per score. (q4's products were
  // slower so: docs/kernels.md.)
  const bool lanes = dot && !q4 && ntiles > 1 && l.block_size % 16 == 0;
  const size_t tiles_bytes = (static_cast<size_t>(ntiles) * sizeof(Tile<G, Q>) + 63) / 64 * 64;
  const size_t keys_t_bytes =
      lanes ? static_cast<size_t>(w / 16) * KeysTVectors(l.head_dim) * sizeof(__m512i) : 0;
  auto* scratch =
      static_cast<uint8_t*>(ThreadScratch(kScratchTask, tiles_bytes + keys_t_bytes));
  auto* tiles = reinterpret_cast<Tile<G, Q>*>(scratch);
  auto* keys_t = lanes ? reinterpret_cast<__m512i*>(scratch + tiles_bytes) : nullptr;
  for (int k = 0; k < ntiles; ++k) {
    if (dot) {
      const int stride = q4 ? l.head_dim / 16 : DotAccStride<G, Q>(l.head_dim);
      TileInitDot(l, num_heads, s, t0 + k * Q, kvh, stride, &tiles[k]);
    } else {
      TileInit(l, num_heads, s, t0 + k * Q, kvh, &tiles[k]);
    }
  }
  const int64_t last_ctx_end = s.start_pos + t0 + int64_t{ntiles} * Q;
  // Groups wholly before the first query's window are seen by no row.
  const int64_t first_key = AttentionWindowStart(s.start_pos + t0, s.window);
  for (int64_t g0 = first_key / w * w; g0 < last_ctx_end; g0 += w) {
    if (lanes) {  // the keys any tile reads: up to the last tile's context
      const int n = static_cast<int>(last_ctx_end - g0 < w ? last_ctx_end - g0 : w);
      if (int8) {
        KeysT<true>(l, s, layer, kvh, g0, n, keys_t);
      } else {
        KeysT<false>(l, s, layer, kvh, g0, n, keys_t);
      }
    }
    for (int k = 0; k < ntiles; ++k) {
      const int64_t ctx_end = s.start_pos + tiles[k].t0 + Q;  // the tile's last context
      if (g0 >= ctx_end || g0 + w <= AttentionWindowStart(s.start_pos + tiles[k].t0, s.window))
        continue;
      // Decode-like spans read each block once: prefetch ahead (the dot
      // kernels kPrefetchBlocks ahead, f32 the next block).
      const bool decode = ntiles == 1;
      if (q4 && decode) {
        TileGroupDotQ4<G, Q, true>(l, layer, scale, s, kvh, g0, w, &tiles[k]);
      } else if (q4) {
        TileGroupDotQ4<G, Q, false>(l, layer, scale, s, kvh, g0, w, &tiles[k]);
      } else if (int8 && decode) {
        TileGroupDot<G, Q, true, true>(l, layer, scale, s, kvh, g0, w, nullptr, &tiles[k]);
      } else if (int8) {
        TileGroupDot<G, Q, false, true>(l, layer, scale, s, kvh, g0, w, keys_t, &tiles[k]);
      } else if (dot && decode) {
        TileGroupDot<G, Q, true, false>(l, layer, scale, s, kvh, g0, w, nullptr, &tiles[k]);
      } else if (dot) {
        TileGroupDot<G, Q, false, false>(l, layer, scale, s, kvh, g0, w, keys_t, &tiles[k]);
      } else if (decode && g0 + w < ctx_end) {
        TileBlock<G, Q, true>(l, layer, scale, s, kvh, g0, s.blocks[g0 / w + 1], &tiles[k]);
      } else {
        TileBlock<G, Q, false>(l, layer, scale, s, kvh, g0, nullptr, &tiles[k]);
      }
    }
  }
  for (int k = 0; k < ntiles; ++k) {
    if (dot && !q4) {  // q4's accumulators keep the dims in order
      TileFinishDot(l, num_heads, s, kvh, tiles[k]);
    } else {
      TileFinish(l, num_heads, s, kvh, tiles[k]);
    }
  }
}

using AttendFn = void (*)(const KvLayout&, int, int, float, const AttentionSeq&, int64_t, int, int);

// Kernels for 1, 2 and 4 query tokens (index 0, 1, 2) for group size G.
template <int G>
struct TileKernels {
  static constexpr AttendFn kFns[3] = {AttendSpan<G, 1>, AttendSpan<G, (kMaxTile<G> >= 2 ? 2 : 1)>,
                                       AttendSpan<G, kMaxTile<G>>};
};

struct Attend {
  const AttendFn* fns = nullptr;  // by tile index: 1, 2, 4 tokens (or 1 where G > 4)
  int max_tile = 1;
};

// The group size is the layout's (num_heads / num_kv_heads), not the batch's.
template <int G>
Attend AttendForG() {
  return {TileKernels<G>::kFns, kMaxTile<G>};
}

Attend AttendFor(int group) {
  switch (group) {
    case 1:
      return AttendForG<1>();
    case 2:
      return AttendForG<2>();
    case 3:
      return AttendForG<3>();
    case 4:
      return AttendForG<4>();
    case 5:
      return AttendForG<5>();
    case 6:
      return AttendForG<6>();
    case 7:
      return AttendForG<7>();
    case 8:
      return AttendForG<8>();
    case 9:
      return AttendForG<9>();
    case 10:
      return AttendForG<10>();
    case 11:
      return AttendForG<11>();
    case 12:
      return AttendForG<12>();
    case 13:
      return AttendForG<13>();
    case 14:
      return AttendForG<14>();
    case 15:
      return AttendForG<15>();
    default:
      static_assert(kMaxGroup == 16, "one case per group size up to kMaxGroup");
      return AttendForG<kMaxGroup>();  // ops.cc checks group <= 16
  }
}

}  // namespace

void WriteKv(const KvLayout& layout, int layer, uint8_t* const* blocks, int64_t start_pos,
             int64_t num_tokens, const float* k, const float* v) {
  const int64_t row = static_cast<int64_t>(layout.num_kv_heads) * layout.head_dim;
  for (int64_t t = 0; t < num_tokens; ++t) {
    const int64_t pos = start_pos + t;
    uint8_t* block = blocks[pos / layout.block_size];
    const int64_t slot = pos % layout.block_size;
    for (int h = 0; h < layout.num_kv_heads; ++h) {
      StoreRow(layout, block, layer, 0, h, slot, k + t * row + h * layout.head_dim);
      StoreRow(layout, block, layer, 1, h, slot, v + t * row + h * layout.head_dim);
    }
  }
}

void PagedAttention(const KvLayout& layout, int layer, int num_heads, float scale,
                    std::span<const AttentionSeq> seqs, ThreadPool& pool) {
  const Attend attend = AttendFor(num_heads / layout.num_kv_heads);
  int64_t total = 0;
  for (size_t i = 0; i < seqs.size(); ++i) total += seqs[i].num_tokens * layout.num_kv_heads;
  if (total == 0) return;
  auto* tasks = static_cast<AttentionTask*>(
      ThreadScratch(kScratchCaller, static_cast<size_t>(total) * sizeof(AttentionTask)));
  const int64_t n = PlanAttentionTasks(seqs, layout.num_kv_heads, attend.max_tile, tasks);
  pool.ParallelFor(n, [&](int64_t i) {
    const AttentionTask& task = tasks[i];
    attend.fns[task.tile](layout, layer, num_heads, scale, *task.seq, task.t, task.ntiles,
                          task.kvh);
  });
}

}  // namespace kvfork::avx512
