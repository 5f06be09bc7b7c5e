// tokenizer.json "model" of type BPE: the vocabulary, the ranked merges, and
// the merge loop (a priority queue over the piece's symbols, O(n log n) per
// piece) behind a bounded cache of pre-tokens already encoded.
//
// Tokens are stored as raw bytes: for a byte-level vocabulary the GPT-2
// alphabet spelling of tokenizer.json is decoded once at load, so encoding
// never converts text to the alphabet.
//
// Thread safety: immutable after FromJson except the cache, which is sharded
// and locked; Encode may run on many threads at once.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/status.h"

namespace kvfork {

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

  // json is the "model" object. byte_level: vocab keys are in GPT-2's byte
  // alphabet. Errors name the bad field, token or merge.
  static StatusOr<BpeModel> FromJson(const nlohmann::json& json, bool byte_level);

  // Appends the ids of one pre-token (raw bytes).
  void Encode(std::string_view piece, std::vector<int32_t>* ids) const;

  // Raw bytes of token id ("" beyond the vocabulary).
  const std::string& TokenBytes(int32_t id) const;
  std::optional<int32_t> TokenId(std::string_view bytes) const;
  int64_t size() const { return static_cast<int64_t>(id_to_bytes_.size()); }

 private:
  struct MergeTable;  // open-addressing (left id, right id) -> (rank, merged id)
  struct Cache;
  BpeModel();
  void Merge(std::string_view piece, std::vector<int32_t>* ids) const;

  TokenMap vocab_;                          // raw bytes -> id
  std::vector<std::string> id_to_bytes_;    // [max id + 1]
  std::array<int32_t, 256> byte_to_id_{};   // -1 where a byte has no token
  bool byte_level_ = false;
  bool ignore_merges_ = false;              // a piece that is a token is kept whole
  std::optional<int32_t> unk_id_;
  std::unique_ptr<MergeTable> merges_;
  std::unique_ptr<Cache> cache_;
};

}  // namespace kvfork
