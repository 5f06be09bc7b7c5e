#include "grammar/grammar.h"

#include <algorithm>
#include <map>
#include <utility>

#include "grammar/utf8_ranges.h"

namespace kvfork::grammar {

// Rules under construction: alternatives of items (a byte set or a rule).
struct Item {
  bool is_ref = false;
  uint32_t value = 0;  // byte set index or rule id
};
using Sequence = std::vector<Item>;

class GrammarBuilder {
 public:
  GrammarBuilder(std::string_view text, std::string_view field) : text_(text), field_(field) {}

  StatusOr<std::shared_ptr<const Grammar>> Build() {
    SkipSpace();
    if (pos_ >= text_.size()) return Error("is empty (it needs a 'root' rule)");
    while (pos_ < text_.size()) {
      std::string name = ParseName();
      if (name.empty()) return Error("expects a rule name");
      SkipSpace();
      if (text_.substr(pos_, 3) != "::=") return Error("expects '::=' after rule '" + name + "'");
      pos_ += 3;
      const uint32_t id = RuleId(name);
      if (defined_[id]) return Error("defines rule '" + name + "' twice");
      defined_[id] = true;
      KVFORK_ASSIGN_OR_RETURN(alts_[id], ParseAlternatives(0));
      SkipSpace();
    }
    for (size_t i = 0; i < names_.size(); ++i)
      if (!defined_[i]) return Error("uses rule '" + names_[i] + "', which it does not define");
    auto root = ids_.find("root");
    if (root == ids_.end()) return Error("has no 'root' rule");
    KVFORK_RETURN_IF_ERROR(CheckLeftRecursion());
    return Layout(root->second);
  }

 private:
  Status Error(const std::string& what) const {
    return InvalidArgumentError("'" + std::string(field_) + "' " + what + " (at byte " +
                                std::to_string(pos_) + ")");
  }

  void SkipSpace() {
    while (pos_ < text_.size()) {
      const char c = text_[pos_];
      if (c == '#') {
        while (pos_ < text_.size() && text_[pos_] != '\n') ++pos_;
      } else if (c == ' ' || c == '\t' || c == '\n' || c == '\r') {
        ++pos_;
      } else {
        break;
      }
    }
  }

  static bool NameChar(char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' ||
           c == '_';
  }

  std::string ParseName() {
    const size_t start = pos_;
    while (pos_ < text_.size() && NameChar(text_[pos_])) ++pos_;
    return std::string(text_.substr(start, pos_ - start));
  }

  // True when a rule definition (`name ::=`) starts at pos_: the sequence
  // before it has ended.
  bool AtRuleStart() const {
    size_t p = pos_;
    while (p < text_.size() && NameChar(text_[p])) ++p;
    if (p == pos_) return false;
    while (p < text_.size() &&
           (text_[p] == ' ' || text_[p] == '\t' || text_[p] == '\n' || text_[p] == '\r'))
      ++p;
    return text_.substr(p, 3) == "::=";
  }

  uint32_t RuleId(const std::string& name) {
    auto it = ids_.find(name);
    if (it != ids_.end()) return it->second;
    const uint32_t id = NewRule(name);
    ids_[name] = id;
    return id;
  }

  uint32_t NewRule(const std::string& name) {
    names_.push_back(name);
    alts_.emplace_back();
    defined_.push_back(true);
    if (!ids_.count(name)) defined_.back() = false;  // named: defined when its line is read
    return static_cast<uint32_t>(names_.size() - 1);
  }

  // An anonymous rule (a group, a repetition, a multi-byte class).
  uint32_t AnonRule(std::vector<Sequence> alts) {
    names_.push_back("(generated " + std::to_string(names_.size()) + ")");
    alts_.push_back(std::move(alts));
    defined_.push_back(true);
    return static_cast<uint32_t>(names_.size() - 1);
  }

  uint32_t AddByteSet(const ByteSet& s) {
    for (size_t i = 0; i < sets_.size(); ++i)
      if (sets_[i] == s) return static_cast<uint32_t>(i);
    sets_.push_back(s);
    return static_cast<uint32_t>(sets_.size() - 1);
  }

  Item ByteItem(uint8_t b) {
    ByteSet s;
    s.Set(b);
    return {false, AddByteSet(s)};
  }

