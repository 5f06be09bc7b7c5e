#include "cli/kv_quality_kivi.h"

#include <algorithm>

#include "kv/kv_cache.h"

namespace kvfork::cli {

StatusOr<KvQualityFormat> ParseKvQualityFormat(const std::string& flag, const std::string& name) {
  KvQualityFormat f;
  f.name = name;
  if (name == "kivi4" || name == "kivi2") {
    f.kivi_bits = name == "kivi4" ? 4 : 2;
    return f;
  }
  StatusOr<KvDType> d = ParseKvDType(name);
  if (!d.ok()) {
    // ParseKvDType's message names --kv-dtype; name the flag that was given
    // and the simulations this command adds.
    std::string why = d.status().message();
    const std::string kv_dtype_prefix = "--kv-dtype: ";
    if (why.rfind(kv_dtype_prefix, 0) == 0) why = why.substr(kv_dtype_prefix.size());
    return InvalidArgumentError("--" + flag + ": " + why +
                                " (or kivi4 / kivi2, kv-quality's KIVI simulation)");
  }
  f.storage = *d;
  return f;
}

Status ForwardScoredHalfKivi(Model& model, const KvLayout& layout, const BlockTable& blocks,
                             ThreadPool& pool, std::span<const int32_t> chunk, int kivi_bits,
                             const KiviOptions& options, std::vector<float>* logits) {
  const int64_t group_tokens = options.group_tokens;
  const int64_t ctx = static_cast<int64_t>(chunk.size());
  const int64_t first = ctx / 2;
  logits->clear();
  std::vector<float> piece_logits;
  int64_t pos = 0;
  while (pos < ctx) {
    int64_t end = std::min(ctx, (pos / group_tokens + 1) * group_tokens);
    if (pos < first && end > first) end = first;
    ForwardBatch batch;
    batch.tokens.assign(chunk.begin() + pos, chunk.begin() + end);
    ForwardSeq seq;
    seq.num_tokens = end - pos;
    seq.start_pos = pos;
    seq.blocks = blocks.blocks.data();
    seq.no_logits = end <= first;
    seq.all_logits = true;
    batch.seqs.push_back(seq);
    KVFORK_RETURN_IF_ERROR(model.Forward(batch, layout, pool, &piece_logits));
    if (!seq.no_logits) logits->insert(logits->end(), piece_logits.begin(), piece_logits.end());
    if (end % group_tokens == 0) {
      KiviRoundTripBf16Group(layout, blocks.blocks.data(), end - group_tokens,
                             static_cast<int>(group_tokens), kivi_bits, options.key_axis);
    }
    pos = end;
  }
  return OkStatus();
}

}  // namespace kvfork::cli
