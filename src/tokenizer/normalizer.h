// tokenizer.json "normalizer": null, NFC, NFD, NFKC, NFKD, Lowercase, or a
// Sequence of them (utf8proc). Invalid UTF-8 passes through unchanged; only
// the valid runs around it are normalized.
//
// Thread safety: immutable after FromJson. Cost: O(n) with an all-ASCII fast
// path (ASCII is invariant under every supported form except Lowercase); NFC
// only runs utf8proc around characters that NFC may change (nfc.h).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/status.h"

namespace kvfork {

// The most any supported normalizer (or sequence of them) shrinks text, as
// input bytes over output bytes: NFKC turns the 4-byte U+1D400 into "A";
// NFC's worst is 3 (Hangul jamo L+V+T to one syllable, the Kelvin sign to
// "K"). tokenizer_bounds_test checks it on every code point, alone and
// decomposed.
inline constexpr int64_t kMaxNormalizerShrink = 4;

class Normalizer {
 public:
  enum class Kind { kNfc, kNfd, kNfkc, kNfkd, kLowercase };

  // json is the "normalizer" value (not null); error names an unknown type.
  static StatusOr<Normalizer> FromJson(const nlohmann::json& json);

  std::string Normalize(std::string_view text) const;
  // The same as a view: of text itself when no step changes it (NFC of text
  // already in NFC, the usual case), else of *storage.
  std::string_view Normalize(std::string_view text, std::string* storage) const;

 private:
  std::vector<Kind> steps_;
};

}  // namespace kvfork
