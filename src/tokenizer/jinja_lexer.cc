#include "tokenizer/jinja_lexer.h"

// GCC 12 at -O3 reports a false -Wrestrict inside std::string concatenation
// (GCC bug 105651); nothing here copies overlapping memory.
#pragma GCC diagnostic ignored "-Wrestrict"

#include <cctype>
#include <cstdlib>

#include "tokenizer/jinja_pystr.h"

namespace kvfork::jinja {
namespace {

std::string LinePrefix(int line) { return "chat template line " + std::to_string(line) + ": "; }

// Length of the Python-whitespace code point at s[pos], or 0.
size_t SpaceAt(const std::string& s, size_t pos) {
  const auto b = static_cast<unsigned char>(s[pos]);
  if (b < 0x80) return IsPySpace(b) ? 1 : 0;
  size_t len = (b >> 5) == 0x6 ? 2 : (b >> 4) == 0xE ? 3 : (b >> 3) == 0x1E ? 4 : 1;
  if (pos + len > s.size()) return 0;
  std::vector<uint32_t> cp = DecodeUtf8(std::string_view(s).substr(pos, len));
  return cp.size() == 1 && IsPySpace(cp[0]) ? len : 0;
}

size_t SkipSpace(const std::string& s, size_t pos) {
  while (pos < s.size()) {
    size_t n = SpaceAt(s, pos);
    if (n == 0) break;
    pos += n;
  }
  return pos;
}

// Python's rstrip() of whitespace.
void RstripSpace(std::string* s) {
  std::vector<uint32_t> cps = DecodeUtf8(*s);
  size_t end = cps.size();
  while (end > 0 && IsPySpace(cps[end - 1])) --end;
  if (end == cps.size()) return;
  cps.resize(end);
  *s = EncodeUtf8(cps);
}

bool AllSpace(const std::string& s, size_t from) {
  if (from >= s.size()) return false;  // re.fullmatch(r"\s+") needs one
  return SkipSpace(s, from) == s.size();
}

// Python's "unicode-escape" decoding of a string literal body (jinja2 does
// value.encode("ascii", "backslashreplace").decode("unicode-escape")).
StatusOr<std::string> Unescape(const std::string& body, int line) {
  std::string out;
  for (size_t i = 0; i < body.size(); ++i) {
    char c = body[i];
    if (c != '\\' || i + 1 >= body.size()) {
      out.push_back(c);
      continue;
    }
    char e = body[++i];
    switch (e) {
      case '\n': break;
      case '\\': out.push_back('\\'); break;
      case '\'': out.push_back('\''); break;
      case '"': out.push_back('"'); break;
      case 'a': out.push_back('\a'); break;
      case 'b': out.push_back('\b'); break;
      case 'f': out.push_back('\f'); break;
      case 'n': out.push_back('\n'); break;
      case 'r': out.push_back('\r'); break;
      case 't': out.push_back('\t'); break;
      case 'v': out.push_back('\v'); break;
      case 'x':
      case 'u':
      case 'U': {
        const size_t n = e == 'x' ? 2 : e == 'u' ? 4 : 8;
        if (i + n >= body.size()) {
          return InvalidArgumentError(LinePrefix(line) + "truncated \\" + std::string(1, e) +
                                      " escape in string literal");
        }
        std::string hex = body.substr(i + 1, n);
        for (char h : hex) {
          if (!std::isxdigit(static_cast<unsigned char>(h))) {
            return InvalidArgumentError(LinePrefix(line) + "bad \\" + std::string(1, e) +
                                        " escape in string literal");
          }
        }
        AppendUtf8(static_cast<uint32_t>(std::strtoul(hex.c_str(), nullptr, 16)), &out);
        i += n;
        break;
      }
      default:
        if (e >= '0' && e <= '7') {
          uint32_t v = e - '0';
          for (int k = 0; k < 2 && i + 1 < body.size() && body[i + 1] >= '0' && body[i + 1] <= '7';
               ++k) {
            v = v * 8 + (body[++i] - '0');
          }
          AppendUtf8(v, &out);
        } else if (e == 'N') {
          return UnimplementedError(LinePrefix(line) +
                                    "unsupported construct: \\N{...} escape in string literal");
        } else {
          // Unknown escapes keep their backslash, as in Python.
          out.push_back('\\');
          out.push_back(e);
        }
    }
  }
  return out;
}

class Lexer {
 public:
  explicit Lexer(std::string source) : src_(std::move(source)) {}

