#include "grammar/regex_to_gbnf.h"

#include <cstdio>
#include <vector>

#include "grammar/grammar.h"
#include "grammar/utf8_ranges.h"

namespace kvfork::grammar {
namespace {

class RegexConverter {
 public:
  RegexConverter(std::string_view re, RegexTarget target, std::string_view field)
      : re_(re), target_(target), field_(field) {}

  StatusOr<std::string> Convert() {
    if (!re_.empty() && re_[0] == '^') ++pos_;
    KVFORK_ASSIGN_OR_RETURN(std::string expr, Alternatives(0));
    if (pos_ < re_.size()) return Error("has an unmatched ')'");
    return expr;
  }

 private:
  Status Error(const std::string& what) const {
    return InvalidArgumentError("'" + std::string(field_) + "': the regular expression " + what +
                                " (at character " + std::to_string(pos_) + ")");
  }

  bool AtEnd() const { return pos_ >= re_.size(); }

  StatusOr<std::string> Alternatives(int depth) {
    if (depth > 100) return Error("nests groups too deeply");
    std::string out;
    for (;;) {
      KVFORK_ASSIGN_OR_RETURN(std::string seq, Sequence(depth));
      out += seq.empty() ? "\"\"" : seq;
      if (!AtEnd() && re_[pos_] == '|') {
        ++pos_;
        out += " | ";
        continue;
      }
      return out;
    }
  }

  StatusOr<std::string> Sequence(int depth) {
    std::string out;
    while (!AtEnd() && re_[pos_] != '|' && re_[pos_] != ')') {
      const char c = re_[pos_];
      if (c == '$') {
        ++pos_;
        if (!(AtEnd() || re_[pos_] == '|' || re_[pos_] == ')') || depth > 0)
          return Error("uses '$' before its end, which is not supported");
        continue;
      }
      if (c == '^') return Error("uses '^' after its start, which is not supported");
      std::string atom;
      if (c == '(') {
        ++pos_;
        if (re_.substr(pos_, 2) == "?:") {
          pos_ += 2;
        } else if (re_.substr(pos_, 2) == "?<" && re_.substr(pos_, 3) != "?<=" &&
                   re_.substr(pos_, 3) != "?<!") {
          while (!AtEnd() && re_[pos_] != '>') ++pos_;  // a named group
          ++pos_;
        } else if (re_.substr(pos_, 2) == "?P" && re_.substr(pos_, 3) == "?P<") {
          while (!AtEnd() && re_[pos_] != '>') ++pos_;
          ++pos_;
        } else if (!AtEnd() && re_[pos_] == '?') {
          return Error("uses a lookaround or flag group '(?', which is not supported");
        }
        KVFORK_ASSIGN_OR_RETURN(std::string inner, Alternatives(depth + 1));
        if (AtEnd() || re_[pos_] != ')') return Error("has an unclosed '('");
        ++pos_;
        atom = "(" + inner + ")";
      } else if (c == '[') {
        ++pos_;
        KVFORK_ASSIGN_OR_RETURN(std::vector<CodeRange> ranges, Class());
        KVFORK_ASSIGN_OR_RETURN(atom, ClassText(ranges));
      } else if (c == '.') {
        ++pos_;
        KVFORK_ASSIGN_OR_RETURN(atom, ClassText(Complement({{'\n', '\n'}})));
      } else if (c == '*' || c == '+' || c == '?' || c == '{') {
        return Error(std::string("has a quantifier '") + c + "' with nothing before it");
      } else if (c == '\\') {
        KVFORK_ASSIGN_OR_RETURN(std::vector<CodeRange> ranges, Escape(/*in_class=*/false));
        if (ranges.size() == 1 && ranges[0].lo == ranges[0].hi) {
          atom = Literal(ranges[0].lo);
        } else {
          KVFORK_ASSIGN_OR_RETURN(atom, ClassText(ranges));
        }
      } else {
        atom = Literal(NextCodePoint());
      }
      KVFORK_ASSIGN_OR_RETURN(std::string quant, Quantifier());
      out += (out.empty() ? "" : " ") + (quant.empty() ? atom : "(" + atom + ")" + quant);
    }
    return out;
  }

