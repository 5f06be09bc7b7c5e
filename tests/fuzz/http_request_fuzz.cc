#include <string>

#include "core/logging.h"
#include "fuzz/fuzz_targets.h"
#include "server/http_parser.h"

namespace kvfork::fuzz {
namespace {

using server::BodyFraming;
using server::ChunkedDecoder;
using server::HttpLimits;
using server::HttpRequest;

// What one pass of the parser made of an input: the status of the first
// error (0 = none), the body, and the bytes it used.
struct Outcome {
  int status = 0;
  std::string body;
  size_t used = 0;
  bool complete = false;
};

// Parses one request from input, feeding a chunked body in pieces of at most
// piece bytes (0: all at once), as the connection does with what each read
// brings.
Outcome ParseOnce(std::string_view input, size_t piece, const HttpLimits& limits) {
  Outcome out;
  const size_t head_end = server::FindHeadEnd(input, limits);
  if (head_end == 0) return out;
  HttpRequest req;
  if (auto err = server::ParseRequestHead(input.substr(0, head_end), limits, &req)) {
    out.status = err->http_status;
    return out;
  }
  BodyFraming framing;
  if (auto err = server::ParseBodyFraming(req, limits, &framing)) {
    out.status = err->http_status;
    return out;
  }
  std::string_view rest = input.substr(head_end);
  out.used = head_end;
  if (framing.kind == BodyFraming::Kind::kLength) {
    KVFORK_CHECK(framing.length >= 0 && framing.length <= limits.max_body_bytes);
    if (rest.size() < static_cast<size_t>(framing.length)) return out;
    out.body = std::string(rest.substr(0, static_cast<size_t>(framing.length)));
    out.used += static_cast<size_t>(framing.length);
    out.complete = true;
    return out;
  }
  if (framing.kind == BodyFraming::Kind::kNone) {
    out.complete = true;
    return out;
  }
  ChunkedDecoder decoder(limits);
  std::string pending;
  size_t fed = 0;
  while (fed < rest.size()) {
    const size_t n = piece == 0 ? rest.size() - fed : std::min(piece, rest.size() - fed);
    pending.append(rest.substr(fed, n));
    fed += n;
    size_t used = 0;
    const ChunkedDecoder::State s = decoder.Feed(pending, &out.body, &used);
    KVFORK_CHECK(used <= pending.size());
    KVFORK_CHECK(static_cast<int64_t>(out.body.size()) <= limits.max_body_bytes);
    pending.erase(0, used);
    out.used += used;
    if (s == ChunkedDecoder::State::kError) {
      out.status = decoder.error().http_status;
      return out;
    }
    if (s == ChunkedDecoder::State::kDone) {
      out.complete = true;
      return out;
    }
  }
  return out;
}

}  // namespace

void FuzzHttpRequest(std::string_view input) {
  // Small limits, so that inputs of fuzzer size reach every one of them.
  HttpLimits limits;
  limits.max_head_bytes = 512;
  limits.max_line_bytes = 256;
  limits.max_header_fields = 8;
  limits.max_body_bytes = 256;
  limits.max_chunk_line_bytes = 32;
  const Outcome whole = ParseOnce(input, 0, limits);
  KVFORK_CHECK(whole.used <= input.size());
  if (whole.status != 0)
    KVFORK_CHECK(whole.status == 400 || whole.status == 413 || whole.status == 414 ||
                 whole.status == 431 || whole.status == 501 || whole.status == 505);
  // However the bytes arrive (one at a time, or in 7-byte reads), the
  // request is read the same: a parser that depended on read boundaries
  // would let a proxy and the server disagree about where a request ends.
  for (size_t piece : {size_t{1}, size_t{7}}) {
    const Outcome split = ParseOnce(input, piece, limits);
    KVFORK_CHECK(split.status == whole.status);
    KVFORK_CHECK(split.complete == whole.complete);
    if (whole.complete) {
      KVFORK_CHECK(split.body == whole.body);
      KVFORK_CHECK(split.used == whole.used);
    }
  }
}

}  // namespace kvfork::fuzz