  StatusOr<std::vector<Token>> Run() {
    size_t pos = 0;
    bool line_starting = true;
    while (pos < src_.size()) {
      // Earliest tag start.
      size_t tag = pos;
      while (true) {
        tag = src_.find('{', tag);
        if (tag == std::string::npos || tag + 1 >= src_.size()) {
          tag = std::string::npos;
          break;
        }
        char c = src_[tag + 1];
        if (c == '{' || c == '%' || c == '#') break;
        ++tag;
      }
      std::string text = src_.substr(pos, tag == std::string::npos ? std::string::npos : tag - pos);
      if (tag == std::string::npos) {
        Emit(TokenType::kData, text);
        break;
      }
      const char kind = src_[tag + 1];
      size_t after = tag + 2;
      char sign = 0;
      if (after < src_.size() && (src_[after] == '-' || src_[after] == '+')) sign = src_[after++];
      if (sign == '-') {
        RstripSpace(&text);
      } else if (sign != '+' && kind != '{') {
        // lstrip_blocks: drop the indentation before a block or comment tag
        // that starts its line.
        size_t l_pos = text.rfind('\n');
        l_pos = l_pos == std::string::npos ? 0 : l_pos + 1;
        if ((l_pos > 0 || line_starting) && AllSpace(text, l_pos)) text.resize(l_pos);
      }
      if (kind == '%' && IsRawTag(after)) {
        return UnimplementedError(LinePrefix(line_ + Newlines(text)) +
                                  "unsupported construct '{% raw %}'");
      }
      Emit(TokenType::kData, text);
      line_ += Newlines(src_.substr(pos, tag - pos));
      if (kind == '#') {
        KVFORK_ASSIGN_OR_RETURN(pos, Comment(after, &line_starting));
        continue;
      }
      tokens_.push_back({kind == '{' ? TokenType::kVarBegin : TokenType::kBlockBegin,
                         kind == '{' ? "{{" : "{%", line_});
      KVFORK_ASSIGN_OR_RETURN(pos, Tag(after, kind == '{', &line_starting));
    }
    tokens_.push_back({TokenType::kEof, "", line_});
    return std::move(tokens_);
  }

 private:
  static int Newlines(const std::string& s) {
    int n = 0;
    for (char c : s) n += c == '\n';
    return n;
  }

  void Emit(TokenType type, const std::string& text) {
    if (!text.empty()) tokens_.push_back({type, text, line_});
  }

  bool IsRawTag(size_t pos) const {
    pos = SkipSpace(src_, pos);
    return src_.compare(pos, 3, "raw") == 0 &&
           (pos + 3 >= src_.size() || !std::isalnum(static_cast<unsigned char>(src_[pos + 3])));
  }

  StatusOr<size_t> Comment(size_t pos, bool* line_starting) {
    size_t end = src_.find("#}", pos);
    if (end == std::string::npos) {
      return InvalidArgumentError(LinePrefix(line_) + "missing end of comment tag");
    }
    line_ += Newlines(src_.substr(pos, end - pos));
    size_t next = end + 2;
    if (end > pos && src_[end - 1] == '-') {
      next = SkipSpace(src_, next);
    } else if (!(end > pos && src_[end - 1] == '+')) {
      if (next < src_.size() && src_[next] == '\n') ++next;  // trim_blocks
    }
    line_ += Newlines(src_.substr(end, next - end));
    *line_starting = src_[next - 1] == '\n';
    return next;
  }

