// A byte-level context-free grammar: what every constraint (GBNF, JSON
// Schema, regex, choice) compiles to, and what GrammarMatcher runs.
//
// Rules are alternatives of sequences of elements; an element is a set of
// bytes (one input byte) or a reference to a rule. Code points above ASCII
// in GBNF character classes become UTF-8 byte sequences, so the matcher
// never decodes UTF-8. Left recursion is refused at construction (the
// matcher expands rules top-down and would not terminate).
//
// Layout: all alternatives are stored back to back in one element array,
// each closed by a kEnd element, as llama.cpp's llama_grammar does, so a
// position in the array is a complete parse position.
//
// Immutable once built; shared (shared_ptr<const Grammar>) by every
// sequence that decodes under it, from any thread.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"

namespace kvfork::grammar {

// 256 bits, one per byte value.
struct ByteSet {
  std::array<uint64_t, 4> words{};
  bool Test(uint8_t b) const { return (words[b >> 6] >> (b & 63)) & 1; }
  void Set(uint8_t b) { words[b >> 6] |= uint64_t{1} << (b & 63); }
  void SetRange(uint8_t lo, uint8_t hi) {
    for (int b = lo; b <= hi; ++b) Set(static_cast<uint8_t>(b));
  }
  void Or(const ByteSet& o) {
    for (int i = 0; i < 4; ++i) words[i] |= o.words[i];
  }
  bool Empty() const { return (words[0] | words[1] | words[2] | words[3]) == 0; }
  bool operator==(const ByteSet&) const = default;
};

struct Element {
  enum class Kind : uint8_t { kBytes, kRef, kEnd };
  Kind kind = Kind::kEnd;
  uint32_t value = 0;  // kBytes: index into byte_sets(); kRef: rule id
};

class Grammar {
 public:
  // Parses llama.cpp's GBNF (docs/grammar.md): `name ::= alternatives`,
  // "literals" with \n \t \r \\ \" \xHH \uHHHH \UHHHHHHHH escapes,
  // [character classes] with ranges and ^, `.`, ( groups ), and the
  // repetitions * + ? {m} {m,} {m,n}; # starts a comment. The start rule is
  // `root`. `field` names the request field in error messages.
  static StatusOr<std::shared_ptr<const Grammar>> FromGbnf(std::string_view text,
                                                           std::string_view field = "grammar");

  const std::vector<Element>& elements() const { return elements_; }
  const ByteSet& byte_set(uint32_t index) const { return byte_sets_[index]; }
  // Positions in elements() where rule `rule`'s alternatives start.
  const std::vector<uint32_t>& alternatives(uint32_t rule) const { return rule_alts_[rule]; }
  uint32_t root() const { return root_; }
  int64_t num_rules() const { return static_cast<int64_t>(rule_alts_.size()); }
  // The GBNF this grammar was parsed from (what the compilers produced).
  const std::string& source() const { return source_; }

 private:
  friend class GrammarBuilder;
  std::vector<Element> elements_;
  std::vector<ByteSet> byte_sets_;
  std::vector<std::vector<uint32_t>> rule_alts_;
  uint32_t root_ = 0;
  std::string source_;
};

// Most elements one grammar may expand to (repetitions multiply): a
// request cannot make the server build a grammar of unbounded size.
inline constexpr int64_t kMaxGrammarElements = 1 << 20;

// GBNF spelling of a literal string: "..." with the escapes GBNF reads.
std::string GbnfLiteral(std::string_view bytes);

}  // namespace kvfork::grammar
