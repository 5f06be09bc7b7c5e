// tokenizer.json "model" of type BPE: the vocabulary, the ranked merges, and
// the merge loop (a priority queue over the piece's symbols, O(n log n) per
// piece).
//
// Encode answers most pieces without merging: a piece that is one token of
// the vocabulary is that token when ignore_merges is set, and otherwise when
// merging its bytes gives back that token, which is found out the first time
// the token is seen and remembered per token. Pieces of several tokens go
// through a bounded cache (PieceCache) in front of the merge loop.
//
// Tokens are stored as raw bytes: for a byte-level vocabulary the GPT-2
// alphabet spelling of tokenizer.json is decoded once at load, so encoding
// never converts text to the alphabet.
//
// Thread safety: immutable after FromJson except the per-token flags (relaxed
// atomics written with the value any thread would compute) and the cache
// (locked); Encode may run on many threads at once.
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "core/status.h"
#include "tokenizer/merge_table.h"
#include "tokenizer/token_table.h"

namespace kvfork {

class PieceCache;

struct StringHash {
  using is_transparent = void;
  size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
};
using TokenMap = std::unordered_map<std::string, int32_t, StringHash, std::equal_to<>>;

class BpeModel {
 public:
  ~BpeModel();
  BpeModel(BpeModel&&) noexcept;
  BpeModel& operator=(BpeModel&&) noexcept;

  // model_json is the raw text of the "model" object (read with JsonReader:
  // the vocabulary and merges go straight into the tables). byte_level: vocab
  // keys are in GPT-2's byte alphabet. Errors name the bad field, token or
  // merge.
  static StatusOr<BpeModel> FromJson(std::string_view model_json, bool byte_level);

  // Appends the ids of one pre-token (raw bytes).
  void Encode(std::string_view piece, std::vector<int32_t>* ids) const;
  // Appends the ids of each pre-token in order (faster than one at a time:
  // the vocabulary lookups are prefetched ahead).
  void EncodePieces(std::span<const std::string_view> pieces, std::vector<int32_t>* ids) const;

  // Raw bytes of token id ("" beyond the vocabulary).
  std::string_view TokenBytes(int32_t id) const { return vocab_.Bytes(id); }
  std::optional<int32_t> TokenId(std::string_view bytes) const;
  int64_t size() const { return static_cast<int64_t>(vocab_.id_limit()); }
  // Bytes of the longest token (Qwen3 and Llama 3: 128, a run of spaces).
  size_t max_token_bytes() const { return max_token_bytes_; }
  // True when every byte of a piece ends up in some token: byte-level, with
  // a token for each of the 256 bytes. Otherwise a byte or character with no
  // token and no unk_token is dropped, and text can yield no token at all.
  bool covers_every_byte() const;

 private:
  // What merging a whole token's bytes gives, learnt on first sight.
  enum WholeState : uint8_t { kUnknown = 0, kSelf = 1, kSplits = 2 };
  BpeModel();
  Status ReadVocab(std::string_view json);
  Status ReadMerges(std::string_view json);
  void EncodeHashed(std::string_view piece, uint64_t hash, std::vector<int32_t>* ids) const;
  void Merge(std::string_view piece, std::vector<int32_t>* ids) const;

  TokenTable vocab_;                       // raw bytes <-> id
  std::array<int32_t, 256> byte_to_id_{};  // -1 where a byte has no token
  bool byte_level_ = false;
  bool ignore_merges_ = false;  // a piece that is a token is kept whole
  size_t max_token_bytes_ = 0;
  std::optional<int32_t> unk_id_;
  MergeTable merges_;
  std::unique_ptr<std::atomic<uint8_t>[]> whole_;  // [size()] WholeState
  std::unique_ptr<PieceCache> cache_;
};

}  // namespace kvfork