  uint32_t NextCodePoint() {
    const unsigned char c = static_cast<unsigned char>(re_[pos_]);
    size_t len = c < 0x80 ? 1 : c < 0xE0 ? 2 : c < 0xF0 ? 3 : 4;
    if (pos_ + len > re_.size()) len = 1;
    uint32_t cp = len == 1 ? c : c & (0xFF >> (len + 1));
    for (size_t i = 1; i < len; ++i) cp = (cp << 6) | (re_[pos_ + i] & 0x3F);
    pos_ += len;
    return cp;
  }

  StatusOr<std::string> Quantifier() {
    if (AtEnd()) return std::string();
    std::string q;
    const char c = re_[pos_];
    if (c == '*' || c == '+' || c == '?') {
      q = std::string(1, c);
      ++pos_;
    } else if (c == '{') {
      const size_t close = re_.find('}', pos_);
      if (close == std::string_view::npos) return Error("has an unclosed '{'");
      const std::string_view body = re_.substr(pos_ + 1, close - pos_ - 1);
      for (char d : body)
        if (!(d >= '0' && d <= '9') && d != ',') return Error("has a malformed '{m,n}'");
      if (body.empty() || body[0] == ',') return Error("has a '{,n}' without a minimum");
      q = "{" + std::string(body) + "}";
      pos_ = close + 1;
    } else {
      return std::string();
    }
    if (!AtEnd() && re_[pos_] == '?') ++pos_;  // lazy: the same language
    if (!AtEnd() && (re_[pos_] == '+' || re_[pos_] == '*' || re_[pos_] == '{'))
      return Error("has a quantifier after a quantifier");
    return q;
  }

  // After a backslash (pos_ at it): one code point, or a class for \d \w \s.
  StatusOr<std::vector<CodeRange>> Escape(bool in_class) {
    ++pos_;
    if (AtEnd()) return Error("ends with a backslash");
    const char e = re_[pos_++];
    switch (e) {
      case 'd':
        return std::vector<CodeRange>{{'0', '9'}};
      case 'w':
        return std::vector<CodeRange>{{'0', '9'}, {'A', 'Z'}, {'_', '_'}, {'a', 'z'}};
      case 's':
        return std::vector<CodeRange>{{'\t', '\r'}, {' ', ' '}};
      case 'D':
        return Complement({{'0', '9'}});
      case 'W':
        return Complement({{'0', '9'}, {'A', 'Z'}, {'_', '_'}, {'a', 'z'}});
      case 'S':
        return Complement({{'\t', '\r'}, {' ', ' '}});
      case 'n':
        return std::vector<CodeRange>{{'\n', '\n'}};
      case 't':
        return std::vector<CodeRange>{{'\t', '\t'}};
      case 'r':
        return std::vector<CodeRange>{{'\r', '\r'}};
      case 'f':
        return std::vector<CodeRange>{{'\f', '\f'}};
      case 'v':
        return std::vector<CodeRange>{{'\v', '\v'}};
      case 'x':
      case 'u': {
        const size_t digits = e == 'x' ? 2 : 4;
        if (pos_ + digits > re_.size()) return Error("has a short \\x or \\u escape");
        uint32_t v = 0;
        for (size_t i = 0; i < digits; ++i) {
          const char h = re_[pos_++];
          const int d = (h >= '0' && h <= '9')   ? h - '0'
                        : (h >= 'a' && h <= 'f') ? h - 'a' + 10
                        : (h >= 'A' && h <= 'F') ? h - 'A' + 10
                                                 : -1;
          if (d < 0) return Error("has a bad hex digit in an escape");
          v = v * 16 + static_cast<uint32_t>(d);
        }
        return std::vector<CodeRange>{{v, v}};
      }
      case 'b':
        if (in_class) return std::vector<CodeRange>{{'\b', '\b'}};
        return Error("uses '\\b' (a word boundary), which is not supported");
      default:
        if ((e >= '1' && e <= '9') || e == 'k')
          return Error("uses a backreference, which is not regular");
        if ((e >= 'a' && e <= 'z') || (e >= 'A' && e <= 'Z') || (e >= '0' && e <= '9'))
          return Error(std::string("uses the escape '\\") + e + "', which is not supported");
        --pos_;
        const uint32_t cp = NextCodePoint();  // an escaped punctuation character
        return std::vector<CodeRange>{{cp, cp}};
    }
  }

