// GPT-2's byte-level alphabet: every byte 0..255 stands for one printable
// code point (bytes_to_unicode in openai/gpt-2 encoder.py), so a BPE vocabulary
// over bytes can be stored as text in tokenizer.json. Thread-safe; tables are
// built once.
#pragma once

#include <optional>
#include <string>
#include <string_view>

namespace kvfork {

// The alphabet's UTF-8 spelling of raw bytes.
std::string ByteLevelEncode(std::string_view bytes);
// Raw bytes of alphabet text; nullopt if a character is not in the alphabet.
std::optional<std::string> ByteLevelDecode(std::string_view text);
// The same into *out (cleared first, its capacity reused); false if a
// character is not in the alphabet (*out is then unspecified).
bool ByteLevelDecodeTo(std::string_view text, std::string* out);

}  // namespace kvfork
