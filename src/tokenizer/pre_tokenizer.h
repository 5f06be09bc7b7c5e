// tokenizer.json "pre_tokenizer": cuts normalized text into the pieces BPE
// runs on. Supports Split (regex or literal, every SplitDelimiterBehavior,
// invert), ByteLevel (add_prefix_space; use_regex applies GPT-2's pattern, the
// one Hugging Face's ByteLevel carries itself) and Sequence of them. As in
// Hugging Face, a step after ByteLevel sees the text in GPT-2's byte
// alphabet (Falcon's Digits step splits at the byte 0xBD of "½", whose
// alphabet character is '½'); pieces stay raw bytes.
//
// Thread safety: immutable after FromJson; Split may run on many threads.
// Cost: one regex pass per Split step, O(n).
#pragma once

#include <deque>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/status.h"
#include "tokenizer/regex.h"

namespace kvfork {

class PreTokenizer {
 public:
  enum class Behavior { kRemoved, kIsolated, kMergedWithPrevious, kMergedWithNext, kContiguous };

  // json is the "pre_tokenizer" value; null means the whole text is one piece.
  static StatusOr<PreTokenizer> FromJson(const nlohmann::json& json);

  // Appends the non-empty pieces of text, in order. Pieces view text or
  // strings owned by arena (when a step prepends a space).
  void Split(std::string_view text, std::vector<std::string_view>* pieces,
             std::deque<std::string>* arena) const;

  // True if a ByteLevel step is present: the vocabulary is spelled in GPT-2's
  // byte alphabet.
  bool byte_level() const { return byte_level_; }
  // True if a Split step drops what it matches ("Removed"): such text yields
  // no token at all.
  bool removes_text() const { return removes_text_; }

 private:
  struct Step {
    enum class Kind { kSplit, kByteLevel } kind = Kind::kSplit;
    std::unique_ptr<Regex> regex;  // kSplit, or kByteLevel with use_regex
    Behavior behavior = Behavior::kIsolated;
    bool invert = false;
    bool add_prefix_space = false;    // kByteLevel
    bool sees_byte_alphabet = false;  // a ByteLevel step came before
  };
  static void ApplySplitToAlphabet(const Step& step, std::string_view piece,
                                   std::vector<std::string_view>* out);
  static Status AddSteps(const nlohmann::json& json, PreTokenizer* out);
  static void ApplySplit(const Step& step, std::string_view piece,
                         std::vector<std::string_view>* out);

  std::vector<Step> steps_;
  bool byte_level_ = false;
  bool removes_text_ = false;
};

}  // namespace kvfork
