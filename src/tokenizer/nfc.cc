#include "tokenizer/nfc.h"

#include <utf8proc.h>

#include <cstdlib>
#include <vector>

#include "tokenizer/utf8.h"

namespace kvfork::nfc {
namespace {

// Canonical decompositions end at U+2FA1D (CJK compatibility ideographs
// supplement); code points from here on are treated as non-boundaries, which
// only costs speed.
constexpr uint32_t kTableEnd = 0x30000;
constexpr int kMaxDecomposition = 32;

bool IsSurrogate(uint32_t cp) { return cp >= 0xD800 && cp <= 0xDFFF; }

// Full canonical decomposition of cp (Hangul included); n == 1 and
// out[0] == cp when it has none.
int Decompose(uint32_t cp, utf8proc_int32_t* out) {
  int boundclass = 0;
  return static_cast<int>(utf8proc_decompose_char(
      static_cast<utf8proc_int32_t>(cp), out, kMaxDecomposition, UTF8PROC_DECOMPOSE, &boundclass));
}

int CombiningClass(uint32_t cp) {
  return utf8proc_get_property(static_cast<utf8proc_int32_t>(cp))->combining_class;
}

// NFC of the single character cp is cp itself (false for singletons such as
// U+212B ANGSTROM SIGN and for composition exclusions).
bool ComposesBackTo(uint32_t cp) {
  std::string utf8;
  utf8::AppendCodepoint(cp, &utf8);
  utf8proc_int32_t buffer[kMaxDecomposition];
  const auto options = static_cast<utf8proc_option_t>(UTF8PROC_STABLE | UTF8PROC_COMPOSE);
  utf8proc_ssize_t n = utf8proc_decompose(reinterpret_cast<const utf8proc_uint8_t*>(utf8.data()),
                                          static_cast<utf8proc_ssize_t>(utf8.size()), buffer,
                                          kMaxDecomposition, options);
  if (n < 0 || n > kMaxDecomposition) return false;
  n = utf8proc_normalize_utf32(buffer, n, options);
  return n == 1 && static_cast<uint32_t>(buffer[0]) == cp;
}

class BoundaryTable {
 public:
  BoundaryTable() : bits_(kTableEnd / 64, 0) {
    utf8proc_int32_t d[kMaxDecomposition];
    // Every character that follows the first in some canonical
    // decomposition: composition only ever joins such a character to the
    // starter before it (this covers Hangul V and T jamo too).
    std::vector<bool> second(kTableEnd, false);
    for (uint32_t cp = 0; cp < kTableEnd; ++cp) {
      if (IsSurrogate(cp)) continue;
      const int n = Decompose(cp, d);
      for (int k = 1; k < n && k < kMaxDecomposition; ++k)
        if (static_cast<uint32_t>(d[k]) < kTableEnd) second[static_cast<size_t>(d[k])] = true;
    }
    for (uint32_t cp = 0; cp < kTableEnd; ++cp) {
      if (IsSurrogate(cp) || second[cp] || CombiningClass(cp) != 0) continue;
      const int n = Decompose(cp, d);
      if (n < 1 || n > kMaxDecomposition) continue;
      if (n > 1 || static_cast<uint32_t>(d[0]) != cp) {
        // Decomposed, it must start with a starter that nothing before can
        // reorder with or compose with, and recompose to itself.
        const auto first = static_cast<uint32_t>(d[0]);
        if (first >= kTableEnd || second[first] || CombiningClass(first) != 0) continue;
        if (!ComposesBackTo(cp)) continue;
      }
      bits_[cp / 64] |= uint64_t{1} << (cp % 64);
    }
  }
  bool Get(uint32_t cp) const { return cp < kTableEnd && ((bits_[cp / 64] >> (cp % 64)) & 1) != 0; }

 private:
  std::vector<uint64_t> bits_;  // [kTableEnd / 64]
};

const BoundaryTable& Table() {
  static const BoundaryTable table;
  return table;
}

// utf8proc's NFC of valid UTF-8.
void AppendNfc(std::string_view valid, std::string* out) {
  utf8proc_uint8_t* result = nullptr;
  const utf8proc_ssize_t len =
      utf8proc_map(reinterpret_cast<const utf8proc_uint8_t*>(valid.data()),
                   static_cast<utf8proc_ssize_t>(valid.size()), &result,
                   static_cast<utf8proc_option_t>(UTF8PROC_STABLE | UTF8PROC_COMPOSE));
  if (len < 0) {  // cannot happen on valid UTF-8
    out->append(valid);
    return;
  }
  out->append(reinterpret_cast<const char*>(result), static_cast<size_t>(len));
  std::free(result);
}

}  // namespace

bool IsBoundary(uint32_t cp) { return cp < 0x80 || Table().Get(cp); }

std::string_view Normalize(std::string_view text, std::string* storage) {
  const BoundaryTable* table = nullptr;  // built only when text is not ASCII
  const size_t n = text.size();
  size_t piece = 0;    // start of the current piece: its boundary character
  bool dirty = false;  // the piece holds a non-boundary character
  bool changed = false;
  size_t copied = 0;  // when changed, *storage holds the result for text[0, copied)
  auto end_piece = [&](size_t end) {
    if (dirty) {
      if (!changed) {
        storage->assign(text.data(), piece);
        changed = true;
      } else {
        storage->append(text.substr(copied, piece - copied));
      }
      AppendNfc(text.substr(piece, end - piece), storage);
      copied = end;
      dirty = false;
    }
    piece = end;
  };
  for (size_t i = 0; i < n;) {
    const auto b = static_cast<uint8_t>(text[i]);
    if (b < 0x80) {  // ASCII characters are all boundaries
      if (dirty) {
        end_piece(i);
      } else {
        piece = i;
      }
      ++i;
      continue;
    }
    const utf8::Step st = utf8::DecodeAt(text, i);
    if (!st.valid) {  // passes through; the next piece starts after it
      end_piece(i);
      i += st.length;
      piece = i;
      continue;
    }
    if (table == nullptr) table = &Table();
    if (!table->Get(st.codepoint)) {
      dirty = true;
    } else if (dirty) {
      end_piece(i);
    } else {
      piece = i;
    }
    i += st.length;
  }
  end_piece(n);
  if (!changed) return text;
  storage->append(text.substr(copied));
  return *storage;
}

}  // namespace kvfork::nfc
