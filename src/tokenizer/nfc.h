// Unicode NFC that leaves text alone where NFC would: most text is already in
// NFC, and running utf8proc over it (decompose every character, reorder,
// recompose) cost as much as the rest of Qwen's tokenizer together.
//
// The text is cut before every "boundary" character, one that NFC can never
// change or combine with what precedes it (UAX #15's NFC_Quick_Check=Yes with
// canonical combining class 0, computed here conservatively from utf8proc's
// own data). NFC of the whole is the concatenation of NFC of the pieces, and a
// piece made of boundary characters only is its own NFC, so only pieces that
// hold some other character (a combining mark, a Hangul jamo, a character
// with a canonical decomposition NFC does not restore) go through utf8proc.
// Invalid UTF-8 bytes pass through unchanged and cut the text too.
//
// Thread-safe; the boundary table (planes 0-2, 24 KiB) is built on first use
// (a few ms). Cost: O(n), one table lookup per non-ASCII character.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace kvfork::nfc {

// True if NFC never changes cp and never combines it with the text before it.
bool IsBoundary(uint32_t cp);

// NFC of text: a view of text itself when NFC leaves it unchanged, else of
// *storage (overwritten).
std::string_view Normalize(std::string_view text, std::string* storage);

}  // namespace kvfork::nfc
