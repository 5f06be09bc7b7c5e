#include "server/openai_schema.h"

#include <cmath>
#include <set>

#include "server/structured_output.h"
#include "server/unsupported_fields.h"

namespace kvfork::server {
namespace {

// Objects keep the client's key order (what reaches the chat template).
using json = nlohmann::ordered_json;

const char* TypeName(const json& v) {
  if (v.is_null()) return "null";
  if (v.is_boolean()) return "boolean";
  if (v.is_number_integer()) return "integer";
  if (v.is_number()) return "number";
  if (v.is_string()) return "string";
  if (v.is_array()) return "array";
  return "object";
}

ApiError WrongType(const std::string& field, const char* want, const json& got) {
  return InvalidField(field, "'" + field + "' must be " + want + ", got " + TypeName(got));
}

// Each getter leaves *out alone when the field is absent or null (OpenAI
// treats null as "use the default") and reports whether it was present.
std::optional<ApiError> GetNumber(const json& obj, const std::string& name, double* out,
                                  bool* present = nullptr) {
  auto it = obj.find(name);
  if (present != nullptr) *present = false;
  if (it == obj.end() || it->is_null()) return std::nullopt;
  if (!it->is_number()) return WrongType(name, "a number", *it);
  double v = it->get<double>();
  if (!std::isfinite(v)) return InvalidField(name, "'" + name + "' must be finite");
  *out = v;
  if (present != nullptr) *present = true;
  return std::nullopt;
}

bool AsInteger(const json& v, int64_t* out) {
  if (v.is_number_integer()) {
    if (v.is_number_unsigned() && v.get<uint64_t>() > static_cast<uint64_t>(INT64_MAX))
      return false;
    *out = v.get<int64_t>();
    return true;
  }
  if (v.is_number_float()) {
    double d = v.get<double>();
    // 2.0 is accepted as 2 (JSON has one number type); 2.5 is not an integer.
    if (!std::isfinite(d) || d != std::floor(d) || std::fabs(d) > 9.0e18) return false;
    *out = static_cast<int64_t>(d);
    return true;
  }
  return false;
}

std::optional<ApiError> GetInt(const json& obj, const std::string& name, int64_t* out,
                               bool* present = nullptr) {
  auto it = obj.find(name);
  if (present != nullptr) *present = false;
  if (it == obj.end() || it->is_null()) return std::nullopt;
  if (!AsInteger(*it, out)) return WrongType(name, "an integer", *it);
  if (present != nullptr) *present = true;
  return std::nullopt;
}

std::optional<ApiError> GetBool(const json& obj, const std::string& name, bool* out) {
  auto it = obj.find(name);
  if (it == obj.end() || it->is_null()) return std::nullopt;
  if (!it->is_boolean()) return WrongType(name, "a boolean", *it);
  *out = it->get<bool>();
  return std::nullopt;
}

std::optional<ApiError> GetString(const json& obj, const std::string& name, std::string* out) {
  auto it = obj.find(name);
  if (it == obj.end() || it->is_null()) return std::nullopt;
  if (!it->is_string()) return WrongType(name, "a string", *it);
  *out = it->get<std::string>();
  return std::nullopt;
}

std::optional<ApiError> CheckRange(const std::string& name, double v, double lo, double hi,
                                   bool lo_open = false) {
  bool ok = lo_open ? (v > lo && v <= hi) : (v >= lo && v <= hi);
  if (ok) return std::nullopt;
  char buf[160];
  std::snprintf(buf, sizeof(buf), "'%s' must be in %s%g, %g], got %g", name.c_str(),
                lo_open ? "(" : "[", lo, hi, v);
  return InvalidField(name, buf);
}

#define KVFORK_API_TRY(expr)                   \
  do {                                         \
    std::optional<ApiError> api_err_ = (expr); \
    if (api_err_) return api_err_;             \
  } while (0)

std::optional<ApiError> ParseTokenIds(const json& arr, const std::string& field,
                                      int64_t vocab_size, std::vector<int32_t>* out) {
  out->clear();
  for (size_t i = 0; i < arr.size(); ++i) {
    std::string f = field + "[" + std::to_string(i) + "]";
    int64_t id = 0;
    if (!AsInteger(arr[i], &id)) return WrongType(f, "a token id (integer)", arr[i]);
    if (id < 0 || (vocab_size > 0 && id >= vocab_size))
      return InvalidField(f, "'" + f + "' = " + std::to_string(id) + " is not a token id (vocab size " +
                                 std::to_string(vocab_size) + ")");
    out->push_back(static_cast<int32_t>(id));
  }
  return std::nullopt;
}

std::optional<ApiError> ParsePrompt(const json& body, const SchemaLimits& limits,
                                    std::vector<PromptInput>* out) {
  auto it = body.find("prompt");
  if (it == body.end() || it->is_null())
    return InvalidField("prompt", "'prompt' is required");
  const json& p = *it;
  out->clear();
  if (p.is_string()) {
    out->push_back(PromptInput{p.get<std::string>(), {}, false});
    return std::nullopt;
  }
  if (!p.is_array())
    return WrongType("prompt", "a string, a list of strings or a list of token ids", p);
  if (p.empty()) return InvalidField("prompt", "'prompt' must not be empty");
  if (p[0].is_number()) {
    PromptInput in;
    in.is_tokens = true;
    KVFORK_API_TRY(ParseTokenIds(p, "prompt", limits.vocab_size, &in.tokens));
    out->push_back(std::move(in));
    return std::nullopt;
  }
  if (static_cast<int64_t>(p.size()) > limits.max_prompts)
    return InvalidField("prompt", "'prompt' lists " + std::to_string(p.size()) +
                                      " prompts; at most " + std::to_string(limits.max_prompts));
  for (size_t i = 0; i < p.size(); ++i) {
    std::string f = "prompt[" + std::to_string(i) + "]";
    PromptInput in;
    if (p[i].is_string()) {
      in.text = p[i].get<std::string>();
    } else if (p[i].is_array()) {
      if (p[i].empty()) return InvalidField(f, "'" + f + "' must not be empty");
      in.is_tokens = true;
      KVFORK_API_TRY(ParseTokenIds(p[i], f, limits.vocab_size, &in.tokens));
    } else {
      return WrongType(f, "a string or a list of token ids", p[i]);
    }
    out->push_back(std::move(in));
  }
  return std::nullopt;
}

std::optional<ApiError> ParseStop(const json& body, const SchemaLimits& limits,
                                  std::vector<std::string>* out) {
  auto it = body.find("stop");
  if (it == body.end() || it->is_null()) return std::nullopt;
  auto too_long = [&](const std::string& field, const std::string& s) -> std::optional<ApiError> {
    if (static_cast<int64_t>(s.size()) <= limits.max_stop_bytes) return std::nullopt;
    return InvalidField(field, "'" + field + "' is " + std::to_string(s.size()) +
                                   " bytes; a stop string may have at most " +
                                   std::to_string(limits.max_stop_bytes));
  };
  if (it->is_string()) {
    KVFORK_API_TRY(too_long("stop", it->get_ref<const std::string&>()));
    if (!it->get<std::string>().empty()) out->push_back(it->get<std::string>());
    return std::nullopt;
  }
  if (!it->is_array()) return WrongType("stop", "a string or a list of strings", *it);
  if (static_cast<int64_t>(it->size()) > limits.max_stop)
    return InvalidField("stop", "'stop' has " + std::to_string(it->size()) +
                                    " strings; at most " + std::to_string(limits.max_stop));
  for (size_t i = 0; i < it->size(); ++i) {
    const json& s = (*it)[i];
    std::string f = "stop[" + std::to_string(i) + "]";
    if (!s.is_string()) return WrongType(f, "a string", s);
    if (s.get<std::string>().empty()) return InvalidField(f, "'" + f + "' must not be empty");
    KVFORK_API_TRY(too_long(f, s.get_ref<const std::string&>()));
    out->push_back(s.get<std::string>());
  }
  return std::nullopt;
}

std::optional<ApiError> ParseLogitBias(const json& body, const SchemaLimits& limits,
                                       std::map<int32_t, float>* out) {
  const int64_t vocab_size = limits.vocab_size;
  auto it = body.find("logit_bias");
  if (it == body.end() || it->is_null()) return std::nullopt;
  if (!it->is_object()) return WrongType("logit_bias", "an object", *it);
  if (static_cast<int64_t>(it->size()) > limits.max_logit_bias)
    return InvalidField("logit_bias", "'logit_bias' has " + std::to_string(it->size()) +
                                          " entries; at most " +
                                          std::to_string(limits.max_logit_bias));
  for (auto kv = it->begin(); kv != it->end(); ++kv) {
    std::string f = "logit_bias." + kv.key();
    char* end = nullptr;
    long long id = std::strtoll(kv.key().c_str(), &end, 10);
    if (kv.key().empty() || *end != '\0' || id < 0 || (vocab_size > 0 && id >= vocab_size))
      return InvalidField("logit_bias", "'logit_bias' key '" + kv.key() +
                                            "' is not a token id (vocab size " +
                                            std::to_string(vocab_size) + ")");
    if (!kv.value().is_number()) return WrongType(f, "a number", kv.value());
    double b = kv.value().get<double>();
    KVFORK_API_TRY(CheckRange(f, b, -100.0, 100.0));
    (*out)[static_cast<int32_t>(id)] = static_cast<float>(b);
  }
  return std::nullopt;
}

// vLLM's stop options, on both endpoints: min_tokens (no EOS, stop token or
// stop string before that many tokens) and include_stop_str_in_output.
// After max_tokens is parsed: min_tokens may not exceed an explicit max_tokens
// (an implicit one is capped by the context; SubmitGeneration clamps to it).
std::optional<ApiError> ParseVllmStopOptions(const json& body, ParsedRequest* out) {
  SamplingParams& s = out->sampling;
  KVFORK_API_TRY(GetInt(body, "min_tokens", &s.min_tokens));
  if (s.min_tokens < 0)
    return InvalidField("min_tokens",
                        "'min_tokens' must be >= 0, got " + std::to_string(s.min_tokens));
  if (out->max_tokens_given && s.min_tokens > s.max_tokens)
    return InvalidField("min_tokens", "'min_tokens' (" + std::to_string(s.min_tokens) +
                                          ") must not exceed 'max_tokens' (" +
                                          std::to_string(s.max_tokens) + ")");
  KVFORK_API_TRY(GetBool(body, "include_stop_str_in_output", &s.include_stop_str_in_output));
  return std::nullopt;
}

std::optional<ApiError> ParseSampling(const json& body, Endpoint endpoint,
                                      const SchemaLimits& limits, ParsedRequest* out) {
  SamplingParams& s = out->sampling;
  KVFORK_API_TRY(GetNumber(body, "temperature", &s.temperature));
  KVFORK_API_TRY(CheckRange("temperature", s.temperature, 0.0, 2.0));
  KVFORK_API_TRY(GetNumber(body, "top_p", &s.top_p));
  KVFORK_API_TRY(CheckRange("top_p", s.top_p, 0.0, 1.0, /*lo_open=*/true));
  int64_t top_k = 0;
  KVFORK_API_TRY(GetInt(body, "top_k", &top_k));
  // vLLM spells "off" as -1, llama.cpp and HF as 0.
  if (top_k < -1) return InvalidField("top_k", "'top_k' must be -1, 0 (off) or positive");
  s.top_k = top_k < 0 ? 0 : top_k;
  KVFORK_API_TRY(GetNumber(body, "min_p", &s.min_p));
  KVFORK_API_TRY(CheckRange("min_p", s.min_p, 0.0, 1.0));
  KVFORK_API_TRY(GetNumber(body, "presence_penalty", &s.presence_penalty));
  KVFORK_API_TRY(CheckRange("presence_penalty", s.presence_penalty, -2.0, 2.0));
  KVFORK_API_TRY(GetNumber(body, "frequency_penalty", &s.frequency_penalty));
  KVFORK_API_TRY(CheckRange("frequency_penalty", s.frequency_penalty, -2.0, 2.0));
  KVFORK_API_TRY(GetNumber(body, "repetition_penalty", &s.repetition_penalty));
  if (s.repetition_penalty <= 0.0 || s.repetition_penalty > 10.0)
    return CheckRange("repetition_penalty", s.repetition_penalty, 0.0, 10.0, true);

  // max_completion_tokens is the newer name; either may be sent.
  int64_t max_tokens = 0;
  bool given = false;
  KVFORK_API_TRY(GetInt(body, "max_tokens", &max_tokens, &given));
  const char* max_name = "max_tokens";
  if (endpoint == Endpoint::kChat) {
    bool given2 = false;
    int64_t mct = 0;
    KVFORK_API_TRY(GetInt(body, "max_completion_tokens", &mct, &given2));
    if (given2) {
      max_tokens = mct;
      given = true;
      max_name = "max_completion_tokens";
    }
  }
  if (given && max_tokens < 0)
    return InvalidField(max_name, std::string("'") + max_name + "' must be >= 0, got " +
                                      std::to_string(max_tokens));
  out->max_tokens_given = given;
  if (given) s.max_tokens = max_tokens;

  KVFORK_API_TRY(GetInt(body, "n", &s.n));
  if (s.n < 1 || s.n > limits.max_n)
    return InvalidField("n", "'n' must be in [1, " + std::to_string(limits.max_n) + "], got " +
                                 std::to_string(s.n));
  // best_of (completions): choices generated server-side, the n best returned.
  // Only best_of == n, which is plain sampling, is served.
  int64_t best_of = s.n;
  KVFORK_API_TRY(GetInt(body, "best_of", &best_of));
  if (best_of < s.n)
    return InvalidField("best_of", "'best_of' must be >= n (" + std::to_string(s.n) + "), got " +
                                       std::to_string(best_of));
  if (best_of > s.n)
    return InvalidField("best_of", "'best_of' = " + std::to_string(best_of) +
                                       " > n is not supported: ranking choices by likelihood is "
                                       "not implemented (send n instead)");
  KVFORK_API_TRY(ParseStop(body, limits, &s.stop));
  auto st = body.find("stop_token_ids");
  if (st != body.end() && !st->is_null()) {
    if (!st->is_array()) return WrongType("stop_token_ids", "a list of token ids", *st);
    if (static_cast<int64_t>(st->size()) > limits.max_stop_token_ids)
      return InvalidField("stop_token_ids", "'stop_token_ids' has " + std::to_string(st->size()) +
                                                " ids; at most " +
                                                std::to_string(limits.max_stop_token_ids));
    KVFORK_API_TRY(ParseTokenIds(*st, "stop_token_ids", limits.vocab_size, &s.stop_token_ids));
  }
  int64_t seed = 0;
  bool seed_given = false;
  KVFORK_API_TRY(GetInt(body, "seed", &seed, &seed_given));
  if (seed_given) s.seed = static_cast<uint64_t>(seed);
  KVFORK_API_TRY(ParseLogitBias(body, limits, &s.logit_bias));
  KVFORK_API_TRY(GetBool(body, "ignore_eos", &s.ignore_eos));

  if (endpoint == Endpoint::kChat) {
    bool logprobs = false;
    KVFORK_API_TRY(GetBool(body, "logprobs", &logprobs));
    int64_t top = 0;
    bool top_given = false;
    KVFORK_API_TRY(GetInt(body, "top_logprobs", &top, &top_given));
    if (top_given && (top < 0 || top > limits.max_top_logprobs))
      return InvalidField("top_logprobs", "'top_logprobs' must be in [0, " +
                                              std::to_string(limits.max_top_logprobs) + "]");
    if (top_given && !logprobs)
      return InvalidField("top_logprobs", "'top_logprobs' requires 'logprobs': true");
    s.top_logprobs = logprobs ? top : -1;
  } else {
    int64_t lp = -1;
    bool lp_given = false;
    KVFORK_API_TRY(GetInt(body, "logprobs", &lp, &lp_given));
    if (lp_given && (lp < 0 || lp > 5))
      return InvalidField("logprobs", "'logprobs' must be in [0, 5], got " + std::to_string(lp));
    s.top_logprobs = lp_given ? lp : -1;
  }
  KVFORK_API_TRY(ParseVllmStopOptions(body, out));
  return std::nullopt;
}

}  // namespace

std::optional<ApiError> ParseMessages(const json& messages, json* out) {
  if (!messages.is_array()) return WrongType("messages", "an array", messages);
  if (messages.empty()) return InvalidField("messages", "'messages' must not be empty");
  static const std::set<std::string> kRoles = {"system", "developer", "user", "assistant",
                                               "tool"};
  *out = json::array();
  for (size_t i = 0; i < messages.size(); ++i) {
    const std::string f = "messages[" + std::to_string(i) + "]";
    const json& m = messages[i];
    if (!m.is_object()) return WrongType(f, "an object", m);
    auto role = m.find("role");
    if (role == m.end() || role->is_null()) return InvalidField(f + ".role", "'" + f + ".role' is required");
    if (!role->is_string()) return WrongType(f + ".role", "a string", *role);
    std::string r = role->get<std::string>();
    if (kRoles.count(r) == 0)
      return InvalidField(f + ".role", "'" + f + ".role' = '" + r +
                                           "' is not one of system, developer, user, assistant, tool");
    json norm = m;
    // Chat templates know "system"; OpenAI's "developer" is the same role.
    if (r == "developer") norm["role"] = "system";
    auto content = m.find("content");
    const bool may_be_empty = r == "assistant" && m.contains("tool_calls");
    if (content == m.end() || content->is_null()) {
      if (!may_be_empty) return InvalidField(f + ".content", "'" + f + ".content' is required");
      norm["content"] = "";
    } else if (content->is_array()) {
      // Content parts: text only (this server has no image or audio input).
      std::string text;
      for (size_t j = 0; j < content->size(); ++j) {
        const std::string pf = f + ".content[" + std::to_string(j) + "]";
        const json& part = (*content)[j];
        if (!part.is_object()) return WrongType(pf, "an object", part);
        auto type = part.find("type");
        if (type == part.end() || !type->is_string())
          return InvalidField(pf + ".type", "'" + pf + ".type' must be a string");
        if (*type != "text")
          return InvalidField(pf + ".type", "'" + pf + ".type': content part type '" + type->get<std::string>() +
                                                "' is not supported (only 'text')");
        auto t = part.find("text");
        if (t == part.end() || !t->is_string()) return InvalidField(pf + ".text", "'" + pf + ".text' must be a string");
        text += t->get<std::string>();
      }
      norm["content"] = text;
    } else if (!content->is_string()) {
      return WrongType(f + ".content", "a string or an array of content parts", *content);
    }
    out->push_back(std::move(norm));
  }
  return std::nullopt;
}

namespace {

// tool_choice, parallel_tool_calls and reasoning_effort.
std::optional<ApiError> ParseToolOptions(const json& body, ChatInput* out) {
  auto tc = body.find("tool_choice");
  if (tc != body.end() && !tc->is_null()) {
    if (tc->is_string() && (*tc == "auto" || *tc == "none")) {
      out->tool_choice = tc->get<std::string>();
    } else if (tc->is_string() && *tc == "required") {
      out->tool_choice = "required";
    } else if (tc->is_object()) {
      // {"type": "function", "function": {"name": ...}}
      auto fn = tc->find("function");
      const json* name = nullptr;
      if (fn != tc->end() && fn->is_object() && fn->contains("name")) name = &(*fn)["name"];
      if (tc->value("type", json()) != "function" || name == nullptr || !name->is_string())
        return InvalidField("tool_choice",
                            "'tool_choice' as an object must be {\"type\": \"function\", "
                            "\"function\": {\"name\": ...}}");
      out->tool_choice = "function";
      out->forced_tool = name->get<std::string>();
    } else {
      return InvalidField("tool_choice",
                          "'tool_choice' must be \"auto\", \"none\", \"required\" or "
                          "{\"type\": \"function\", \"function\": {\"name\": ...}}");
    }
  }
  if (out->tool_choice == "required" || out->tool_choice == "function") {
    if (!out->tools.is_array() || out->tools.empty())
      return InvalidField("tool_choice", "'tool_choice' = \"" + out->tool_choice +
                                             "\" needs at least one tool in 'tools'");
    if (out->tool_choice == "function") {
      bool found = false;
      for (const json& t : out->tools)
        if (t.is_object() && t.contains("function") && t["function"].is_object() &&
            t["function"].value("name", json()) == out->forced_tool)
          found = true;
      if (!found)
        return InvalidField("tool_choice", "'tool_choice' names function '" + out->forced_tool +
                                               "', which is not in 'tools'");
    }
  }
  KVFORK_API_TRY(GetBool(body, "parallel_tool_calls", &out->parallel_tool_calls));
  KVFORK_API_TRY(GetString(body, "reasoning_effort", &out->reasoning_effort));
  static const std::set<std::string> kEfforts = {"none", "minimal", "low", "medium", "high"};
  if (!out->reasoning_effort.empty() && kEfforts.count(out->reasoning_effort) == 0)
    return InvalidField("reasoning_effort", "'reasoning_effort' = '" + out->reasoning_effort +
                                                "' is not one of none, minimal, low, medium, high");
  return std::nullopt;
}

}  // namespace

std::optional<ApiError> ParseChatInput(const json& body, ChatInput* out) {
  auto m = body.find("messages");
  if (m == body.end() || m->is_null()) return InvalidField("messages", "'messages' is required");
  KVFORK_API_TRY(ParseMessages(*m, &out->messages));
  auto tools = body.find("tools");
  if (tools != body.end() && !tools->is_null()) {
    if (!tools->is_array()) return WrongType("tools", "an array", *tools);
    out->tools = *tools;
  }
  auto kw = body.find("chat_template_kwargs");
  if (kw != body.end() && !kw->is_null()) {
    if (!kw->is_object()) return WrongType("chat_template_kwargs", "an object", *kw);
    auto think = kw->find("enable_thinking");
    if (think != kw->end() && !think->is_boolean())
      return WrongType("chat_template_kwargs.enable_thinking", "a boolean", *think);
    out->chat_template_kwargs = *kw;
  }
  KVFORK_API_TRY(ParseToolOptions(body, out));
  KVFORK_API_TRY(GetBool(body, "continue_final_message", &out->continue_final_message));
  // add_generation_prompt: the body's field, else chat_template_kwargs' (older
  // clients put it there), else true; with continue_final_message, false.
  bool agp_given = false;
  const json* holders[] = {&body, &out->chat_template_kwargs};
  for (const json* holder : holders) {
    if (!holder->is_object()) continue;
    auto a = holder->find("add_generation_prompt");
    if (a == holder->end() || a->is_null()) continue;
    if (!a->is_boolean()) {
      const std::string f =
          holder == &body ? "add_generation_prompt" : "chat_template_kwargs.add_generation_prompt";
      return WrongType(f, "a boolean", *a);
    }
    out->add_generation_prompt = a->get<bool>();
    agp_given = true;
    break;
  }
  if (out->continue_final_message) {
    if (agp_given && out->add_generation_prompt)
      return InvalidField("continue_final_message",
                          "'continue_final_message' and 'add_generation_prompt' cannot both be "
                          "true: the first leaves the last message open, the second starts a new "
                          "assistant turn");
    out->add_generation_prompt = false;
  }
  return std::nullopt;
}

bool AllowsZeroMaxTokens(const ParsedRequest& request) {
  // Hook for prompt logprobs: echo + logprobs on /v1/completions scores the
  // prompt and needs no generated token.
  return request.endpoint == Endpoint::kCompletion && request.echo &&
         request.sampling.top_logprobs >= 0;
}

std::optional<ApiError> ParseRequestBody(Endpoint endpoint, std::string_view body,
                                         const SchemaLimits& limits, ParsedRequest* out) {
  json j;
  KVFORK_API_TRY(ParseJsonBody(body, &j));
  if (!j.is_object()) return BadRequest(std::string("request body must be a JSON object, got ") + TypeName(j));
  *out = ParsedRequest{};
  out->endpoint = endpoint;
  try {
    KVFORK_API_TRY(RejectUnsupportedFields(endpoint, j));
    KVFORK_API_TRY(GetString(j, "model", &out->model));
    if (endpoint == Endpoint::kChat) {
      KVFORK_API_TRY(ParseChatInput(j, &out->chat));
      out->add_special_tokens = false;  // the template writes BOS itself
    } else {
      KVFORK_API_TRY(ParsePrompt(j, limits, &out->prompts));
      KVFORK_API_TRY(GetBool(j, "echo", &out->echo));
    }
    KVFORK_API_TRY(GetBool(j, "add_special_tokens", &out->add_special_tokens));
    KVFORK_API_TRY(GetBool(j, "return_tokens_as_token_ids", &out->tokens_as_ids));
    KVFORK_API_TRY(ParseSampling(j, endpoint, limits, out));
    KVFORK_API_TRY(ParseStructuredOutput(j, &out->sampling));
    if (out->max_tokens_given && out->sampling.max_tokens == 0 && !AllowsZeroMaxTokens(*out)) {
      auto mct = j.find("max_completion_tokens");
      const std::string f = endpoint == Endpoint::kChat && mct != j.end() && !mct->is_null()
                                ? "max_completion_tokens"
                                : "max_tokens";
      return InvalidField(f, "'" + f +
                                 "' must be at least 1 (0 is only allowed on /v1/completions with "
                                 "'echo' and 'logprobs', to score the prompt)");
    }
    KVFORK_API_TRY(GetBool(j, "stream", &out->stream));
    auto so = j.find("stream_options");
    if (so != j.end() && !so->is_null()) {
      if (!so->is_object()) return WrongType("stream_options", "an object", *so);
      if (!out->stream)
        return InvalidField("stream_options", "'stream_options' is only allowed when 'stream' is true");
      auto iu = so->find("include_usage");
      if (iu != so->end() && !iu->is_null()) {
        if (!iu->is_boolean()) return WrongType("stream_options.include_usage", "a boolean", *iu);
        out->include_usage = iu->get<bool>();
      }
    }
    KVFORK_API_TRY(GetString(j, "user", &out->user));
    KVFORK_API_TRY(GetString(j, "cache_salt", &out->cache_salt));
    KVFORK_API_TRY(GetString(j, "prompt_cache_key", &out->prompt_cache_key));
  } catch (const nlohmann::json::exception& e) {
    return BadRequest(std::string("malformed request: ") + e.what());
  }
  return std::nullopt;
}

}  // namespace kvfork::server