  StatusOr<std::vector<Sequence>> ParseAlternatives(int depth) {
    if (depth > 200) return Error("nests groups too deeply");
    std::vector<Sequence> alts;
    for (;;) {
      KVFORK_ASSIGN_OR_RETURN(Sequence seq, ParseSequence(depth));
      alts.push_back(std::move(seq));
      SkipSpace();
      if (pos_ < text_.size() && text_[pos_] == '|') {
        ++pos_;
        continue;
      }
      return alts;
    }
  }

  StatusOr<Sequence> ParseSequence(int depth) {
    Sequence seq;
    for (;;) {
      SkipSpace();
      if (pos_ >= text_.size()) return seq;
      const char c = text_[pos_];
      if (c == '|' || c == ')') return seq;
      if (AtRuleStart()) return seq;
      Sequence atom;  // what one repetition suffix applies to
      if (c == '"') {
        ++pos_;
        std::string bytes;
        for (;;) {
          if (pos_ >= text_.size()) return Error("has an unterminated string literal");
          if (text_[pos_] == '"') {
            ++pos_;
            break;
          }
          KVFORK_ASSIGN_OR_RETURN(uint32_t cp, ParseChar());
          AppendUtf8(cp, &bytes);
        }
        for (unsigned char b : bytes) atom.push_back(ByteItem(b));
      } else if (c == '[') {
        ++pos_;
        KVFORK_ASSIGN_OR_RETURN(atom, ParseClass());
      } else if (c == '.') {
        ++pos_;
        atom = ClassItems({{0, 0x10FFFF}});
      } else if (c == '(') {
        ++pos_;
        KVFORK_ASSIGN_OR_RETURN(std::vector<Sequence> inner, ParseAlternatives(depth + 1));
        SkipSpace();
        if (pos_ >= text_.size() || text_[pos_] != ')') return Error("has an unclosed '('");
        ++pos_;
        if (inner.size() == 1) {
          atom = std::move(inner[0]);
        } else {
          atom.push_back({true, AnonRule(std::move(inner))});
        }
      } else if (NameChar(c)) {
        atom.push_back({true, RuleId(ParseName())});
      } else {
        return Error(std::string("has an unexpected character '") + c + "'");
      }
      KVFORK_RETURN_IF_ERROR(ParseRepetition(&atom));
      seq.insert(seq.end(), atom.begin(), atom.end());
      num_items_ += static_cast<int64_t>(atom.size());
      if (num_items_ > kMaxGrammarElements) return Error("expands to too many elements");
    }
  }

  // One code point of a literal or class, with GBNF's escapes.
  StatusOr<uint32_t> ParseChar() {
    const unsigned char c = static_cast<unsigned char>(text_[pos_]);
    if (c != '\\') {
      // A raw UTF-8 sequence stands for its code point.
      size_t len = c < 0x80 ? 1 : c < 0xE0 ? 2 : c < 0xF0 ? 3 : 4;
      if (pos_ + len > text_.size()) len = 1;
      uint32_t cp = len == 1 ? c : c & (0xFF >> (len + 1));
      for (size_t i = 1; i < len; ++i) cp = (cp << 6) | (text_[pos_ + i] & 0x3F);
      pos_ += len;
      return cp;
    }
    if (pos_ + 1 >= text_.size()) return Error("ends inside an escape");
    const char e = text_[pos_ + 1];
    pos_ += 2;
    switch (e) {
      case 'n':
        return '\n';
      case 't':
        return '\t';
      case 'r':
        return '\r';
      case '\\':
      case '"':
      case '[':
      case ']':
      case '-':
      case '^':
      case '/':
      case '.':
        return static_cast<uint32_t>(e);
      case 'x':
        return ParseHex(2);
      case 'u':
        return ParseHex(4);
      case 'U':
        return ParseHex(8);
      default:
        return Error(std::string("has an unknown escape '\\") + e + "'");
    }
  }

  StatusOr<uint32_t> ParseHex(int digits) {
    uint32_t v = 0;
    for (int i = 0; i < digits; ++i) {
      if (pos_ >= text_.size()) return Error("ends inside a hex escape");
      const char h = text_[pos_++];
      int d = (h >= '0' && h <= '9')   ? h - '0'
              : (h >= 'a' && h <= 'f') ? h - 'a' + 10
              : (h >= 'A' && h <= 'F') ? h - 'A' + 10
                                       : -1;
      if (d < 0) return Error("has a bad hex escape");
      v = v * 16 + static_cast<uint32_t>(d);
    }
    if (v > 0x10FFFF) return Error("has an escape beyond U+10FFFF");
    return v;
  }

