// nfc::Normalize (utf8proc only around characters NFC may change) against
// utf8proc's NFC of the whole text: every code point of planes 0-2 in
// contexts that compose, reorder or block, random strings over the
// characters that take part in composition, and invalid UTF-8.
#include "tokenizer/nfc.h"

#include <gtest/gtest.h>
#include <utf8proc.h>

#include <cstdlib>

#include "corpus_rng.h"
#include "tokenizer/utf8.h"

namespace kvfork {
namespace {

std::string Utf8procNfc(const std::string& s) {
  utf8proc_uint8_t* out = nullptr;
  const utf8proc_ssize_t n = utf8proc_map(
      reinterpret_cast<const utf8proc_uint8_t*>(s.data()), static_cast<utf8proc_ssize_t>(s.size()),
      &out, static_cast<utf8proc_option_t>(UTF8PROC_STABLE | UTF8PROC_COMPOSE));
  EXPECT_GE(n, 0);
  std::string r(reinterpret_cast<const char*>(out), static_cast<size_t>(n));
  std::free(out);
  return r;
}

std::string Fast(const std::string& s) {
  std::string storage;
  return std::string(nfc::Normalize(s, &storage));
}

std::string Cp(uint32_t cp) {
  std::string s;
  utf8::AppendCodepoint(cp, &s);
  return s;
}

TEST(Nfc, EveryCodePointInContext) {
  // Before: starters that compose with what follows (e, Hangul L, LV, Oriya
  // and Kannada vowels). After: marks and jamo that compose or reorder.
  const std::vector<std::string> before = {"",         "e",        Cp(0x1100),      Cp(0xAC00),
                                           Cp(0x0B47), Cp(0x0CC6), "a" + Cp(0x0323)};
  const std::vector<std::string> after = {
      "", Cp(0x0301), Cp(0x1161), Cp(0x11A8), Cp(0x0B3E), Cp(0x0CD5), Cp(0x0323) + Cp(0x0302)};
  int failures = 0;
  for (uint32_t cp = 0x80; cp < 0x30000; ++cp) {
    if (cp >= 0xD800 && cp <= 0xDFFF) continue;
    const std::string c = Cp(cp);
    const std::string& b = before[cp % before.size()];
    const std::string& a = after[(cp / 7) % after.size()];
    for (const std::string& s : {c, b + c + a, c + c}) {
      if (Fast(s) != Utf8procNfc(s) && ++failures <= 10)
        ADD_FAILURE() << "U+" << std::hex << cp << " in " << ::testing::PrintToString(s);
    }
  }
  EXPECT_EQ(failures, 0);
}

TEST(Nfc, RandomStringsOfComposingCharacters) {
  // Characters that are not boundaries (marks, jamo, decomposables NFC does
  // not restore) mixed with starters they compose with.
  std::vector<uint32_t> pool = {'a',    'e',    'o',    'A',    ' ',    0x1100, 0x1112, 0xAC00,
                                0xAC01, 0x0B47, 0x0CC6, 0x0DD9, 0x1025, 0x3046, 0x304B, 0x30A6,
                                0x212B, 0x2126, 0x0344, 0x0F73, 0x0958, 0xFB1D, 0x2F800};
  for (uint32_t cp = 0x80; cp < 0x30000 && pool.size() < 3000; ++cp) {
    if ((cp >= 0xD800 && cp <= 0xDFFF) || nfc::IsBoundary(cp)) continue;
    pool.push_back(cp);
  }
  testing::Mulberry32 rng(11);
  int failures = 0;
  for (int i = 0; i < 20000; ++i) {
    std::string s;
    const int len = 1 + static_cast<int>(rng.Next() % 10);
    for (int k = 0; k < len; ++k) {
      const uint32_t r = rng.Next() % 8;
      utf8::AppendCodepoint(r == 0 ? 'x' : pool[rng.Next() % pool.size()], &s);
    }
    if (Fast(s) != Utf8procNfc(s) && ++failures <= 10) ADD_FAILURE() << ::testing::PrintToString(s);
  }
  EXPECT_EQ(failures, 0);
}

TEST(Nfc, UnchangedTextIsNotCopied) {
  for (const std::string s :
       {"", "plain ascii", "caf\xc3\xa9 \xe4\xb8\xad\xe6\x96\x87 \xed\x95\x9c",
        "\xf0\x9f\x98\x80 emoji"}) {
    std::string storage;
    const std::string_view out = nfc::Normalize(s, &storage);
    EXPECT_EQ(out.data(), s.data()) << s;
    EXPECT_EQ(out, s);
  }
  std::string storage;
  EXPECT_EQ(nfc::Normalize("e\xcc\x81", &storage), "\xc3\xa9");  // e + U+0301 -> é
}

TEST(Nfc, InvalidBytesPassThroughAndCutTheText) {
  // As the old normalizer did: NFC of each valid run, invalid bytes kept.
  const std::string s = "e\xff\xcc\x81 A\xcc\x8a\xe2\x82 e\xcc\x81";
  std::string expected = "e\xff";
  expected += Utf8procNfc("\xcc\x81 A\xcc\x8a");
  expected += "\xe2\x82";
  expected += Utf8procNfc(" e\xcc\x81");
  EXPECT_EQ(Fast(s), expected);
}

TEST(Nfc, NoCanonicalDecompositionsBeyondTheTable) {
  // nfc.cc treats code points from U+30000 on as non-boundaries and builds its
  // tables below; this checks Unicode (as utf8proc has it) agrees.
  utf8proc_int32_t d[8];
  int boundclass = 0;
  for (utf8proc_int32_t cp = 0x30000; cp <= 0x10FFFF; ++cp) {
    const utf8proc_ssize_t n = utf8proc_decompose_char(cp, d, 8, UTF8PROC_DECOMPOSE, &boundclass);
    ASSERT_TRUE(n == 1 && d[0] == cp) << std::hex << cp;
  }
}

}  // namespace
}  // namespace kvfork
