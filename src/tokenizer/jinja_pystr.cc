#include "tokenizer/jinja_pystr.h"
#include "tokenizer/utf8.h"

// GCC 12 at -O3 reports a false -Wrestrict inside std::string concatenation
// (GCC bug 105651); nothing here copies overlapping memory.
#pragma GCC diagnostic ignored "-Wrestrict"

#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstdlib>

#include <utf8proc.h>

namespace kvfork::jinja {
namespace {

// Decodes one code point at s[*pos] and advances *pos.
uint32_t NextCodepoint(std::string_view s, size_t* pos) {
  const auto b0 = static_cast<unsigned char>(s[*pos]);
  int len = b0 < 0x80 ? 1 : (b0 >> 5) == 0x6 ? 2 : (b0 >> 4) == 0xE ? 3 : (b0 >> 3) == 0x1E ? 4 : 0;
  if (len == 0 || *pos + len > s.size()) {
    ++*pos;
    return 0xFFFD;
  }
  uint32_t cp = len == 1 ? b0 : len == 2 ? (b0 & 0x1F) : len == 3 ? (b0 & 0x0F) : (b0 & 0x07);
  for (int i = 1; i < len; ++i) {
    const auto b = static_cast<unsigned char>(s[*pos + i]);
    if ((b & 0xC0) != 0x80) {
      ++*pos;
      return 0xFFFD;
    }
    cp = (cp << 6) | (b & 0x3F);
  }
  *pos += len;
  return cp;
}

bool InChars(uint32_t cp, const std::vector<uint32_t>& chars) {
  for (uint32_t c : chars) {
    if (c == cp) return true;
  }
  return false;
}

bool IsCased(uint32_t cp) {
  return utf8proc_toupper(cp) != static_cast<int32_t>(cp) ||
         utf8proc_tolower(cp) != static_cast<int32_t>(cp);
}

// Py_UNICODE_ISPRINTABLE: everything except the categories Cc, Cf, Cs, Co,
// Cn, Zl, Zp and Zs other than the ASCII space.
bool IsPrintable(uint32_t cp) {
  if (cp == ' ') return true;
  switch (utf8proc_category(cp)) {
    case UTF8PROC_CATEGORY_CC:
    case UTF8PROC_CATEGORY_CF:
    case UTF8PROC_CATEGORY_CS:
    case UTF8PROC_CATEGORY_CO:
    case UTF8PROC_CATEGORY_CN:
    case UTF8PROC_CATEGORY_ZL:
    case UTF8PROC_CATEGORY_ZP:
    case UTF8PROC_CATEGORY_ZS:
      return false;
    default:
      return true;
  }
}

}  // namespace

std::vector<uint32_t> DecodeUtf8(std::string_view s) {
  std::vector<uint32_t> out;
  out.reserve(s.size());
  size_t pos = 0;
  while (pos < s.size()) out.push_back(NextCodepoint(s, &pos));
  return out;
}

void AppendUtf8(uint32_t cp, std::string* out) { utf8::AppendCodepoint(cp, out); }

std::string EncodeUtf8(const std::vector<uint32_t>& cps) {
  std::string out;
  out.reserve(cps.size());
  for (uint32_t cp : cps) AppendUtf8(cp, &out);
  return out;
}

size_t CodepointCount(std::string_view s) {
  size_t n = 0;
  size_t pos = 0;
  while (pos < s.size()) {
    NextCodepoint(s, &pos);
    ++n;
  }
  return n;
}

bool IsPySpace(uint32_t cp) {
  switch (cp) {
    case 0x09: case 0x0A: case 0x0B: case 0x0C: case 0x0D: case 0x1C: case 0x1D: case 0x1E:
    case 0x1F: case 0x20: case 0x85: case 0xA0: case 0x1680: case 0x2028: case 0x2029:
    case 0x202F: case 0x205F: case 0x3000:
      return true;
    default:
      return cp >= 0x2000 && cp <= 0x200A;
  }
}

std::string PyStrip(std::string_view s, const std::optional<std::string>& chars, bool left,
                    bool right) {
  std::vector<uint32_t> cps = DecodeUtf8(s);
  std::vector<uint32_t> set;
  if (chars) set = DecodeUtf8(*chars);
  auto strip = [&](uint32_t cp) { return chars ? InChars(cp, set) : IsPySpace(cp); };
  size_t begin = 0;
  size_t end = cps.size();
  if (left) {
    while (begin < end && strip(cps[begin])) ++begin;
  }
  if (right) {
    while (end > begin && strip(cps[end - 1])) --end;
  }
  return EncodeUtf8(std::vector<uint32_t>(cps.begin() + begin, cps.begin() + end));
}

std::vector<std::string> PySplit(std::string_view s, const std::optional<std::string>& sep,
                                 int64_t maxsplit) {
  std::vector<std::string> out;
  if (sep) {
    size_t start = 0;
    while (maxsplit < 0 || static_cast<int64_t>(out.size()) < maxsplit) {
      size_t hit = s.find(*sep, start);
      if (hit == std::string_view::npos) break;
      out.emplace_back(s.substr(start, hit - start));
      start = hit + sep->size();
    }
    out.emplace_back(s.substr(start));
    return out;
  }
  std::vector<uint32_t> cps = DecodeUtf8(s);
  size_t i = 0;
  while (i < cps.size()) {
    while (i < cps.size() && IsPySpace(cps[i])) ++i;
    if (i == cps.size()) break;
    if (maxsplit >= 0 && static_cast<int64_t>(out.size()) == maxsplit) {
      // The rest, with only its trailing whitespace removed.
      size_t end = cps.size();
      while (end > i && IsPySpace(cps[end - 1])) --end;
      out.push_back(EncodeUtf8(std::vector<uint32_t>(cps.begin() + i, cps.begin() + end)));
      break;
    }
    size_t j = i;
    while (j < cps.size() && !IsPySpace(cps[j])) ++j;
    out.push_back(EncodeUtf8(std::vector<uint32_t>(cps.begin() + i, cps.begin() + j)));
    i = j;
  }
  return out;
}

std::vector<std::string> PyRsplit(std::string_view s, const std::optional<std::string>& sep,
                                  int64_t maxsplit) {
  if (maxsplit < 0) return PySplit(s, sep, maxsplit);
  std::vector<std::string> out;
  if (sep) {
    size_t end = s.size();
    while (static_cast<int64_t>(out.size()) < maxsplit) {
      if (end < sep->size()) break;
      size_t hit = s.rfind(*sep, end - sep->size());
      if (hit == std::string_view::npos) break;
      out.emplace_back(s.substr(hit + sep->size(), end - hit - sep->size()));
      end = hit;
    }
    out.emplace_back(s.substr(0, end));
  } else {
    std::vector<uint32_t> cps = DecodeUtf8(s);
    size_t j = cps.size();
    while (j > 0) {
      while (j > 0 && IsPySpace(cps[j - 1])) --j;
      if (j == 0) break;
      if (static_cast<int64_t>(out.size()) == maxsplit) {
        size_t begin = 0;
        while (begin < j && IsPySpace(cps[begin])) ++begin;
        out.push_back(EncodeUtf8(std::vector<uint32_t>(cps.begin() + begin, cps.begin() + j)));
        break;
      }
      size_t i = j;
      while (i > 0 && !IsPySpace(cps[i - 1])) --i;
      out.push_back(EncodeUtf8(std::vector<uint32_t>(cps.begin() + i, cps.begin() + j)));
      j = i;
    }
  }
  return std::vector<std::string>(out.rbegin(), out.rend());
}

std::string PyReplace(std::string_view s, std::string_view old_sub, std::string_view new_sub,
                      int64_t count) {
  std::string out;
  if (old_sub.empty()) {
    // Python inserts new_sub between every code point and at both ends.
    std::vector<uint32_t> cps = DecodeUtf8(s);
    int64_t done = 0;
    for (size_t i = 0; i <= cps.size(); ++i) {
      if (count < 0 || done < count) {
        out.append(new_sub);
        ++done;
      }
      if (i < cps.size()) AppendUtf8(cps[i], &out);
    }
    return out;
  }
  size_t start = 0;
  int64_t done = 0;
  while (count < 0 || done < count) {
    size_t hit = s.find(old_sub, start);
    if (hit == std::string_view::npos) break;
    out.append(s.substr(start, hit - start));
    out.append(new_sub);
    start = hit + old_sub.size();
    ++done;
  }
  out.append(s.substr(start));
  return out;
}

std::string PyUpper(std::string_view s) {
  std::string out;
  for (uint32_t cp : DecodeUtf8(s)) AppendUtf8(utf8proc_toupper(cp), &out);
  return out;
}

std::string PyLower(std::string_view s) {
  std::string out;
  for (uint32_t cp : DecodeUtf8(s)) AppendUtf8(utf8proc_tolower(cp), &out);
  return out;
}

std::string PyTitle(std::string_view s) {
  std::string out;
  bool prev_cased = false;
  for (uint32_t cp : DecodeUtf8(s)) {
    const bool cased = IsCased(cp);
    AppendUtf8(prev_cased ? utf8proc_tolower(cp) : utf8proc_totitle(cp), &out);
    prev_cased = cased;
  }
  return out;
}

std::string PyCapitalize(std::string_view s) {
  std::string out;
  bool first = true;
  for (uint32_t cp : DecodeUtf8(s)) {
    AppendUtf8(first ? utf8proc_totitle(cp) : utf8proc_tolower(cp), &out);
    first = false;
  }
  return out;
}

std::string PyStrRepr(std::string_view s) {
  const bool has_single = s.find('\'') != std::string_view::npos;
  const bool has_double = s.find('"') != std::string_view::npos;
  const char quote = has_single && !has_double ? '"' : '\'';
  std::string out(1, quote);
  for (uint32_t cp : DecodeUtf8(s)) {
    char buf[16];
    if (cp == static_cast<uint32_t>(quote) || cp == '\\') {
      out.push_back('\\');
      out.push_back(static_cast<char>(cp));
    } else if (cp == '\t') {
      out += "\\t";
    } else if (cp == '\n') {
      out += "\\n";
    } else if (cp == '\r') {
      out += "\\r";
    } else if (cp < 0x20 || cp == 0x7F) {
      std::snprintf(buf, sizeof(buf), "\\x%02x", cp);
      out += buf;
    } else if (cp < 0x7F || IsPrintable(cp)) {
      AppendUtf8(cp, &out);
    } else {
      std::snprintf(buf, sizeof(buf), cp < 0x100 ? "\\x%02x" : cp < 0x10000 ? "\\u%04x" : "\\U%08x",
                    cp);
      out += buf;
    }
  }
  out.push_back(quote);
  return out;
}

std::string PyFloatRepr(double v) {
  if (std::isnan(v)) return "nan";
  if (std::isinf(v)) return v < 0 ? "-inf" : "inf";
  char buf[64];
  auto res = std::to_chars(buf, buf + sizeof(buf), v, std::chars_format::scientific);
  std::string sci(buf, res.ptr);  // e.g. "-1.5e-05": shortest round-trip digits
  std::string out;
  size_t i = 0;
  if (sci[0] == '-') {
    out.push_back('-');
    i = 1;
  }
  const size_t e_pos = sci.find('e');
  std::string digits;
  for (size_t k = i; k < e_pos; ++k) {
    if (sci[k] != '.') digits.push_back(sci[k]);
  }
  const int exp = std::atoi(sci.c_str() + e_pos + 1);
  const int n = static_cast<int>(digits.size());
  if (exp >= -4 && exp < 16) {
    const int point = exp + 1;  // digits before the decimal point
    if (point <= 0) {
      out += "0." + std::string(-point, '0') + digits;
    } else if (point >= n) {
      out += digits + std::string(point - n, '0') + ".0";
    } else {
      out += digits.substr(0, point) + "." + digits.substr(point);
    }
    return out;
  }
  out.push_back(digits[0]);
  if (n > 1) out += "." + digits.substr(1);
  std::snprintf(buf, sizeof(buf), "e%c%02d", exp < 0 ? '-' : '+', exp < 0 ? -exp : exp);
  out += buf;
  return out;
}

}  // namespace kvfork::jinja
