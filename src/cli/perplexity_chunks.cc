#include "cli/perplexity_chunks.h"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <sstream>

namespace kvfork::cli {

StatusOr<std::string> ReadTextFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return NotFoundError("--file " + path + ": cannot open");
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

ChunkedText TokenizeForPerplexity(const Tokenizer& tokenizer, const std::string& text) {
  ChunkedText out;
  // A special token's string in the text is text, as llama-perplexity
  // tokenizes (parse_special off).
  const TextRange all_plain{0, text.size()};
  out.tokens =
      tokenizer.Encode(text, /*add_special=*/true, std::span<const TextRange>(&all_plain, 1));
  // llama.cpp puts the BOS at every chunk's start when its vocab adds one;
  // ours adds one exactly when encoding with special tokens prepends it.
  const std::vector<int32_t> empty = tokenizer.Encode("", /*add_special=*/true);
  if (tokenizer.bos_token_id().has_value() && !empty.empty() &&
      empty.front() == *tokenizer.bos_token_id())
    out.bos = *tokenizer.bos_token_id();
  return out;
}

std::vector<int32_t> ChunkTokens(const ChunkedText& text, int64_t ctx, int64_t k) {
  std::vector<int32_t> chunk(text.tokens.begin() + k * ctx, text.tokens.begin() + (k + 1) * ctx);
  if (text.bos) chunk.front() = *text.bos;
  return chunk;
}

double NegLogProb(const float* logits, int64_t vocab, int32_t token) {
  float max_logit = logits[0];
  for (int64_t i = 1; i < vocab; ++i) max_logit = std::max(max_logit, logits[i]);
  double sum_exp = 0.0;
  for (int64_t i = 0; i < vocab; ++i) sum_exp += std::exp(logits[i] - max_logit);
  return -(logits[token] - max_logit - std::log(sum_exp));
}

Status ForwardScoredHalf(Model& model, const KvLayout& layout, const BlockTable& blocks,
                         ThreadPool& pool, std::span<const int32_t> chunk,
                         std::vector<float>* logits) {
  const int64_t ctx = static_cast<int64_t>(chunk.size());
  const int64_t first = ctx / 2;
  ForwardBatch context;
  context.tokens.assign(chunk.begin(), chunk.begin() + first);
  ForwardSeq cs;
  cs.num_tokens = first;
  cs.blocks = blocks.blocks.data();
  cs.no_logits = true;
  context.seqs.push_back(cs);
  KVFORK_RETURN_IF_ERROR(model.Forward(context, layout, pool, logits));
  ForwardBatch scored;
  scored.tokens.assign(chunk.begin() + first, chunk.end());
  ForwardSeq ss;
  ss.num_tokens = ctx - first;
  ss.start_pos = first;
  ss.blocks = blocks.blocks.data();
  ss.all_logits = true;
  scored.seqs.push_back(ss);
  return model.Forward(scored, layout, pool, logits);
}

}  // namespace kvfork::cli
