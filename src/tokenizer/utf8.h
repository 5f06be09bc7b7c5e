// UTF-8 helpers shared by the tokenizer: validation, the lossy conversion
// Decode() applies (Rust's String::from_utf8_lossy: each maximal invalid
// subpart becomes one U+FFFD), and where a byte string stops being complete.
// Pure functions; thread-safe; O(length).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace kvfork::utf8 {

// Result of decoding one sequence at a position.
struct Step {
  size_t length = 0;       // bytes consumed: the sequence, or the invalid subpart
  bool valid = false;      // a whole, well-formed character
  bool truncated = false;  // !valid only because the text ended inside it
  uint32_t codepoint = 0;  // when valid
};
Step DecodeAt(std::string_view s, size_t pos);

bool IsValid(std::string_view s);
// Invalid subparts replaced by U+FFFD (one per maximal subpart).
std::string Lossy(std::string_view s);
// Length of the longest prefix that does not end inside a character that the
// following bytes could still complete (at most 3 bytes are held back).
size_t CompletePrefixLength(std::string_view s);
void AppendCodepoint(uint32_t cp, std::string* out);

}  // namespace kvfork::utf8