  // Lexes the inside of {{ }} or {% %} from pos; returns the position after
  // the closing tag and its whitespace control.
  StatusOr<size_t> Tag(size_t pos, bool is_var, bool* line_starting) {
    std::vector<char> balance;
    const char close = is_var ? '}' : '%';
    while (true) {
      if (pos >= src_.size()) {
        return InvalidArgumentError(LinePrefix(line_) + "unexpected end of template, expected '" +
                                    (is_var ? "}}" : "%}") + "'");
      }
      if (balance.empty()) {
        size_t end = std::string::npos;
        size_t next = 0;
        if (!is_var && src_.compare(pos, 3, "+%}") == 0) {
          end = pos;
          next = pos + 3;
        } else if (src_.compare(pos, 1, "-") == 0 && pos + 2 < src_.size() &&
                   src_[pos + 1] == close && src_[pos + 2] == '}') {
          end = pos;
          next = SkipSpace(src_, pos + 3);
        } else if (src_[pos] == close && pos + 1 < src_.size() && src_[pos + 1] == '}') {
          end = pos;
          next = pos + 2;
          if (!is_var && next < src_.size() && src_[next] == '\n') ++next;  // trim_blocks
        }
        if (end != std::string::npos) {
          tokens_.push_back({is_var ? TokenType::kVarEnd : TokenType::kBlockEnd,
                             is_var ? "}}" : "%}", line_});
          line_ += Newlines(src_.substr(pos, next - pos));
          *line_starting = src_[next - 1] == '\n';
          return next;
        }
      }
      size_t space = SpaceAt(src_, pos);
      if (space > 0) {
        if (src_[pos] == '\n') ++line_;
        pos += space;
        continue;
      }
      const char c = src_[pos];
      if (std::isdigit(static_cast<unsigned char>(c))) {
        pos = Number(pos);
        continue;
      }
      if (std::isalpha(static_cast<unsigned char>(c)) || c == '_') {
        size_t end = pos;
        while (end < src_.size() &&
               (std::isalnum(static_cast<unsigned char>(src_[end])) || src_[end] == '_')) {
          ++end;
        }
        tokens_.push_back({TokenType::kName, src_.substr(pos, end - pos), line_});
        pos = end;
        continue;
      }
      if (c == '\'' || c == '"') {
        size_t end = pos + 1;
        while (end < src_.size() && src_[end] != c) end += src_[end] == '\\' ? 2 : 1;
        if (end >= src_.size()) {
          return InvalidArgumentError(LinePrefix(line_) + "unterminated string literal");
        }
        KVFORK_ASSIGN_OR_RETURN(std::string value,
                                Unescape(src_.substr(pos + 1, end - pos - 1), line_));
        tokens_.push_back({TokenType::kString, std::move(value), line_});
        line_ += Newlines(src_.substr(pos, end - pos));
        pos = end + 1;
        continue;
      }
      static const char* kTwo[] = {"//", "**", "==", "!=", ">=", "<="};
      bool two = false;
      for (const char* op : kTwo) {
        if (src_.compare(pos, 2, op) == 0) {
          tokens_.push_back({TokenType::kOperator, op, line_});
          pos += 2;
          two = true;
          break;
        }
      }
      if (two) continue;
      static const std::string kOne = "+-/*%~[](){}><=.:|,;";
      if (kOne.find(c) == std::string::npos) {
        return InvalidArgumentError(LinePrefix(line_) + "unexpected character '" +
                                    std::string(1, c) + "' in tag");
      }
      if (c == '(' || c == '[' || c == '{') {
        balance.push_back(c == '(' ? ')' : c == '[' ? ']' : '}');
      } else if (c == ')' || c == ']' || c == '}') {
        if (balance.empty() || balance.back() != c) {
          return InvalidArgumentError(LinePrefix(line_) + "unexpected '" + std::string(1, c) + "'");
        }
        balance.pop_back();
      }
      tokens_.push_back({TokenType::kOperator, std::string(1, c), line_});
      ++pos;
    }
  }

  // Integer or float literal (with '_' separators and exponents).
  size_t Number(size_t pos) {
    auto digits = [&](size_t p) {
      while (p < src_.size() && (std::isdigit(static_cast<unsigned char>(src_[p])) ||
                                 (src_[p] == '_' && p + 1 < src_.size() &&
                                  std::isdigit(static_cast<unsigned char>(src_[p + 1]))))) {
        ++p;
      }
      return p;
    };
    size_t end = digits(pos);
    bool is_float = false;
    if (end + 1 < src_.size() && src_[end] == '.' &&
        std::isdigit(static_cast<unsigned char>(src_[end + 1]))) {
      end = digits(end + 1);
      is_float = true;
    }
    if (end < src_.size() && (src_[end] == 'e' || src_[end] == 'E')) {
      size_t e = end + 1;
      if (e < src_.size() && (src_[e] == '+' || src_[e] == '-')) ++e;
      if (e < src_.size() && std::isdigit(static_cast<unsigned char>(src_[e]))) {
        end = digits(e);
        is_float = true;
      }
    }
    std::string text;
    for (size_t i = pos; i < end; ++i) {
      if (src_[i] != '_') text.push_back(src_[i]);
    }
    tokens_.push_back({is_float ? TokenType::kFloat : TokenType::kInteger, text, line_});
    return end;
  }

  std::string src_;
  std::vector<Token> tokens_;
  int line_ = 1;
};

}  // namespace

StatusOr<std::vector<Token>> Tokenize(const std::string& source) {
  // Newlines normalised to \n; one trailing newline dropped.
  std::string normalized;
  normalized.reserve(source.size());
  for (size_t i = 0; i < source.size(); ++i) {
    if (source[i] == '\r') {
      normalized.push_back('\n');
      if (i + 1 < source.size() && source[i + 1] == '\n') ++i;
    } else {
      normalized.push_back(source[i]);
    }
  }
  if (!normalized.empty() && normalized.back() == '\n') normalized.pop_back();
  return Lexer(std::move(normalized)).Run();
}

}  // namespace kvfork::jinja
