// Python str semantics on UTF-8 strings, as the Jinja interpreter needs them:
// a str is a sequence of code points, so length, indexing and slicing count
// code points; strip/split without arguments use str.isspace(); repr() picks
// its quote like CPython. Pure functions; thread-safe; O(length).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace kvfork::jinja {

// Invalid UTF-8 bytes decode as U+FFFD one byte at a time (templates and
// messages are validated as JSON text before they get here).
std::vector<uint32_t> DecodeUtf8(std::string_view s);
void AppendUtf8(uint32_t cp, std::string* out);
std::string EncodeUtf8(const std::vector<uint32_t>& cps);
size_t CodepointCount(std::string_view s);

// str.isspace() for one code point (also what Python's re calls \s).
bool IsPySpace(uint32_t cp);

// str.strip/lstrip/rstrip; chars == nullopt strips whitespace.
std::string PyStrip(std::string_view s, const std::optional<std::string>& chars, bool left,
                    bool right);
// str.split(sep, maxsplit); sep == nullopt splits on runs of whitespace.
// An empty sep is an error the caller reports (Python: ValueError).
std::vector<std::string> PySplit(std::string_view s, const std::optional<std::string>& sep,
                                 int64_t maxsplit);
std::vector<std::string> PyRsplit(std::string_view s, const std::optional<std::string>& sep,
                                  int64_t maxsplit);
// str.replace(old, new, count); count < 0 replaces all.
std::string PyReplace(std::string_view s, std::string_view old_sub, std::string_view new_sub,
                      int64_t count);
std::string PyUpper(std::string_view s);
std::string PyLower(std::string_view s);
std::string PyTitle(std::string_view s);       // str.title()
std::string PyCapitalize(std::string_view s);  // str.capitalize()
// repr(str): 'text' with CPython's quote choice and escapes.
std::string PyStrRepr(std::string_view s);
// Python's repr(float): shortest round-trip digits, exponent form outside
// 1e-4 <= |v| < 1e16.
std::string PyFloatRepr(double v);

}  // namespace kvfork::jinja
