#include "tokenizer/byte_level.h"

#include <array>
#include <cstdint>
#include <unordered_map>

#include "tokenizer/utf8.h"

namespace kvfork {
namespace {

struct Tables {
  std::array<uint32_t, 256> byte_to_cp;
  std::unordered_map<uint32_t, uint8_t> cp_to_byte;
  Tables() {
    // Printable Latin-1 bytes stand for themselves; the rest (controls,
    // space, 0x7F-0xA0, 0xAD) are shifted to U+0100.. in byte order.
    uint32_t next = 256;
    for (uint32_t b = 0; b < 256; ++b) {
      const bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || b >= 0xAE;
      byte_to_cp[b] = printable ? b : next++;
      cp_to_byte[byte_to_cp[b]] = static_cast<uint8_t>(b);
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

std::optional<std::string> ByteLevelDecode(std::string_view text) {
  const Tables& t = GetTables();
  std::string out;
  out.reserve(text.size());
  for (size_t i = 0; i < text.size();) {
    utf8::Step st = utf8::DecodeAt(text, i);
    if (!st.valid) return std::nullopt;
    auto it = t.cp_to_byte.find(st.codepoint);
    if (it == t.cp_to_byte.end()) return std::nullopt;
    out.push_back(static_cast<char>(it->second));
    i += st.length;
  }
  return out;
}

}  // namespace kvfork
