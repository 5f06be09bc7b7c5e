#include "engine/request_validation.h"

#include <cmath>
#include <string>

namespace kvfork {
namespace {

std::string Num(double v) {
  std::string s = std::to_string(v);
  // 1.500000 -> 1.5
  if (s.find('.') != std::string::npos) {
    while (!s.empty() && s.back() == '0') s.pop_back();
    if (!s.empty() && s.back() == '.') s.pop_back();
  }
  return s;
}

}  // namespace

Status ValidateRequest(const Request& request, const RequestLimits& limits) {
  const SamplingParams& p = request.sampling;
  const std::string where = request.id.empty() ? "" : "request " + request.id + ": ";
  auto bad = [&](const std::string& msg) { return InvalidArgumentError(where + msg); };

  if (request.prompt_tokens.empty()) return bad("prompt must not be empty");
  for (size_t i = 0; i < request.prompt_tokens.size(); ++i) {
    const int32_t t = request.prompt_tokens[i];
    if (t < 0 || t >= limits.vocab_size)
      return bad("prompt token " + std::to_string(i) + " is " + std::to_string(t) +
                 ", outside the vocabulary [0, " + std::to_string(limits.vocab_size) + ")");
  }
  if (p.max_tokens < 0)
    return bad("max_tokens must be >= 0, got " + std::to_string(p.max_tokens));
  if (request.pin_tokens < 0 || request.pin_ttl_ms < 0)
    return bad("pin_tokens and pin_ttl_ms must be >= 0");
  if (!std::isfinite(p.temperature) || p.temperature < 0.0)
    return bad("temperature must be >= 0, got " + Num(p.temperature));
  if (!(p.top_p > 0.0 && p.top_p <= 1.0)) return bad("top_p must be in (0, 1], got " + Num(p.top_p));
  if (p.top_k < 0) return bad("top_k must be >= 0 (0 = off), got " + std::to_string(p.top_k));
  if (!(p.min_p >= 0.0 && p.min_p <= 1.0)) return bad("min_p must be in [0, 1], got " + Num(p.min_p));
  if (!(std::isfinite(p.repetition_penalty) && p.repetition_penalty > 0.0))
    return bad("repetition_penalty must be > 0, got " + Num(p.repetition_penalty));
  if (!(p.presence_penalty >= -2.0 && p.presence_penalty <= 2.0))
    return bad("presence_penalty must be in [-2, 2], got " + Num(p.presence_penalty));
  if (!(p.frequency_penalty >= -2.0 && p.frequency_penalty <= 2.0))
    return bad("frequency_penalty must be in [-2, 2], got " + Num(p.frequency_penalty));
  if (static_cast<int64_t>(p.logit_bias.size()) > limits.max_logit_bias)
    return bad("logit_bias has " + std::to_string(p.logit_bias.size()) + " entries, at most " +
               std::to_string(limits.max_logit_bias) + " allowed");
  for (const auto& [token, bias] : p.logit_bias) {
    if (token < 0 || token >= limits.vocab_size)
      return bad("logit_bias token " + std::to_string(token) + " is outside the vocabulary [0, " +
                 std::to_string(limits.vocab_size) + ")");
    if (!(bias >= -100.0f && bias <= 100.0f))
      return bad("logit_bias of token " + std::to_string(token) + " must be in [-100, 100], got " +
                 Num(bias));
  }
  if (p.min_tokens < 0 || p.min_tokens > p.max_tokens)
    return bad("min_tokens must be in [0, max_tokens = " + std::to_string(p.max_tokens) +
               "], got " + std::to_string(p.min_tokens));
  if (p.prompt_logprobs < -1 || p.prompt_logprobs > limits.max_top_logprobs)
    return bad("prompt_logprobs must be in [0, " + std::to_string(limits.max_top_logprobs) +
               "] (or -1 for none), got " + std::to_string(p.prompt_logprobs));
  if (p.n < 1 || p.n > limits.max_n)
    return bad("n must be in [1, " + std::to_string(limits.max_n) + "], got " +
               std::to_string(p.n));
  if (p.top_logprobs < -1 || p.top_logprobs > limits.max_top_logprobs)
    return bad("top_logprobs must be in [0, " + std::to_string(limits.max_top_logprobs) +
               "] (or -1 for none), got " + std::to_string(p.top_logprobs));
  if (static_cast<int64_t>(p.stop.size()) > limits.max_stop)
    return bad("stop has " + std::to_string(p.stop.size()) + " strings, at most " +
               std::to_string(limits.max_stop) + " allowed");
  for (size_t i = 0; i < p.stop.size(); ++i) {
    if (p.stop[i].empty()) return bad("stop string " + std::to_string(i) + " is empty");
    if (static_cast<int64_t>(p.stop[i].size()) > limits.max_stop_bytes)
      return bad("stop string " + std::to_string(i) + " is " + std::to_string(p.stop[i].size()) +
                 " bytes, at most " + std::to_string(limits.max_stop_bytes) + " allowed");
  }
  if (static_cast<int64_t>(p.stop_token_ids.size()) > limits.max_stop_token_ids)
    return bad("stop_token_ids has " + std::to_string(p.stop_token_ids.size()) + " ids, at most " +
               std::to_string(limits.max_stop_token_ids) + " allowed");
  for (int32_t t : p.stop_token_ids)
    if (t < 0 || t >= limits.vocab_size)
      return bad("stop_token_ids has unknown token id " + std::to_string(t) +
                 " (vocabulary is [0, " + std::to_string(limits.vocab_size) + "))");

  const int64_t prompt = static_cast<int64_t>(request.prompt_tokens.size());
  // The last generated token is never fed back, so a choice needs
  // prompt + max_tokens - 1 positions of KV, but the context bound is the
  // usual prompt + max_tokens <= max_context (vLLM, OpenAI).
  if (prompt + p.max_tokens > limits.max_context)
    return OutOfRangeError(where + "prompt (" + std::to_string(prompt) + " tokens) + max_tokens (" +
                           std::to_string(p.max_tokens) + ") exceeds the context length " +
                           std::to_string(limits.max_context));
  if (limits.max_pool_tokens > 0 && prompt + p.max_tokens > limits.max_pool_tokens)
    return OutOfRangeError(where + "prompt (" + std::to_string(prompt) + " tokens) + max_tokens (" +
                           std::to_string(p.max_tokens) + ") can never fit the KV pool of " +
                           std::to_string(limits.max_pool_tokens) + " tokens");
  return OkStatus();
}

}  // namespace kvfork
