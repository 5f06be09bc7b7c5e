#include "engine/warmup.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/timer.h"

namespace kvfork {
namespace {

// Zeroed, 64-byte aligned KV memory for `blocks` blocks of `layout`, and its
// block table.
struct PrivateBlocks {
  std::unique_ptr<uint8_t, decltype(&std::free)> data{nullptr, &std::free};
  std::vector<uint8_t*> table;
};

StatusOr<PrivateBlocks> AllocateBlocks(const KvLayout& layout, int64_t blocks) {
  PrivateBlocks p;
  const size_t block_bytes = layout.BlockBytes();
  const size_t bytes = std::max<size_t>(64, block_bytes * static_cast<size_t>(blocks));
  p.data.reset(static_cast<uint8_t*>(std::aligned_alloc(64, (bytes + 63) / 64 * 64)));
  if (p.data == nullptr)
    return ResourceExhaustedError("warm-up: cannot allocate " + std::to_string(bytes) +
                                  " bytes of KV memory");
  std::memset(p.data.get(), 0, bytes);
  for (int64_t b = 0; b < blocks; ++b) p.table.push_back(p.data.get() + b * block_bytes);
  return p;
}

}  // namespace

std::vector<int32_t> WarmUpTokens(const Tokenizer& tokenizer, int64_t vocab_size) {
  std::vector<int32_t> tokens;
  auto add = [&](int32_t id) {
    if (id >= 0 && id < vocab_size) tokens.push_back(id);
  };
  if (std::optional<int32_t> bos = tokenizer.bos_token_id()) add(*bos);
  if (!tokenizer.eos_token_ids().empty()) add(tokenizer.eos_token_ids()[0]);
  if (tokens.empty()) tokens.push_back(0);
  return tokens;
}

StatusOr<WarmUpResult> WarmUpModel(Model& model, const KvLayout& layout,
                                   std::span<const KvGroup> groups,
                                   std::span<const int32_t> tokens, ThreadPool& pool) {
  const int64_t start = NowNanos();
  const int64_t n = static_cast<int64_t>(tokens.size());
  if (n < 1) return InvalidArgumentError("warm-up: no tokens");
  for (int32_t t : tokens)
    if (t < 0 || t >= model.config().vocab_size)
      return InvalidArgumentError("warm-up: token " + std::to_string(t) +
                                  " is outside the vocabulary");
  const int64_t blocks = (n + layout.block_size - 1) / layout.block_size;
  ForwardBatch batch;
  batch.tokens.assign(tokens.begin(), tokens.end());
  batch.kv_groups = groups;
  ForwardSeq seq;
  seq.num_tokens = n;
  seq.start_pos = 0;
  // One table per layer group where the cache keeps them, else one in `layout`.
  std::vector<PrivateBlocks> memory;
  memory.reserve(groups.size() + 1);
  if (groups.empty()) {
    KVFORK_ASSIGN_OR_RETURN(PrivateBlocks p, AllocateBlocks(layout, blocks));
    memory.push_back(std::move(p));
    seq.blocks = memory.back().table.data();
  } else {
    for (size_t g = 0; g < groups.size(); ++g) {
      KVFORK_ASSIGN_OR_RETURN(PrivateBlocks p, AllocateBlocks(groups[g].layout, blocks));
      memory.push_back(std::move(p));
      seq.group_blocks[g] = memory.back().table.data();
    }
  }
  batch.seqs.push_back(seq);
  WarmUpResult r;
  // One logits row: the final norm and the lm head run too.
  KVFORK_RETURN_IF_ERROR(model.Forward(batch, layout, pool, &r.logits).WithContext("warm-up"));
  r.tokens = n;
  r.elapsed_ns = NowNanos() - start;
  return r;
}

}  // namespace kvfork
