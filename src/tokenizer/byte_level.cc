#include "tokenizer/byte_level.h"

#include <array>
#include <cstdint>

#include "tokenizer/utf8.h"

namespace kvfork {
namespace {

// The alphabet's code points all lie below U+0144 (256 + 68 shifted bytes).
constexpr uint32_t kAlphabetEnd = 0x144;

struct Tables {
  std::array<uint32_t, 256> byte_to_cp;
  std::array<int16_t, kAlphabetEnd> cp_to_byte;  // -1: not in the alphabet
  Tables() {
    cp_to_byte.fill(-1);
    // Printable Latin-1 bytes stand for themselves; the rest (controls,
    // space, 0x7F-0xA0, 0xAD) are shifted to U+0100.. in byte order.
    uint32_t next = 256;
    for (uint32_t b = 0; b < 256; ++b) {
      const bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || b >= 0xAE;
      byte_to_cp[b] = printable ? b : next++;
      cp_to_byte[byte_to_cp[b]] = static_cast<int16_t>(b);
    }
  }
};

const Tables& GetTables() {
  static const Tables tables;
  return tables;
}

}  // namespace

std::string ByteLevelEncode(std::string_view bytes) {
  const Tables& t = GetTables();
  std::string out;
  out.reserve(bytes.size() * 2);
  for (char c : bytes) utf8::AppendCodepoint(t.byte_to_cp[static_cast<uint8_t>(c)], &out);
  return out;
}

bool ByteLevelDecodeTo(std::string_view text, std::string* out) {
  const Tables& t = GetTables();
  out->clear();
  for (size_t i = 0; i < text.size();) {
    const auto b0 = static_cast<uint8_t>(text[i]);
    uint32_t cp;
    if (b0 < 0x80) {  // printable ASCII stands for itself; controls and space are not used
      cp = b0;
      ++i;
    } else if ((b0 & 0xE0) == 0xC0 && i + 1 < text.size() &&
               (static_cast<uint8_t>(text[i + 1]) & 0xC0) == 0x80) {
      // Every alphabet character beyond ASCII is a 2-byte sequence.
      cp = (static_cast<uint32_t>(b0 & 0x1F) << 6) | (static_cast<uint8_t>(text[i + 1]) & 0x3F);
      if (cp < 0x80) return false;  // overlong
      i += 2;
    } else {
      return false;
    }
    if (cp >= kAlphabetEnd || t.cp_to_byte[cp] < 0) return false;
    out->push_back(static_cast<char>(t.cp_to_byte[cp]));
  }
  return true;
}

std::optional<std::string> ByteLevelDecode(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  if (!ByteLevelDecodeTo(text, &out)) return std::nullopt;
  return out;
}

}  // namespace kvfork