  StatusOr<Sequence> ParseClass() {
    bool negated = false;
    if (pos_ < text_.size() && text_[pos_] == '^') {
      negated = true;
      ++pos_;
    }
    std::vector<CodeRange> ranges;
    for (;;) {
      if (pos_ >= text_.size()) return Error("has an unterminated character class");
      if (text_[pos_] == ']') {
        ++pos_;
        break;
      }
      KVFORK_ASSIGN_OR_RETURN(uint32_t lo, ParseChar());
      uint32_t hi = lo;
      if (pos_ + 1 < text_.size() && text_[pos_] == '-' && text_[pos_ + 1] != ']') {
        ++pos_;
        KVFORK_ASSIGN_OR_RETURN(hi, ParseChar());
        if (hi < lo) return Error("has a character range whose end is below its start");
      }
      ranges.push_back({lo, hi});
    }
    if (negated) ranges = Complement(ranges);
    if (ranges.empty()) return Error("has a character class that matches nothing");
    return ClassItems(ranges);
  }

  // A set of code points as items: one byte set when all are ASCII, else a
  // rule whose alternatives are the UTF-8 byte-range sequences.
  Sequence ClassItems(const std::vector<CodeRange>& ranges) {
    std::vector<std::vector<ByteRange>> seqs = Utf8Sequences(ranges);
    std::vector<Sequence> alts;
    ByteSet single;
    for (const auto& s : seqs) {
      if (s.size() == 1) {
        single.SetRange(s[0].lo, s[0].hi);
        continue;
      }
      Sequence alt;
      for (const ByteRange& r : s) {
        ByteSet b;
        b.SetRange(r.lo, r.hi);
        alt.push_back({false, AddByteSet(b)});
      }
      alts.push_back(std::move(alt));
    }
    if (!single.Empty()) alts.insert(alts.begin(), Sequence{{false, AddByteSet(single)}});
    if (alts.size() == 1) return alts[0];
    return Sequence{{true, AnonRule(std::move(alts))}};
  }

  StatusOr<int64_t> ParseCount() {
    const size_t start = pos_;
    int64_t v = 0;
    while (pos_ < text_.size() && text_[pos_] >= '0' && text_[pos_] <= '9') {
      v = v * 10 + (text_[pos_++] - '0');
      if (v > kMaxGrammarElements) return Error("has a repetition count that is too large");
    }
    if (pos_ == start) return Error("expects a number in '{...}'");
    return v;
  }

  Status ParseRepetition(Sequence* atom) {
    if (pos_ >= text_.size()) return OkStatus();
    const char c = text_[pos_];
    int64_t min = 0, max = -1;  // -1 = unbounded
    if (c == '*') {
      ++pos_;
    } else if (c == '+') {
      ++pos_;
      min = 1;
    } else if (c == '?') {
      ++pos_;
      max = 1;
    } else if (c == '{') {
      ++pos_;
      SkipSpace();
      KVFORK_ASSIGN_OR_RETURN(min, ParseCount());
      SkipSpace();
      max = min;
      if (pos_ < text_.size() && text_[pos_] == ',') {
        ++pos_;
        SkipSpace();
        max = -1;
        if (pos_ < text_.size() && text_[pos_] != '}') {
          KVFORK_ASSIGN_OR_RETURN(max, ParseCount());
          SkipSpace();
        }
      }
      if (pos_ >= text_.size() || text_[pos_] != '}') return Error("has an unclosed '{'");
      ++pos_;
      if (max >= 0 && max < min) return Error("has a repetition {m,n} with n < m");
    } else {
      return OkStatus();
    }
    *atom = Repeat(*atom, min, max);
    if (static_cast<int64_t>(atom->size()) > kMaxGrammarElements)
      return Error("expands to too many elements");
    return OkStatus();
  }

