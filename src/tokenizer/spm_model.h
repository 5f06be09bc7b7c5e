// SentencePiece BPE as llama.cpp runs it on a GGUF vocabulary whose
// tokenizer.ggml.model is "llama" (Llama 2, Gemma 3, Phi-3, Mistral v1):
// the vocabulary and scores, the merge loop and byte fallback of
// llm_tokenizer_spm. Spaces, the prefix space and special tokens are the
// caller's (spm_tokenizer.h); this runs on text whose spaces are already "▁".
//
// The merge loop, as llm_tokenizer_spm: the text starts as one symbol per
// UTF-8 character (the length read from the lead byte alone, so invalid
// UTF-8 gives llama.cpp's symbols); every pair of neighbours whose
// concatenation is a token (any token: normal, control, unused, ...) is a
// candidate scored by that token's score; the best candidate (highest score,
// leftmost on ties) merges, and its new neighbours become candidates; until
// none is left. A final symbol that is not a token becomes one byte token
// (<0xXX>, else the one-byte token) per byte, or the unknown token where
// the vocabulary has neither.
//
// Cutting (exact): a merge joins two neighbouring symbols only if some token
// holds them side by side, so where no token does, no merge ever crosses and
// the two sides can be merged apart. The pairs of neighbouring symbols inside
// the tokens are kept as one bit per hash (a false positive only keeps two
// symbols together). Two cuts:
//   - at words: when no token holds a "▁" right after another character
//     (true of Llama 2's and Phi-3's vocabularies, checked at load), the
//     text is cut before each "▁" that follows a character, with no lookup,
//     and words ("▁Hello", "▁▁world") recur through a PieceCache;
//   - at pairs: a word the cache does not have (or the whole text, when the
//     vocabulary holds "x▁") is cut where its symbols make no token's pair
//     (between most CJK characters, emoji, punctuation runs), and each part
//     goes through the cache and the merge loop.
// The ids are those of one merge loop over the whole text, as llama.cpp runs
// it (spm_tokenizer_test checks this against such a loop).
//
// Thread safety: immutable after Create except the cache (locked); Encode
// may run on many threads at once. Cost: O(n log n) per part; memory:
// 16 bytes per table slot plus the token bytes, 4 bytes per score, 2 bytes
// per symbol pair of the tokens (~0.5 MiB for Llama 2's 32k tokens).
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"
#include "tokenizer/token_table.h"

namespace kvfork {

class PieceCache;

class SpmModel {
 public:
  ~SpmModel();
  SpmModel(SpmModel&&) noexcept;
  SpmModel& operator=(SpmModel&&) noexcept;

  // tokens[i] is id i's text (spaces as "▁", bytes as "<0xXX>"), scores[i]
  // its merge score. unk_id: what a byte with no byte token becomes. Errors
  // name the token at fault (a duplicate, or a byte with no token and no
  // unknown token).
  static StatusOr<SpmModel> Create(std::span<const std::string> tokens,
                                   std::span<const float> scores, std::optional<int32_t> unk_id);

  // Appends the ids of text (spaces already "▁").
  void Encode(std::string_view text, std::vector<int32_t>* ids) const;

  int32_t Find(std::string_view text) const { return table_.Find(text); }  // -1 if none
  std::string_view Text(int32_t id) const { return table_.Bytes(id); }
  // The token a byte falls back to (always a valid id).
  int32_t ByteToken(uint8_t byte) const { return byte_tokens_[byte]; }
  int64_t size() const { return static_cast<int64_t>(scores_.size()); }
  // Whether text is merged word by word (see the header comment).
  bool cuts_at_words() const { return cuts_at_words_; }

 private:
  SpmModel();
  // Whether some token holds `pair` (two neighbouring symbols) inside it;
  // false positives possible.
  bool MayJoin(std::string_view pair) const {
    const uint64_t bit = HashBytes(pair) & pair_bit_mask_;
    return (pair_bits_[bit >> 6] >> (bit & 63)) & 1;
  }
  // A stretch of text no candidate crosses: the cache, else cut at pairs.
  void EncodeWord(std::string_view word, std::vector<int32_t>* ids) const;
  // One part of a word: the cache, else the merge loop.
  void EncodePart(std::string_view part, std::vector<int32_t>* ids) const;
  // The merge loop on one stretch of text that no candidate crosses.
  void Merge(std::string_view text, std::vector<int32_t>* ids) const;

  TokenTable table_;
  std::vector<float> scores_;             // [size()]
  std::array<int32_t, 256> byte_tokens_;  // byte -> token
  bool cuts_at_words_ = false;
  std::vector<uint64_t> pair_bits_;  // bit HashBytes(pair) & pair_bit_mask_
  uint64_t pair_bit_mask_ = 0;
  std::unique_ptr<PieceCache> cache_;
};

// llama.cpp's symbol length for a UTF-8 lead byte (unicode_len_utf8): 1 for
// ASCII and for a continuation byte, else 2, 3 or 4 by the high bits.
inline size_t SpmSymbolLength(uint8_t lead) {
  static constexpr uint8_t kLength[16] = {1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 3, 4};
  return kLength[lead >> 4];
}

inline constexpr std::string_view kSpmSpace = "\xe2\x96\x81";  // U+2581 "▁"

}  // namespace kvfork
