#include "server/http_parser.h"

#include <algorithm>
#include <cctype>

namespace kvfork::server {
namespace {

ApiError HttpFail(int status, const std::string& message, const std::string& code) {
  return ApiError{status, message, status >= 500 ? "server_error" : "invalid_request_error", "",
                  code};
}
ApiError Malformed(const std::string& message) {
  return HttpFail(400, "malformed HTTP request: " + message, "bad_http_request");
}
ApiError HeadTooLarge(const HttpLimits& limits) {
  return HttpFail(431,
                  "request header fields are larger than the server's limit (" +
                      std::to_string(limits.max_head_bytes) + " bytes, " +
                      std::to_string(limits.max_header_fields) + " fields)",
                  "header_fields_too_large");
}
ApiError BodyTooLarge(const HttpLimits& limits) {
  ApiError e = PayloadTooLarge("request body is larger than the server's limit (--max-body-mib, " +
                               std::to_string(limits.max_body_bytes) + " bytes)");
  return e;
}

// RFC 9110 tchar.
bool IsTokenChar(unsigned char c) {
  if (std::isalnum(c)) return true;
  switch (c) {
    case '!':
    case '#':
    case '$':
    case '%':
    case '&':
    case '\'':
    case '*':
    case '+':
    case '-':
    case '.':
    case '^':
    case '_':
    case '`':
    case '|':
    case '~':
      return true;
    default:
      return false;
  }
}
bool IsToken(std::string_view s) {
  return !s.empty() && std::all_of(s.begin(), s.end(), [](char c) { return IsTokenChar(c); });
}
// Field values: visible bytes, obs-text and SP/HTAB; never NUL, CR, LF or
// other controls.
bool IsFieldValue(std::string_view s) {
  return std::all_of(s.begin(), s.end(), [](char ch) {
    const unsigned char c = static_cast<unsigned char>(ch);
    return c == '\t' || (c >= 0x20 && c != 0x7f);
  });
}

std::string_view TrimOws(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

std::string Lower(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

int HexValue(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

// One field line "name: value" (no CRLF) into req->headers.
std::optional<ApiError> ParseFieldLine(std::string_view line, HttpRequest* req) {
  if (line.front() == ' ' || line.front() == '\t')
    return Malformed("obsolete line folding in the header fields");
  const size_t colon = line.find(':');
  if (colon == std::string_view::npos) return Malformed("a header field has no ':'");
  const std::string_view name = line.substr(0, colon);
  if (!IsToken(name))
    return Malformed("header field name '" + std::string(name.substr(0, 64)) +
                     "' is not a token (whitespace before ':'?)");
  const std::string_view value = TrimOws(line.substr(colon + 1));
  if (!IsFieldValue(value))
    return Malformed("header field '" + std::string(name) + "' has a control byte");
  req->headers.emplace_back(Lower(name), std::string(value));
  return std::nullopt;
}

std::optional<ApiError> ParseRequestLine(std::string_view line, HttpRequest* req) {
  const size_t sp1 = line.find(' ');
  const size_t sp2 = sp1 == std::string_view::npos ? sp1 : line.find(' ', sp1 + 1);
  if (sp2 == std::string_view::npos || line.find(' ', sp2 + 1) != std::string_view::npos)
    return Malformed("the request line is not 'METHOD TARGET HTTP/1.x'");
  const std::string_view method = line.substr(0, sp1);
  const std::string_view target = line.substr(sp1 + 1, sp2 - sp1 - 1);
  const std::string_view version = line.substr(sp2 + 1);
  if (!IsToken(method)) return Malformed("the method is not a token");
  if (version == "HTTP/1.1") {
    req->version_minor = 1;
  } else if (version == "HTTP/1.0") {
    req->version_minor = 0;
  } else if (version.substr(0, 5) == "HTTP/" && version.size() == 8) {
    return HttpFail(505,
                    "HTTP version '" + std::string(version) + "' is not supported; use HTTP/1.1",
                    "http_version_not_supported");
  } else {
    return Malformed("the request line does not end in an HTTP version");
  }
  if (target.empty() || (target.front() != '/' && !(target == "*" && method == "OPTIONS")))
    return Malformed("the request target must be a path starting with '/'");
  for (char c : target)
    if (static_cast<unsigned char>(c) <= 0x20 || c == 0x7f)
      return Malformed("the request target has a control byte");
  req->method = std::string(method);
  req->target = std::string(target);
  const size_t q = target.find('?');
  const std::string_view raw_path = target.substr(0, q);
  if (!PercentDecode(raw_path, false, &req->path))
    return Malformed("the request path has a malformed %-escape");
  if (req->path.find('\0') != std::string::npos) return Malformed("the request path has a NUL");
  req->params.clear();
  if (q != std::string_view::npos) {
    std::string_view query = target.substr(q + 1);
    while (!query.empty()) {
      const size_t amp = query.find('&');
      const std::string_view pair = query.substr(0, amp);
      query = amp == std::string_view::npos ? std::string_view() : query.substr(amp + 1);
      if (pair.empty()) continue;
      const size_t eq = pair.find('=');
      std::string key, value;
      if (!PercentDecode(pair.substr(0, eq), true, &key) ||
          (eq != std::string_view::npos && !PercentDecode(pair.substr(eq + 1), true, &value)))
        return Malformed("a query parameter has a malformed %-escape");
      req->params[key] = value;
    }
  }
  return std::nullopt;
}

}  // namespace

bool PercentDecode(std::string_view in, bool plus_is_space, std::string* out) {
  out->clear();
  out->reserve(in.size());
  for (size_t i = 0; i < in.size(); ++i) {
    const char c = in[i];
    if (c == '%') {
      if (i + 2 >= in.size()) return false;
      const int hi = HexValue(in[i + 1]), lo = HexValue(in[i + 2]);
      if (hi < 0 || lo < 0) return false;
      out->push_back(static_cast<char>(hi * 16 + lo));
      i += 2;
    } else if (c == '+' && plus_is_space) {
      out->push_back(' ');
    } else {
      out->push_back(c);
    }
  }
  return true;
}

size_t FindHeadEnd(std::string_view buf, const HttpLimits& limits) {
  const size_t window =
      std::min<size_t>(buf.size(), static_cast<size_t>(limits.max_head_bytes) + 4);
  const size_t at = buf.substr(0, window).find("\r\n\r\n");
  return at == std::string_view::npos ? 0 : at + 4;
}

std::optional<ApiError> ParseRequestHead(std::string_view head, const HttpLimits& limits,
                                         HttpRequest* req) {
  if (static_cast<int64_t>(head.size()) > limits.max_head_bytes + 4) return HeadTooLarge(limits);
  // Lines end in CRLF: a CR or LF anywhere else is refused, so no two
  // parsers (ours, a proxy's) can split the head differently.
  std::vector<std::string_view> lines;
  size_t pos = 0;
  while (pos < head.size()) {
    const size_t crlf = head.find("\r\n", pos);
    if (crlf == std::string_view::npos) return Malformed("the head does not end in CRLF CRLF");
    const std::string_view line = head.substr(pos, crlf - pos);
    if (line.find_first_of("\r\n") != std::string_view::npos)
      return Malformed("a bare CR or LF inside a line");
    lines.push_back(line);
    pos = crlf + 2;
  }
  if (lines.size() < 2 || !lines.back().empty()) return Malformed("the head is incomplete");
  lines.pop_back();
  if (static_cast<int64_t>(lines.size()) - 1 > limits.max_header_fields)
    return HeadTooLarge(limits);
  req->headers.clear();
  if (static_cast<int64_t>(lines[0].size()) > limits.max_line_bytes)
    return HttpFail(414,
                    "the request line is longer than the server's limit (" +
                        std::to_string(limits.max_line_bytes) + " bytes)",
                    "uri_too_long");
  if (auto err = ParseRequestLine(lines[0], req)) return err;
  for (size_t i = 1; i < lines.size(); ++i) {
    if (lines[i].empty()) return Malformed("an empty header line");
    if (static_cast<int64_t>(lines[i].size()) > limits.max_line_bytes)
      return HttpFail(431,
                      "a header field is longer than the server's limit (" +
                          std::to_string(limits.max_line_bytes) + " bytes)",
                      "header_fields_too_large");
    if (auto err = ParseFieldLine(lines[i], req)) return err;
  }
  return std::nullopt;
}

std::optional<ApiError> ParseBodyFraming(const HttpRequest& req, const HttpLimits& limits,
                                         BodyFraming* out) {
  const std::string* length = nullptr;
  const std::string* coding = nullptr;
  for (const auto& [name, value] : req.headers) {
    if (name == "content-length") {
      if (length != nullptr)
        return Malformed("Content-Length appears more than once (a request smuggling pattern)");
      length = &value;
    } else if (name == "transfer-encoding") {
      if (coding != nullptr) return Malformed("Transfer-Encoding appears more than once");
      coding = &value;
    }
  }
  *out = BodyFraming{};
  if (coding != nullptr) {
    if (length != nullptr)
      return Malformed(
          "Content-Length together with Transfer-Encoding (a request smuggling pattern)");
    if (req.version_minor == 0) return Malformed("Transfer-Encoding in an HTTP/1.0 request");
    if (Lower(*coding) != "chunked")
      return HttpFail(
          501,
          "Transfer-Encoding '" + coding->substr(0, 64) + "' is not supported; only 'chunked' is",
          "unsupported_transfer_encoding");
    out->kind = BodyFraming::Kind::kChunked;
    return std::nullopt;
  }
  if (length != nullptr) {
    if (length->empty() || length->size() > 18 ||
        !std::all_of(length->begin(), length->end(), [](char c) { return c >= '0' && c <= '9'; }))
      return Malformed("Content-Length '" + length->substr(0, 64) + "' is not a decimal number");
    out->kind = BodyFraming::Kind::kLength;
    out->length = std::stoll(*length);
    if (out->length > limits.max_body_bytes) return BodyTooLarge(limits);
  }
  return std::nullopt;
}

bool WantsKeepAlive(const HttpRequest& req) {
  bool close = false, keep = false;
  for (const auto& [name, value] : req.headers) {
    if (name != "connection") continue;
    // A list of tokens: "keep-alive, Upgrade".
    std::string_view rest = value;
    while (!rest.empty()) {
      const size_t comma = rest.find(',');
      const std::string token = Lower(TrimOws(rest.substr(0, comma)));
      rest = comma == std::string_view::npos ? std::string_view() : rest.substr(comma + 1);
      if (token == "close") close = true;
      if (token == "keep-alive") keep = true;
    }
  }
  if (close) return false;
  return req.version_minor >= 1 || keep;
}

ChunkedDecoder::State ChunkedDecoder::Fail(ApiError err) {
  error_ = std::move(err);
  return State::kError;
}

ChunkedDecoder::State ChunkedDecoder::Feed(std::string_view in, std::string* body,
                                           size_t* consumed) {
  size_t pos = 0;
  auto done = [&](State s) {
    *consumed = pos;
    return s;
  };
  // Appends to line_ up to a CRLF; true once a whole line is in line_.
  auto take_line = [&](int64_t max_bytes) -> std::optional<bool> {
    while (pos < in.size()) {
      const char c = in[pos++];
      line_.push_back(c);
      if (c == '\n') {
        if (line_.size() < 2 || line_[line_.size() - 2] != '\r') return std::nullopt;
        line_.resize(line_.size() - 2);
        return true;
      }
      if (static_cast<int64_t>(line_.size()) > max_bytes + 2) return std::nullopt;
    }
    return false;
  };
  while (pos < in.size() || phase_ == Phase::kDone) {
    switch (phase_) {
      case Phase::kSize: {
        std::optional<bool> got = take_line(limits_.max_chunk_line_bytes);
        if (!got) return done(Fail(Malformed("a chunk-size line is too long or not CRLF-ended")));
        if (!*got) return done(State::kNeedMore);
        std::string_view size_part(line_);
        size_part = size_part.substr(0, size_part.find(';'));
        size_part = TrimOws(size_part);
        if (size_part.empty() || size_part.size() > 15)
          return done(Fail(Malformed("a chunk size is not a hex number of at most 15 digits")));
        int64_t size = 0;
        for (char c : size_part) {
          const int v = HexValue(c);
          if (v < 0) return done(Fail(Malformed("a chunk size is not a hex number")));
          size = size * 16 + v;
        }
        line_.clear();
        if (size > limits_.max_body_bytes - static_cast<int64_t>(body->size()))
          return done(Fail(BodyTooLarge(limits_)));
        chunk_left_ = size;
        phase_ = size == 0 ? Phase::kTrailer : Phase::kData;
        break;
      }
      case Phase::kData: {
        const size_t n = static_cast<size_t>(
            std::min<int64_t>(chunk_left_, static_cast<int64_t>(in.size() - pos)));
        body->append(in.data() + pos, n);
        pos += n;
        chunk_left_ -= static_cast<int64_t>(n);
        if (chunk_left_ == 0) phase_ = Phase::kDataEnd;
        break;
      }
      case Phase::kDataEnd: {
        // Exactly CRLF, byte by byte (it may arrive split).
        line_.push_back(in[pos++]);
        if (line_ != std::string_view("\r\n").substr(0, line_.size()))
          return done(Fail(Malformed("chunk data is not followed by CRLF")));
        if (line_.size() == 2) {
          line_.clear();
          phase_ = Phase::kSize;
        }
        break;
      }
      case Phase::kTrailer: {
        const size_t before = pos;
        std::optional<bool> got = take_line(limits_.max_head_bytes);
        trailer_bytes_ += static_cast<int64_t>(pos - before);
        if (trailer_bytes_ > limits_.max_head_bytes) return done(Fail(HeadTooLarge(limits_)));
        if (!got) return done(Fail(Malformed("a trailer line is not CRLF-ended")));
        if (!*got) return done(State::kNeedMore);
        if (line_.empty()) {
          phase_ = Phase::kDone;
          break;
        }
        // Trailer fields are checked for form and counted, then dropped: no
        // route reads them.
        HttpRequest scratch;
        if (auto err = ParseFieldLine(line_, &scratch)) return done(Fail(*err));
        if (++trailer_fields_ > limits_.max_header_fields) return done(Fail(HeadTooLarge(limits_)));
        line_.clear();
        break;
      }
      case Phase::kDone:
        return done(State::kDone);
    }
  }
  return done(State::kNeedMore);
}

}  // namespace kvfork::server
