// Code-point sets as UTF-8 byte-range sequences, so a byte-level grammar can
// match a character class: [a-zà-ö] becomes [a-z] | [\xC3] [\xA0-\xB6].
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace kvfork::grammar {

struct CodeRange {
  uint32_t lo = 0, hi = 0;  // inclusive code points
};
struct ByteRange {
  uint8_t lo = 0, hi = 0;  // inclusive bytes
};

// The code points in [0, 0x10FFFF] not in `ranges` (surrogates excluded:
// they have no UTF-8 form).
std::vector<CodeRange> Complement(std::vector<CodeRange> ranges);

// Byte-range sequences whose union is exactly the UTF-8 encodings of the
// code points in `ranges` (surrogates dropped).
std::vector<std::vector<ByteRange>> Utf8Sequences(const std::vector<CodeRange>& ranges);

// The UTF-8 bytes of a code point (tokenizer/utf8.h's encoder).
void AppendUtf8(uint32_t cp, std::string* out);

}  // namespace kvfork::grammar
