// The engine's warm-up at start (`kvfork serve`'s default; --no-warmup turns
// it off, as llama-server's flag of that name): one small forward pass before
// the server says it is ready, so the first request does not pay the
// process's one-time costs (the weights' pages mapped in, the kernels'
// per-thread scratch, the compute pool's threads woken, the lazy CPU-feature
// decisions). It does not touch the KV pool: backing the pool pages a
// restart's disk load fills, here instead of just before each read, made the
// reads about 2x slower (cold cache lines) and the load no shorter
// (docs/kv_cache.md, "Where the restarted server's first turn goes").
//
// The forward runs on private KV memory (one block of the cache's layout per
// layer group, freed after), never on the cache: nothing enters the prefix
// index, the pool, the disk tier, the KV events or any counter, and no later
// answer changes (engine_test's WarmUpChangesNoAnswerAndNoCounter).
//
// Thread affinity: the caller's (before the engine thread takes requests).
// Cost: one forward of two tokens with one logits row.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "core/status.h"
#include "core/thread_pool.h"
#include "kernels/kv_group.h"
#include "kernels/kv_layout.h"
#include "model/model.h"
#include "tokenizer/tokenizer.h"

namespace kvfork {

struct WarmUpResult {
  int64_t tokens = 0;         // tokens run through the model
  int64_t elapsed_ns = 0;     // wall time of the forward, allocation included
  std::vector<float> logits;  // [vocab]: the last token's row (tests compare it)
};

// The warm-up's tokens: BOS and the first EOS (llama.cpp's warm-up), those of
// them inside the model's vocabulary; token 0 when neither is.
std::vector<int32_t> WarmUpTokens(const Tokenizer& tokenizer, int64_t vocab_size);

// Runs `tokens` (ids in the vocabulary, at least one) through the model at
// positions 0.. on freshly allocated blocks of `layout` (and of each of
// `groups`, where the cache keeps one table per layer group).
StatusOr<WarmUpResult> WarmUpModel(Model& model, const KvLayout& layout,
                                   std::span<const KvGroup> groups,
                                   std::span<const int32_t> tokens, ThreadPool& pool);

}  // namespace kvfork
