// A strict, allocation-light JSON reader (RFC 8259) for the two large parts of
// tokenizer.json: the vocabulary (an object of ~150k string -> id) and the
// merges (~150k strings or pairs). Building nlohmann's DOM for those costs a
// node, a std::map entry and a string per token; reading them directly into
// the tokenizer's own tables is several times faster. Everything else in the
// file is small and still parsed by nlohmann from the raw text this reader
// cuts out (SplitObject).
//
// Strings are validated as nlohmann does (escapes, \u surrogate pairs, no raw
// control characters, well-formed UTF-8); a malformed document is an error
// naming the byte offset. Not thread-safe (a cursor); cost O(bytes).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "core/status.h"

namespace kvfork {

class JsonReader {
 public:
  // `what` names the text in errors ("tokenizer.json").
  JsonReader(std::string_view text, std::string what) : text_(text), what_(std::move(what)) {}

  // Skips whitespace; the next byte, or 0 at the end.
  char Peek();
  // Consumes c (after whitespace) or fails.
  Status Expect(char c);
  // Consumes c if it is next (after whitespace).
  bool Consume(char c);
  // A string; *out receives its decoded bytes (cleared first).
  Status ReadString(std::string* out);
  // An integer: a JSON number with neither fraction nor exponent that fits
  // int64. *is_integer is false (and the value skipped) for any other valid
  // JSON value, so the caller can name the field in its error.
  Status ReadInteger(int64_t* value, bool* is_integer);
  // Validates and skips one value; *span receives its raw text.
  Status SkipValue(std::string_view* span = nullptr);
  // Fails unless only whitespace is left.
  Status ExpectEnd();

  // Iterates an object: call after Expect('{'); returns true with the next key
  // read and the ':' consumed, or false after the closing '}'.
  StatusOr<bool> NextKey(bool* first, std::string* key);
  // Iterates an array: call after Expect('['); true if an element follows.
  StatusOr<bool> NextElement(bool* first);

  size_t offset() const { return pos_; }
  Status Error(const std::string& message) const;

 private:
  void SkipWhitespace();
  Status SkipValueAt(int depth);
  Status ReadHex4(uint32_t* value);

  std::string_view text_;
  std::string what_;
  size_t pos_ = 0;
  std::string scratch_;  // strings that are skipped are decoded here
};

// The members of the JSON object `text` as (key, raw value text) pairs, in
// order; the whole text is validated. A key given twice appears twice.
StatusOr<std::vector<std::pair<std::string, std::string_view>>> SplitObject(
    std::string_view text, const std::string& what);

}  // namespace kvfork
