#include "grammar/utf8_ranges.h"

#include <algorithm>

#include "tokenizer/utf8.h"

namespace kvfork::grammar {
namespace {

int Utf8Length(uint32_t cp) { return cp < 0x80 ? 1 : cp < 0x800 ? 2 : cp < 0x10000 ? 3 : 4; }

std::vector<uint8_t> Encode(uint32_t cp) {
  std::string s;
  AppendUtf8(cp, &s);
  return std::vector<uint8_t>(s.begin(), s.end());
}

// Sequences for [lo, hi], both of the same UTF-8 length, from byte i on,
// where lo and hi agree on the bytes before i.
void Split(const std::vector<uint8_t>& lo, const std::vector<uint8_t>& hi, size_t i,
           std::vector<ByteRange> prefix, std::vector<std::vector<ByteRange>>* out) {
  const size_t n = lo.size();
  if (i == n - 1) {
    prefix.push_back({lo[i], hi[i]});
    out->push_back(std::move(prefix));
    return;
  }
  if (lo[i] == hi[i]) {
    prefix.push_back({lo[i], lo[i]});
    Split(lo, hi, i + 1, std::move(prefix), out);
    return;
  }
  // Whether the rest of lo is the smallest continuation (all 0x80) and of
  // hi the largest (all 0xBF): then lo[i] / hi[i] need no partial piece.
  bool lo_min = true, hi_max = true;
  for (size_t k = i + 1; k < n; ++k) {
    lo_min = lo_min && lo[k] == 0x80;
    hi_max = hi_max && hi[k] == 0xBF;
  }
  uint8_t mid_lo = lo[i], mid_hi = hi[i];
  if (!lo_min) {
    std::vector<uint8_t> top = lo;
    for (size_t k = i + 1; k < n; ++k) top[k] = 0xBF;
    Split(lo, top, i, prefix, out);
    ++mid_lo;
  }
  std::vector<uint8_t> hi_part_lo;
  if (!hi_max) --mid_hi;
  if (mid_lo <= mid_hi) {
    std::vector<ByteRange> p = prefix;
    p.push_back({mid_lo, mid_hi});
    for (size_t k = i + 1; k < n; ++k) p.push_back({0x80, 0xBF});
    out->push_back(std::move(p));
  }
  if (!hi_max) {
    std::vector<uint8_t> bottom = hi;
    for (size_t k = i + 1; k < n; ++k) bottom[k] = 0x80;
    Split(bottom, hi, i, prefix, out);
  }
}

}  // namespace

void AppendUtf8(uint32_t cp, std::string* out) { utf8::AppendCodepoint(cp, out); }

std::vector<CodeRange> Complement(std::vector<CodeRange> ranges) {
  ranges.push_back({0xD800, 0xDFFF});
  std::sort(ranges.begin(), ranges.end(),
            [](const CodeRange& a, const CodeRange& b) { return a.lo < b.lo; });
  std::vector<CodeRange> out;
  uint32_t next = 0;
  for (const CodeRange& r : ranges) {
    if (r.lo > next) out.push_back({next, r.lo - 1});
    next = std::max(next, r.hi + 1);
  }
  if (next <= 0x10FFFF) out.push_back({next, 0x10FFFF});
  return out;
}

std::vector<std::vector<ByteRange>> Utf8Sequences(const std::vector<CodeRange>& ranges) {
  std::vector<std::vector<ByteRange>> out;
  for (CodeRange r : ranges) {
    r.hi = std::min<uint32_t>(r.hi, 0x10FFFF);
    // Cut at the UTF-8 length boundaries and around the surrogates.
    static const uint32_t kCuts[][2] = {
        {0, 0x7F}, {0x80, 0x7FF}, {0x800, 0xD7FF}, {0xE000, 0xFFFF}, {0x10000, 0x10FFFF}};
    for (const auto& cut : kCuts) {
      const uint32_t lo = std::max(r.lo, cut[0]), hi = std::min(r.hi, cut[1]);
      if (lo > hi) continue;
      if (Utf8Length(lo) == 1) {
        out.push_back({{static_cast<uint8_t>(lo), static_cast<uint8_t>(hi)}});
        continue;
      }
      Split(Encode(lo), Encode(hi), 0, {}, &out);
    }
  }
  return out;
}

}  // namespace kvfork::grammar
