#include "server/cache_control.h"

#include <algorithm>

#include "engine/engine.h"

namespace kvfork::server {

using ojson = nlohmann::ordered_json;

int64_t AnthropicPinTokens(const GenerationEnv& env, const ojson& chat_body,
                           const AnthropicCacheControl& cache,
                           const std::vector<int32_t>& prompt) {
  const int64_t whole = static_cast<int64_t>(prompt.size());
  const ojson& messages = chat_body["messages"];
  if (!cache.present) return 0;
  if (cache.chat_messages >= messages.size()) return whole;
  ojson head = ojson::object();
  head["messages"] = ojson::array();
  for (size_t i = 0; i < cache.chat_messages; ++i) head["messages"].push_back(messages[i]);
  head["add_generation_prompt"] = false;
  for (const char* key : {"tools", "chat_template_kwargs"}) {
    auto it = chat_body.find(key);
    if (it != chat_body.end()) head[key] = *it;
  }
  std::vector<int32_t> ids;
  const std::string text = head.dump(-1, ' ', false, ojson::error_handler_t::replace);
  if (TokenizeChatBodyText(env, text, &ids)) return whole;  // pins more, never less
  // The common prefix: a template may print the end of a conversation
  // differently from the middle of one.
  size_t k = 0;
  while (k < ids.size() && k < prompt.size() && ids[k] == prompt[k]) ++k;
  return static_cast<int64_t>(k);
}

namespace {

ApiError Invalid(const std::string& field, const std::string& message) {
  return InvalidField(field, "'" + field + "' " + message);
}

std::optional<ApiError> PinTtlMs(const ojson& body, int64_t* ttl_ms) {
  auto ttl = body.find("ttl");
  auto secs = body.find("ttl_seconds");
  const bool has_ttl = ttl != body.end() && !ttl->is_null();
  const bool has_secs = secs != body.end() && !secs->is_null();
  if (has_ttl == has_secs) return Invalid("ttl", "or 'ttl_seconds' (exactly one) is required");
  if (has_ttl) {
    if (*ttl == "5m") {
      *ttl_ms = 5 * 60 * 1000;
    } else if (*ttl == "1h") {
      *ttl_ms = 60 * 60 * 1000;
    } else {
      return Invalid("ttl", "must be \"5m\" or \"1h\" (or give 'ttl_seconds')");
    }
    return std::nullopt;
  }
  if (!secs->is_number_integer() || secs->get<int64_t>() < 1 ||
      secs->get<int64_t>() > kMaxPinTtlSeconds)
    return Invalid("ttl_seconds",
                   "must be an integer in [1, " + std::to_string(kMaxPinTtlSeconds) + "]");
  *ttl_ms = secs->get<int64_t>() * 1000;
  return std::nullopt;
}

}  // namespace

std::optional<ApiError> RunCachePin(const GenerationEnv& env, const ojson& body,
                                    const std::string& key_salt, const std::string& request_id,
                                    nlohmann::json* reply) {
  if (!body.is_object()) return BadRequest("request body must be a JSON object");
  for (const auto& [key, value] : body.items())
    if (key != "prompt" && key != "ttl" && key != "ttl_seconds" && key != "cache_salt" &&
        key != "model" && key != "api_key")
      return Invalid(key, "is not a field of /v1/cache/pin (prompt, ttl or ttl_seconds, "
                          "cache_salt, api_key)");
  int64_t ttl_ms = 0;
  if (auto err = PinTtlMs(body, &ttl_ms)) return err;
  auto prompt = body.find("prompt");
  if (prompt == body.end() || !(prompt->is_string() || prompt->is_array()))
    return Invalid("prompt", "must be a string or a list of token ids");
  if (prompt->is_array())
    for (size_t i = 0; i < prompt->size(); ++i)
      if (!(*prompt)[i].is_number_integer())
        return Invalid("prompt[" + std::to_string(i) + "]", "must be a token id");
  // Tokens and salt exactly as /v1/completions makes them, so a later
  // completion of this prompt (same key, same cache_salt) finds the blocks.
  ojson completion = {{"prompt", *prompt}, {"max_tokens", 1}, {"temperature", 0}};
  if (body.contains("cache_salt")) completion["cache_salt"] = body["cache_salt"];
  PreparedGeneration prepared;
  if (auto err = PrepareGeneration(env, Endpoint::kCompletion,
                                   completion.dump(-1, ' ', false, ojson::error_handler_t::replace),
                                   key_salt, &prepared))
    return err;
  Request r;
  r.id = request_id;
  r.prompt_tokens = prepared.prompt_tokens[0];
  r.sampling = prepared.parsed.sampling;
  r.sampling.max_tokens = 1;
  r.cache_salt = prepared.cache_salt;
  StatusOr<std::shared_ptr<RequestStream>> stream = env.engine->Submit(r);
  if (!stream.ok()) return FromStatus(stream.status(), "prompt");
  // Prefill: the blocks are cached once the request ends.
  for (;;) {
    std::optional<RequestEvent> e = (*stream)->Pop(1000);
    if (!e) continue;
    if (e->kind == RequestEvent::Kind::kError) return FromStatus(e->error, "prompt");
    if (e->kind == RequestEvent::Kind::kDone) break;
  }
  StatusOr<int64_t> blocks = env.engine->PinPrefix(r.prompt_tokens, r.cache_salt, ttl_ms);
  if (!blocks.ok()) return FromStatus(blocks.status());
  const int64_t block_size = env.engine->Stats().block_size;
  *reply = nlohmann::json{{"prompt_tokens", static_cast<int64_t>(r.prompt_tokens.size())},
                          {"pinned_blocks", *blocks},
                          {"pinned_tokens", *blocks * block_size},
                          {"ttl_seconds", ttl_ms / 1000}};
  return std::nullopt;
}

}  // namespace kvfork::server