  // After '[': the class's code points (negation applied).
  StatusOr<std::vector<CodeRange>> Class() {
    bool negated = false;
    if (!AtEnd() && re_[pos_] == '^') {
      negated = true;
      ++pos_;
    }
    std::vector<CodeRange> ranges;
    bool first = true;
    for (;;) {
      if (AtEnd()) return Error("has an unclosed '['");
      if (re_[pos_] == ']' && !first) {
        ++pos_;
        break;
      }
      first = false;
      std::vector<CodeRange> item;
      if (re_[pos_] == '\\') {
        KVFORK_ASSIGN_OR_RETURN(item, Escape(/*in_class=*/true));
      } else {
        const uint32_t cp = NextCodePoint();
        item = {{cp, cp}};
      }
      if (item.size() == 1 && item[0].lo == item[0].hi && pos_ + 1 < re_.size() &&
          re_[pos_] == '-' && re_[pos_ + 1] != ']') {
        ++pos_;
        uint32_t hi;
        if (re_[pos_] == '\\') {
          KVFORK_ASSIGN_OR_RETURN(std::vector<CodeRange> end, Escape(true));
          if (end.size() != 1 || end[0].lo != end[0].hi) return Error("has a bad class range");
          hi = end[0].lo;
        } else {
          hi = NextCodePoint();
        }
        if (hi < item[0].lo) return Error("has a class range whose end is below its start");
        item[0].hi = hi;
      }
      ranges.insert(ranges.end(), item.begin(), item.end());
    }
    return negated ? Complement(ranges) : ranges;
  }

  // A set of code points as a GBNF class; in a JSON string without the
  // characters JSON must escape.
  StatusOr<std::string> ClassText(std::vector<CodeRange> ranges) {
    if (target_ == RegexTarget::kJsonString) {
      std::vector<CodeRange> outside = Complement(ranges);
      outside.push_back({0, 0x1F});
      outside.push_back({'"', '"'});
      outside.push_back({'\\', '\\'});
      ranges = Complement(outside);
    }
    if (ranges.empty())
      return Error("has a class that matches no character a JSON string holds unescaped");
    std::string out = "[";
    char buf[16];
    for (const CodeRange& r : ranges) {
      std::snprintf(buf, sizeof(buf), "\\U%08X", r.lo);
      out += buf;
      if (r.hi != r.lo) {
        std::snprintf(buf, sizeof(buf), "-\\U%08X", r.hi);
        out += buf;
      }
    }
    return out + "]";
  }

  std::string Literal(uint32_t cp) {
    std::string bytes;
    if (target_ == RegexTarget::kJsonString && (cp == '"' || cp == '\\')) {
      bytes = std::string("\\") + static_cast<char>(cp);
    } else if (target_ == RegexTarget::kJsonString && cp < 0x20) {
      static const char* kHex = "0123456789abcdef";
      bytes = cp == '\n'   ? "\\n"
              : cp == '\t' ? "\\t"
              : cp == '\r' ? "\\r"
                           : std::string("\\u00") + kHex[cp >> 4] + kHex[cp & 15];
    } else {
      AppendUtf8(cp, &bytes);
    }
    return GbnfLiteral(bytes);
  }

  std::string_view re_;
  RegexTarget target_;
  std::string_view field_;
  size_t pos_ = 0;
};

}  // namespace

StatusOr<std::string> RegexToGbnf(std::string_view regex, RegexTarget target,
                                  std::string_view field) {
  RegexConverter c(regex, target, field);
  return c.Convert();
}

StatusOr<std::string> RegexGrammar(std::string_view regex, std::string_view field) {
  KVFORK_ASSIGN_OR_RETURN(std::string expr, RegexToGbnf(regex, RegexTarget::kRaw, field));
  return "root ::= " + expr + "\n";
}

}  // namespace kvfork::grammar
