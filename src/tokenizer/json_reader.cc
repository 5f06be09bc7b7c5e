#include "tokenizer/json_reader.h"

#include <cstring>
#include <limits>

#include "tokenizer/utf8.h"

namespace kvfork {
namespace {

// Deeper nesting than any tokenizer.json needs; bounds the recursion of
// SkipValue on hostile input.
constexpr int kMaxDepth = 512;

bool IsDigit(char c) { return c >= '0' && c <= '9'; }

}  // namespace

Status JsonReader::Error(const std::string& message) const {
  return InvalidArgumentError(what_ + ": " + message + " at byte " + std::to_string(pos_));
}

void JsonReader::SkipWhitespace() {
  while (pos_ < text_.size()) {
    const char c = text_[pos_];
    if (c != ' ' && c != '\n' && c != '\r' && c != '\t') return;
    ++pos_;
  }
}

char JsonReader::Peek() {
  SkipWhitespace();
  return pos_ < text_.size() ? text_[pos_] : '\0';
}

Status JsonReader::Expect(char c) {
  if (Peek() != c || pos_ >= text_.size()) return Error(std::string("expected '") + c + "'");
  ++pos_;
  return OkStatus();
}

bool JsonReader::Consume(char c) {
  if (Peek() != c || pos_ >= text_.size()) return false;
  ++pos_;
  return true;
}

Status JsonReader::ExpectEnd() {
  SkipWhitespace();
  if (pos_ != text_.size()) return Error("unexpected text after the value");
  return OkStatus();
}

Status JsonReader::ReadHex4(uint32_t* value) {
  if (text_.size() - pos_ < 4) return Error("truncated \\u escape");
  uint32_t v = 0;
  for (int k = 0; k < 4; ++k) {
    const char c = text_[pos_++];
    v <<= 4;
    if (c >= '0' && c <= '9') {
      v |= static_cast<uint32_t>(c - '0');
    } else if (c >= 'a' && c <= 'f') {
      v |= static_cast<uint32_t>(c - 'a' + 10);
    } else if (c >= 'A' && c <= 'F') {
      v |= static_cast<uint32_t>(c - 'A' + 10);
    } else {
      return Error("bad hex digit in a \\u escape");
    }
  }
  *value = v;
  return OkStatus();
}

Status JsonReader::ReadString(std::string* out) {
  out->clear();
  if (Peek() != '"') return Error("expected a string");
  ++pos_;
  const char* p = text_.data();
  const size_t n = text_.size();
  for (;;) {
    // Runs of plain ASCII are copied in one append.
    const size_t start = pos_;
    while (pos_ < n) {
      const auto c = static_cast<uint8_t>(p[pos_]);
      if (c == '"' || c == '\\' || c < 0x20 || c >= 0x80) break;
      ++pos_;
    }
    out->append(p + start, pos_ - start);
    if (pos_ >= n) return Error("unterminated string");
    const auto c = static_cast<uint8_t>(p[pos_]);
    if (c == '"') {
      ++pos_;
      return OkStatus();
    }
    if (c < 0x20) return Error("raw control character in a string");
    if (c >= 0x80) {
      const utf8::Step st = utf8::DecodeAt(text_, pos_);
      if (!st.valid) return Error("invalid UTF-8 in a string");
      out->append(p + pos_, st.length);
      pos_ += st.length;
      continue;
    }
    ++pos_;  // the backslash
    if (pos_ >= n) return Error("unterminated string");
    switch (p[pos_++]) {
      case '"':
        out->push_back('"');
        break;
      case '\\':
        out->push_back('\\');
        break;
      case '/':
        out->push_back('/');
        break;
      case 'b':
        out->push_back('\b');
        break;
      case 'f':
        out->push_back('\f');
        break;
      case 'n':
        out->push_back('\n');
        break;
      case 'r':
        out->push_back('\r');
        break;
      case 't':
        out->push_back('\t');
        break;
      case 'u': {
        uint32_t cp = 0;
        KVFORK_RETURN_IF_ERROR(ReadHex4(&cp));
        if (cp >= 0xDC00 && cp <= 0xDFFF) return Error("lone low surrogate in a \\u escape");
        if (cp >= 0xD800 && cp <= 0xDBFF) {
          if (n - pos_ < 2 || p[pos_] != '\\' || p[pos_ + 1] != 'u')
            return Error("high surrogate not followed by a low one");
          pos_ += 2;
          uint32_t low = 0;
          KVFORK_RETURN_IF_ERROR(ReadHex4(&low));
          if (low < 0xDC00 || low > 0xDFFF)
            return Error("high surrogate not followed by a low one");
          cp = 0x10000 + ((cp - 0xD800) << 10) + (low - 0xDC00);
        }
        utf8::AppendCodepoint(cp, out);
        break;
      }
      default:
        --pos_;
        return Error("invalid escape in a string");
    }
  }
}

Status JsonReader::ReadInteger(int64_t* value, bool* is_integer) {
  *is_integer = false;
  const char c = Peek();
  if (c != '-' && !IsDigit(c)) return SkipValue();
  bool negative = false;
  if (text_[pos_] == '-') {
    negative = true;
    ++pos_;
  }
  if (pos_ >= text_.size() || !IsDigit(text_[pos_])) return Error("malformed number");
  // Magnitude accumulated negatively so INT64_MIN fits; saturates on overflow.
  int64_t v = 0;
  bool overflow = false;
  if (text_[pos_] == '0') {
    ++pos_;
  } else {
    while (pos_ < text_.size() && IsDigit(text_[pos_])) {
      const int d = text_[pos_++] - '0';
      if (v < (std::numeric_limits<int64_t>::min() + d) / 10) overflow = true;
      if (!overflow) v = v * 10 - d;
    }
  }
  bool integral = true;
  if (pos_ < text_.size() && text_[pos_] == '.') {
    integral = false;
    ++pos_;
    if (pos_ >= text_.size() || !IsDigit(text_[pos_])) return Error("malformed number");
    while (pos_ < text_.size() && IsDigit(text_[pos_])) ++pos_;
  }
  if (pos_ < text_.size() && (text_[pos_] == 'e' || text_[pos_] == 'E')) {
    integral = false;
    ++pos_;
    if (pos_ < text_.size() && (text_[pos_] == '+' || text_[pos_] == '-')) ++pos_;
    if (pos_ >= text_.size() || !IsDigit(text_[pos_])) return Error("malformed number");
    while (pos_ < text_.size() && IsDigit(text_[pos_])) ++pos_;
  }
  if (!integral) return OkStatus();
  *is_integer = true;
  if (overflow) {
    *value = negative ? std::numeric_limits<int64_t>::min() : std::numeric_limits<int64_t>::max();
  } else if (negative) {
    *value = v;
  } else {
    *value = v == std::numeric_limits<int64_t>::min() ? std::numeric_limits<int64_t>::max() : -v;
  }
  return OkStatus();
}

StatusOr<bool> JsonReader::NextKey(bool* first, std::string* key) {
  if (Consume('}')) return false;
  if (!*first) KVFORK_RETURN_IF_ERROR(Expect(','));
  *first = false;
  KVFORK_RETURN_IF_ERROR(ReadString(key));
  KVFORK_RETURN_IF_ERROR(Expect(':'));
  return true;
}

StatusOr<bool> JsonReader::NextElement(bool* first) {
  if (Consume(']')) return false;
  if (!*first) KVFORK_RETURN_IF_ERROR(Expect(','));
  *first = false;
  return true;
}

Status JsonReader::SkipValue(std::string_view* span) {
  Peek();  // the span starts at the value, not at the whitespace before it
  const size_t start = pos_;
  KVFORK_RETURN_IF_ERROR(SkipValueAt(0));
  if (span != nullptr) *span = text_.substr(start, pos_ - start);
  return OkStatus();
}

Status JsonReader::SkipValueAt(int depth) {
  if (depth > kMaxDepth) return Error("nesting deeper than " + std::to_string(kMaxDepth));
  const char c = Peek();
  switch (c) {
    case '"':
      return ReadString(&scratch_);
    case '{': {
      ++pos_;
      bool first = true;
      for (;;) {
        KVFORK_ASSIGN_OR_RETURN(bool more, NextKey(&first, &scratch_));
        if (!more) return OkStatus();
        KVFORK_RETURN_IF_ERROR(SkipValueAt(depth + 1));
      }
    }
    case '[': {
      ++pos_;
      bool first = true;
      for (;;) {
        KVFORK_ASSIGN_OR_RETURN(bool more, NextElement(&first));
        if (!more) return OkStatus();
        KVFORK_RETURN_IF_ERROR(SkipValueAt(depth + 1));
      }
    }
    case 't':
    case 'f':
    case 'n': {
      for (std::string_view word : {"true", "false", "null"}) {
        if (text_.substr(pos_, word.size()) == word) {
          pos_ += word.size();
          return OkStatus();
        }
      }
      return Error("invalid literal");
    }
    default: {
      if (c != '-' && !IsDigit(c))
        return Error(pos_ < text_.size() ? "unexpected character" : "unexpected end of text");
      int64_t ignored = 0;
      bool is_integer = false;
      return ReadInteger(&ignored, &is_integer);
    }
  }
}

StatusOr<std::vector<std::pair<std::string, std::string_view>>> SplitObject(
    std::string_view text, const std::string& what) {
  JsonReader r(text, what);
  KVFORK_RETURN_IF_ERROR(r.Expect('{'));
  std::vector<std::pair<std::string, std::string_view>> members;
  std::string key;
  bool first = true;
  for (;;) {
    KVFORK_ASSIGN_OR_RETURN(bool more, r.NextKey(&first, &key));
    if (!more) break;
    std::string_view span;
    KVFORK_RETURN_IF_ERROR(r.SkipValue(&span));
    members.emplace_back(key, span);
  }
  KVFORK_RETURN_IF_ERROR(r.ExpectEnd());
  return members;
}

}  // namespace kvfork
