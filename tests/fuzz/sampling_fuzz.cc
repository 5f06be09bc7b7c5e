// The sampler under any parameters the engine accepts and any logits row.
//
// Input layout (little-endian; a short input is padded with zero bytes):
//   8 doubles: temperature, top_p, min_p, repetition_penalty,
//              presence_penalty, frequency_penalty, one logit_bias value
//              (cast to float), the row's scale
//   int64 top_k, int8 top_logprobs, uint8 flags (bit 0: the row keeps its
//   raw bit patterns, NaN and Inf included; otherwise non-finite values
//   become -Inf, a token that can never be drawn), uint16 bias token
//   then the row: floats, [1, 2048] of them (none: a row of 0s)
// Raw doubles reach every bit pattern: denormals (5e-324), 1e-38, NaN, Inf.
//
// Properties: ValidateRequest decides; an accepted request samples 4 tokens
// (the penalties then see generated tokens). A row with a NaN or +Inf, or no
// finite logit, is an InternalError; any other row gives a token in the
// vocabulary whose logit is not -Inf, with a finite logprob when asked.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "engine/request_validation.h"
#include "engine/sampler.h"
#include "fuzz/fuzz_targets.h"

namespace kvfork::fuzz {
namespace {

template <typename T>
T Take(std::string_view* in) {
  T v{};
  const size_t n = std::min(sizeof(T), in->size());
  if (n > 0) std::memcpy(&v, in->data(), n);  // data() may be null when empty
  in->remove_prefix(n);
  return v;
}

}  // namespace

void FuzzSampling(std::string_view input) {
  SamplingParams p;
  p.temperature = Take<double>(&input);
  p.top_p = Take<double>(&input);
  p.min_p = Take<double>(&input);
  p.repetition_penalty = Take<double>(&input);
  p.presence_penalty = Take<double>(&input);
  p.frequency_penalty = Take<double>(&input);
  const float bias = static_cast<float>(Take<double>(&input));
  const double scale = Take<double>(&input);
  p.top_k = Take<int64_t>(&input);
  p.top_logprobs = Take<int8_t>(&input);
  const uint8_t flags = Take<uint8_t>(&input);
  const uint16_t bias_token = Take<uint16_t>(&input);

  std::vector<float> row(std::clamp<size_t>(input.size() / sizeof(float), 1, 2048), 0.0f);
  const size_t row_bytes = std::min(input.size(), row.size() * sizeof(float)) / 4 * 4;
  if (row_bytes > 0) std::memcpy(row.data(), input.data(), row_bytes);
  const bool raw = (flags & 1) != 0;
  for (float& v : row) {
    if (std::isfinite(scale)) v = static_cast<float>(v * scale);
    if (!raw && !std::isfinite(v)) v = -INFINITY;
  }
  const int64_t vocab = static_cast<int64_t>(row.size());
  p.logit_bias[static_cast<int32_t>(bias_token % vocab)] = bias;
  p.max_tokens = 4;

  Request r;
  r.id = "fuzz";
  r.sampling = p;
  for (int64_t i = 0; i < std::min<int64_t>(vocab, 6); ++i)
    r.prompt_tokens.push_back(static_cast<int32_t>(i));
  RequestLimits limits;
  limits.vocab_size = vocab;
  limits.max_context = 1 << 20;
  if (!ValidateRequest(r, limits).ok()) return;

  bool bad_row = false;
  bool any_finite = false;
  for (float v : row) {
    bad_row = bad_row || std::isnan(v) || v == INFINITY;
    any_finite = any_finite || std::isfinite(v);
  }
  bad_row = bad_row || !any_finite;

  Sampler s(p, r.prompt_tokens, 1234);
  for (int step = 0; step < 4; ++step) {
    StatusOr<SampleResult> got = s.Sample(row);
    if (bad_row) {
      KVFORK_CHECK(!got.ok() && got.status().code() == StatusCode::kInternal);
      return;
    }
    KVFORK_CHECK_MSG(got.ok(), got.status().ToString());
    KVFORK_CHECK(got->token >= 0 && got->token < vocab);
    KVFORK_CHECK_MSG(row[got->token] != -INFINITY, "drew a token whose logit is -Inf");
    if (p.top_logprobs >= 0) {
      KVFORK_CHECK(std::isfinite(got->logprob) && got->logprob <= 0.0f);
      KVFORK_CHECK(static_cast<int64_t>(got->top_logprobs.size()) ==
                   std::min<int64_t>(p.top_logprobs, vocab));
    }
  }
}

}  // namespace kvfork::fuzz
