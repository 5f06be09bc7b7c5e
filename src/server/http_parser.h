// A strict HTTP/1.1 request parser (RFC 9112) for the server's own transport.
// Strict where leniency lets requests be smuggled past a proxy or costs
// memory: every limit is checked before the bytes it guards are kept.
//
//   - The head (request line + header fields) is at most
//     HttpLimits::max_head_bytes and max_header_fields fields, each line at
//     most max_line_bytes: 431 past that (414 for a long request line).
//   - Lines end in CRLF; a bare CR or LF, a NUL or other control byte, an
//     obsolete folded line, or whitespace before a field's colon is a 400.
//   - Content-Length must be digits only and appear once; two of them (equal
//     or not), a list, or one beside Transfer-Encoding is a 400. The only
//     transfer coding is "chunked" (anything else: 501).
//   - Bodies over max_body_bytes are a 413, for chunked bodies as soon as the
//     decoded size passes the limit, so no more than the limit is ever held.
//
// Pure functions and a decoder object; no I/O. Not thread-safe per object.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "server/api_error.h"
#include "server/http_message.h"

namespace kvfork::server {

struct HttpLimits {
  // The request line and every header field together (CRLFs included). Node
  // allows 16 KiB, nginx 8 KiB per line; 64 KiB leaves room for long bearer
  // tokens and cookies while a flood costs at most this per connection.
  int64_t max_head_bytes = 64 << 10;
  // One line (the request line, or one header field): nginx's and httplib's
  // 8 KiB. A longer request line is a 414, a longer field a 431.
  int64_t max_line_bytes = 8 << 10;
  // Apache's LimitRequestFields default.
  int64_t max_header_fields = 100;
  int64_t max_body_bytes = 16 << 20;
  // A chunk-size line ("1a2b;ext=...") longer than this is a 400.
  int64_t max_chunk_line_bytes = 1024;
};

// Where the head ends in buf: the offset just past "\r\n\r\n", or 0 when it
// is not there yet. Searches only the first max_head_bytes + 4 bytes.
size_t FindHeadEnd(std::string_view buf, const HttpLimits& limits);

// Parses a complete head (up to and including the blank line) into req
// (method, target, path, params, version, headers).
std::optional<ApiError> ParseRequestHead(std::string_view head, const HttpLimits& limits,
                                         HttpRequest* req);

// How the body of a parsed request is framed.
struct BodyFraming {
  enum class Kind { kNone, kLength, kChunked } kind = Kind::kNone;
  int64_t length = 0;  // kLength
};
// Checks Content-Length / Transfer-Encoding (see the file comment) and the
// declared length against the body limit.
std::optional<ApiError> ParseBodyFraming(const HttpRequest& req, const HttpLimits& limits,
                                         BodyFraming* out);

// Whether the connection stays open after this request's response
// (HTTP/1.1 unless "Connection: close"; HTTP/1.0 only with "keep-alive").
bool WantsKeepAlive(const HttpRequest& req);

// Decodes a chunked body incrementally. Feed it bytes as they arrive; it
// appends the decoded data to *body and reports how many input bytes it used.
class ChunkedDecoder {
 public:
  enum class State { kNeedMore, kDone, kError };
  explicit ChunkedDecoder(const HttpLimits& limits) : limits_(limits) {}

  // Consumes a prefix of in (*consumed bytes; after kDone the rest belongs to
  // the next request). On kError, error() says why (400 or 413).
  State Feed(std::string_view in, std::string* body, size_t* consumed);
  const ApiError& error() const { return error_; }

 private:
  enum class Phase { kSize, kData, kDataEnd, kTrailer, kDone };
  State Fail(ApiError err);

  HttpLimits limits_;
  Phase phase_ = Phase::kSize;
  std::string line_;  // a partial size or trailer line
  int64_t chunk_left_ = 0;
  int64_t trailer_bytes_ = 0;
  int64_t trailer_fields_ = 0;
  ApiError error_;
};

// Percent-decoding of a path or query component; plus_is_space for queries.
// Returns false on a malformed escape.
bool PercentDecode(std::string_view in, bool plus_is_space, std::string* out);

}  // namespace kvfork::server
