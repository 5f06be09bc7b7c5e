// The text, chunking and scoring of llama.cpp's `llama-perplexity`, for the
// commands that score a text file chunk by chunk (`kvfork kv-quality`):
//   - the whole text is tokenized once with the special tokens the model's
//     tokenizer adds, special-token strings inside the text as text;
//   - it is cut into floor(tokens / ctx) chunks, each run from an empty
//     cache; when the tokenizer adds a BOS, a chunk's first token is replaced
//     by it;
//   - only the second half of a chunk is scored: the logits at positions
//     [ctx/2, ctx - 1) against the next token.
// docs/perplexity.md describes the rules and how they were checked against
// llama.cpp.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "cli/kv_blocks.h"
#include "core/status.h"
#include "core/thread_pool.h"
#include "kernels/kv_layout.h"
#include "model/model.h"
#include "tokenizer/tokenizer.h"

namespace kvfork::cli {

struct ChunkedText {
  std::vector<int32_t> tokens;  // the whole text
  std::optional<int32_t> bos;   // put at every chunk's start, when the tokenizer adds one
};

// The file's bytes; the error names the flag --file.
StatusOr<std::string> ReadTextFile(const std::string& path);

// Tokenizes as llama-perplexity does (see the header comment).
ChunkedText TokenizeForPerplexity(const Tokenizer& tokenizer, const std::string& text);

// Chunk k (k * ctx tokens in) with its BOS in place; requires (k + 1) * ctx
// <= tokens.
std::vector<int32_t> ChunkTokens(const ChunkedText& text, int64_t ctx, int64_t k);

// -log softmax(logits)[token] in llama-perplexity's arithmetic: the max in
// f32, the sum of expf in double.
double NegLogProb(const float* logits, int64_t vocab, int32_t token);

// Runs one chunk from an empty cache in `blocks` (covering chunk.size()
// positions of `layout`): the first half without logits, the second half
// with all of them. By invariant 1 the split changes no bits. *logits gets
// [chunk.size() - chunk.size() / 2, vocab] rows, row i for position
// chunk.size() / 2 + i. Cost: one forward pass of the chunk.
Status ForwardScoredHalf(Model& model, const KvLayout& layout, const BlockTable& blocks,
                         ThreadPool& pool, std::span<const int32_t> chunk,
                         std::vector<float>* logits);

}  // namespace kvfork::cli
