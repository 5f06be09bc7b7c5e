#include "tokenizer/utf8.h"

namespace kvfork::utf8 {

Step DecodeAt(std::string_view s, size_t pos) {
  const auto* p = reinterpret_cast<const uint8_t*>(s.data());
  const size_t n = s.size();
  const uint8_t b0 = p[pos];
  Step st;
  if (b0 < 0x80) return {1, true, false, b0};
  int need;
  uint32_t cp;
  uint8_t lo = 0x80, hi = 0xBF;  // allowed range of the second byte (Unicode table 3-7)
  if (b0 >= 0xC2 && b0 <= 0xDF) {
    need = 1, cp = b0 & 0x1F;
  } else if (b0 >= 0xE0 && b0 <= 0xEF) {
    need = 2, cp = b0 & 0x0F;
    if (b0 == 0xE0) lo = 0xA0;
    if (b0 == 0xED) hi = 0x9F;  // no surrogates
  } else if (b0 >= 0xF0 && b0 <= 0xF4) {
    need = 3, cp = b0 & 0x07;
    if (b0 == 0xF0) lo = 0x90;
    if (b0 == 0xF4) hi = 0x8F;
  } else {
    return {1, false, false, 0};
  }
  size_t i = pos + 1;
  for (int k = 0; k < need; ++k, ++i) {
    if (i >= n) return {i - pos, false, true, 0};
    const uint8_t b = p[i];
    const uint8_t l = k == 0 ? lo : 0x80, h = k == 0 ? hi : 0xBF;
    if (b < l || b > h) return {i - pos, false, false, 0};
    cp = (cp << 6) | (b & 0x3F);
  }
  st.length = i - pos;
  st.valid = true;
  st.codepoint = cp;
  return st;
}

bool IsValid(std::string_view s) {
  for (size_t i = 0; i < s.size();) {
    if (static_cast<uint8_t>(s[i]) < 0x80) {
      ++i;
      continue;
    }
    Step st = DecodeAt(s, i);
    if (!st.valid) return false;
    i += st.length;
  }
  return true;
}

std::string Lossy(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size();) {
    if (static_cast<uint8_t>(s[i]) < 0x80) {
      out.push_back(s[i++]);
      continue;
    }
    Step st = DecodeAt(s, i);
    if (st.valid) {
      out.append(s.substr(i, st.length));
    } else {
      out.append("\xEF\xBF\xBD");
    }
    i += st.length;
  }
  return out;
}

size_t CompletePrefixLength(std::string_view s) {
  const size_t n = s.size();
  const size_t start = n > 3 ? n - 3 : 0;
  for (size_t i = start; i < n; ++i) {
    const auto b = static_cast<uint8_t>(s[i]);
    if (b >= 0x80 && b < 0xC0) continue;  // a continuation byte cannot start one
    Step st = DecodeAt(s, i);
    if (st.truncated) return i;
  }
  return n;
}

void AppendCodepoint(uint32_t cp, std::string* out) {
  if (cp < 0x80) {
    out->push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out->push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out->push_back(static_cast<char>(0xE0 | (cp >> 12)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    out->push_back(static_cast<char>(0xF0 | (cp >> 18)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
}

}  // namespace kvfork::utf8