  // atom{min,max} as items: min copies, then a chain of optional copies
  // (or a right-recursive star when unbounded).
  Sequence Repeat(const Sequence& atom, int64_t min, int64_t max) {
    Sequence out;
    for (int64_t i = 0; i < min; ++i) out.insert(out.end(), atom.begin(), atom.end());
    if (max < 0) {
      const uint32_t star = AnonRule({});
      Sequence loop = atom;
      loop.push_back({true, star});
      alts_[star] = {loop, Sequence{}};
      out.push_back({true, star});
    } else if (max > min) {
      // opt_k ::= atom opt_{k+1} | "" ; the last: atom | "".
      uint32_t next = 0;
      bool has_next = false;
      for (int64_t k = max - min; k > 0; --k) {
        Sequence s = atom;
        if (has_next) s.push_back({true, next});
        next = AnonRule({s, Sequence{}});
        has_next = true;
      }
      out.push_back({true, next});
    }
    return out;
  }

  // Left recursion (a rule reaching itself before consuming a byte) would
  // make top-down expansion loop forever.
  Status CheckLeftRecursion() const {
    const size_t n = alts_.size();
    std::vector<bool> nullable(n, false);
    for (bool changed = true; changed;) {
      changed = false;
      for (size_t r = 0; r < n; ++r) {
        if (nullable[r]) continue;
        for (const Sequence& s : alts_[r]) {
          bool all = true;
          for (const Item& it : s) all = all && it.is_ref && nullable[it.value];
          if (all) {
            nullable[r] = changed = true;
            break;
          }
        }
      }
    }
    // Edges r -> q where q can be the first thing r expands.
    std::vector<std::vector<uint32_t>> first(n);
    for (size_t r = 0; r < n; ++r)
      for (const Sequence& s : alts_[r])
        for (const Item& it : s) {
          if (!it.is_ref) break;
          first[r].push_back(it.value);
          if (!nullable[it.value]) break;
        }
    std::vector<int> color(n, 0);  // 0 new, 1 on the path, 2 done
    for (size_t start = 0; start < n; ++start) {
      if (color[start]) continue;
      std::vector<std::pair<uint32_t, size_t>> stack = {{static_cast<uint32_t>(start), 0}};
      color[start] = 1;
      while (!stack.empty()) {
        auto& [r, i] = stack.back();
        if (i == first[r].size()) {
          color[r] = 2;
          stack.pop_back();
          continue;
        }
        const uint32_t q = first[r][i++];
        if (color[q] == 1)
          return InvalidArgumentError("'" + std::string(field_) + "': rule '" + names_[q] +
                                      "' is left-recursive, which is not supported");
        if (color[q] == 0) {
          color[q] = 1;
          stack.push_back({q, 0});
        }
      }
    }
    return OkStatus();
  }

  std::shared_ptr<const Grammar> Layout(uint32_t root) {
    auto g = std::make_shared<Grammar>();
    g->byte_sets_ = sets_;
    g->rule_alts_.resize(alts_.size());
    for (size_t r = 0; r < alts_.size(); ++r) {
      for (const Sequence& s : alts_[r]) {
        g->rule_alts_[r].push_back(static_cast<uint32_t>(g->elements_.size()));
        for (const Item& it : s)
          g->elements_.push_back(
              {it.is_ref ? Element::Kind::kRef : Element::Kind::kBytes, it.value});
        g->elements_.push_back({Element::Kind::kEnd, 0});
      }
    }
    g->root_ = root;
    g->source_ = std::string(text_);
    return g;
  }

  std::string_view text_;
  std::string_view field_;
  size_t pos_ = 0;
  int64_t num_items_ = 0;
  std::map<std::string, uint32_t> ids_;
  std::vector<std::string> names_;
  std::vector<std::vector<Sequence>> alts_;
  std::vector<bool> defined_;
  std::vector<ByteSet> sets_;
};

StatusOr<std::shared_ptr<const Grammar>> Grammar::FromGbnf(std::string_view text,
                                                           std::string_view field) {
  GrammarBuilder builder(text, field);
  return builder.Build();
}

std::string GbnfLiteral(std::string_view bytes) {
  static const char* kHex = "0123456789ABCDEF";
  std::string out = "\"";
  for (unsigned char c : bytes) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += static_cast<char>(c);
    } else if (c == '\n') {
      out += "\\n";
    } else if (c < 0x20 || c == 0x7F) {
      out += "\\x";
      out += kHex[c >> 4];
      out += kHex[c & 15];
    } else {
      out += static_cast<char>(c);  // UTF-8 bytes stay as they are
    }
  }
  return out + "\"";
}

}  // namespace kvfork::grammar
