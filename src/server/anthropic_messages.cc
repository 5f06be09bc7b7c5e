#include "server/anthropic_messages.h"

#include <algorithm>
#include <utility>
#include <vector>

namespace kvfork::server {
namespace {

using nlohmann::json;
using ojson = nlohmann::ordered_json;

// A member's string value, or fallback when absent or not a string (a
// wrong type then fails the check that follows, naming the field).
std::string Str(const ojson& obj, const char* key, const char* fallback = "") {
  auto it = obj.find(key);
  return it != obj.end() && it->is_string() ? it->get<std::string>() : fallback;
}

ApiError Invalid(const std::string& field, const std::string& message) {
  return InvalidField(field, "'" + field + "' " + message);
}

// A string, or a list of text blocks, joined (system, tool_result content).
std::optional<ApiError> TextOf(const ojson& value, const std::string& field, std::string* out) {
  out->clear();
  if (value.is_null()) return std::nullopt;
  if (value.is_string()) {
    *out = value.get<std::string>();
    return std::nullopt;
  }
  if (!value.is_array()) return Invalid(field, "must be a string or a list of text blocks");
  for (size_t i = 0; i < value.size(); ++i) {
    const std::string f = field + "[" + std::to_string(i) + "]";
    const ojson& block = value[i];
    if (!block.is_object() || Str(block, "type") != "text" || !block.contains("text") ||
        !block["text"].is_string())
      return Invalid(f, "must be a text block {\"type\": \"text\", \"text\": ...}");
    if (!out->empty()) *out += "\n";
    *out += block["text"].get<std::string>();
  }
  return std::nullopt;
}

// One block's cache_control, if any: {"type": "ephemeral", "ttl"?: "5m" |
// "1h"}; *ttl_ms gets its TTL (0 when the block has none).
std::optional<ApiError> CacheControlOf(const ojson& block, const std::string& field,
                                       int64_t* ttl_ms) {
  *ttl_ms = 0;
  if (!block.is_object()) return std::nullopt;
  auto cc = block.find("cache_control");
  if (cc == block.end() || cc->is_null()) return std::nullopt;
  const std::string f = field + ".cache_control";
  if (!cc->is_object()) return Invalid(f, "must be an object {\"type\": \"ephemeral\"}");
  if (Str(*cc, "type") != "ephemeral") return Invalid(f + ".type", "must be \"ephemeral\"");
  auto ttl = cc->find("ttl");
  if (ttl == cc->end() || ttl->is_null() || *ttl == "5m") {
    *ttl_ms = 5 * 60 * 1000;
  } else if (*ttl == "1h") {
    *ttl_ms = 60 * 60 * 1000;
  } else {
    return Invalid(f + ".ttl", "must be \"5m\" or \"1h\"");
  }
  return std::nullopt;
}

// A request's breakpoints in Anthropic's render order (tools, then system,
// then messages), for the rules it enforces on them as a whole.
struct Breakpoint {
  int section;  // 0 tools, 1 system, 2 messages
  std::string field;
  int64_t ttl_ms;
};
constexpr size_t kMaxBreakpoints = 4;  // Anthropic's limit per request

// Records a breakpoint covering the first chat_messages chat messages.
std::optional<ApiError> NoteBreakpoint(const ojson& block, const std::string& field, int section,
                                       size_t chat_messages, AnthropicCacheControl* cache,
                                       std::vector<Breakpoint>* seen) {
  int64_t ttl = 0;
  if (auto err = CacheControlOf(block, field, &ttl)) return err;
  if (ttl == 0) return std::nullopt;
  seen->push_back({section, field + ".cache_control", ttl});
  if (cache == nullptr) return std::nullopt;
  cache->present = true;
  cache->chat_messages = std::max<size_t>({cache->chat_messages, chat_messages, 1});
  cache->ttl_ms = std::max(cache->ttl_ms, ttl);
  return std::nullopt;
}

// Anthropic's rules across breakpoints: at most four, and a longer TTL never
// after a shorter one in render order (a 1h entry after a 5m one could not
// outlive the prefix it extends). Both are a 400 there, so here too.
std::optional<ApiError> CheckBreakpoints(std::vector<Breakpoint> seen) {
  std::stable_sort(seen.begin(), seen.end(),
                   [](const Breakpoint& a, const Breakpoint& b) { return a.section < b.section; });
  if (seen.size() > kMaxBreakpoints)
    return Invalid(seen[kMaxBreakpoints].field,
                   "is one breakpoint too many: at most " + std::to_string(kMaxBreakpoints) +
                       " blocks may carry cache_control, found " + std::to_string(seen.size()));
  for (size_t i = 1; i < seen.size(); ++i)
    if (seen[i].ttl_ms > seen[i - 1].ttl_ms)
      return Invalid(seen[i].field, "has a longer ttl than " + seen[i - 1].field +
                                        ", which comes before it (render order: tools, system, "
                                        "messages); longer TTLs must come first");
  return std::nullopt;
}

std::optional<ApiError> RequireString(const ojson& obj, const char* key, const std::string& field,
                                      std::string* out) {
  auto it = obj.find(key);
  const std::string f = field + "." + key;
  if (it == obj.end() || !it->is_string() || it->get_ref<const std::string&>().empty())
    return Invalid(f, "must be a non-empty string");
  *out = it->get<std::string>();
  return std::nullopt;
}

// One Anthropic message -> OpenAI messages (a user message with tool
// results becomes tool messages first, then the user's text).
std::optional<ApiError> ConvertMessage(const ojson& m, const std::string& f, ojson* out) {
  if (!m.is_object()) return Invalid(f, "must be an object");
  const std::string role = Str(m, "role");
  if (role != "user" && role != "assistant")
    return Invalid(f + ".role", "must be \"user\" or \"assistant\"");
  auto content = m.find("content");
  if (content == m.end() || content->is_null()) return Invalid(f + ".content", "is required");
  if (content->is_string()) {
    out->push_back({{"role", role}, {"content", content->get<std::string>()}});
    return std::nullopt;
  }
  if (!content->is_array())
    return Invalid(f + ".content", "must be a string or a list of content blocks");
  std::string text, thinking;
  ojson tool_calls = ojson::array();
  ojson tool_results = ojson::array();
  for (size_t i = 0; i < content->size(); ++i) {
    const std::string bf = f + ".content[" + std::to_string(i) + "]";
    const ojson& block = (*content)[i];
    if (!block.is_object()) return Invalid(bf, "must be a content block object");
    const std::string type = Str(block, "type");
    if (type == "text") {
      if (!block.contains("text") || !block["text"].is_string())
        return Invalid(bf + ".text", "must be a string");
      text += block["text"].get<std::string>();
    } else if (type == "thinking" && role == "assistant") {
      if (block.contains("thinking") && block["thinking"].is_string())
        thinking += block["thinking"].get<std::string>();
    } else if (type == "redacted_thinking" && role == "assistant") {
      // Opaque to this server: nothing to print.
    } else if (type == "tool_use" && role == "assistant") {
      std::string id, name;
      if (auto err = RequireString(block, "id", bf, &id)) return err;
      if (auto err = RequireString(block, "name", bf, &name)) return err;
      auto input = block.find("input");
      if (input == block.end() || !input->is_object())
        return Invalid(bf + ".input", "must be an object");
      // The arguments stay an object: templates print it with tojson, as
      // they printed the model's own call.
      tool_calls.push_back({{"id", id},
                            {"type", "function"},
                            {"function", {{"name", name}, {"arguments", *input}}}});
    } else if (type == "tool_result" && role == "user") {
      std::string id, result;
      if (auto err = RequireString(block, "tool_use_id", bf, &id)) return err;
      auto c = block.find("content");
      if (c != block.end())
        if (auto err = TextOf(*c, bf + ".content", &result)) return err;
      if (block.contains("is_error") && block["is_error"] == true) result = "Error: " + result;
      tool_results.push_back({{"role", "tool"}, {"tool_call_id", id}, {"content", result}});
    } else {
      return Invalid(bf + ".type", "= \"" + type + "\" is not supported in a " + role +
                                       " message (text, tool_use, tool_result, thinking)");
    }
  }
  for (ojson& r : tool_results) out->push_back(std::move(r));
  if (role == "user") {
    if (!text.empty() || tool_results.empty())
      out->push_back({{"role", "user"}, {"content", text}});
    return std::nullopt;
  }
  ojson msg = {{"role", "assistant"}, {"content", text}};
  if (!thinking.empty()) msg["reasoning_content"] = thinking;
  if (!tool_calls.empty()) msg["tool_calls"] = std::move(tool_calls);
  out->push_back(std::move(msg));
  return std::nullopt;
}

std::optional<ApiError> ConvertTools(const ojson& tools, ojson* out) {
  if (!tools.is_array()) return Invalid("tools", "must be a list");
  *out = ojson::array();
  for (size_t i = 0; i < tools.size(); ++i) {
    const std::string f = "tools[" + std::to_string(i) + "]";
    const ojson& t = tools[i];
    if (!t.is_object()) return Invalid(f, "must be an object");
    const std::string type = Str(t, "type", "custom");
    if (type != "custom")
      return Invalid(f + ".type", "= \"" + type +
                                      "\" is not supported: only client tools (name, "
                                      "description, input_schema) run here");
    std::string name;
    if (auto err = RequireString(t, "name", f, &name)) return err;
    auto schema = t.find("input_schema");
    if (schema == t.end() || !schema->is_object())
      return Invalid(f + ".input_schema", "must be a JSON schema object");
    ojson fn = {{"name", name}};
    auto d = t.find("description");
    if (d != t.end() && d->is_string()) fn["description"] = *d;
    fn["parameters"] = *schema;
    out->push_back({{"type", "function"}, {"function", std::move(fn)}});
  }
  return std::nullopt;
}

std::optional<ApiError> ConvertToolChoice(const ojson& tc, ojson* chat) {
  if (!tc.is_object()) return Invalid("tool_choice", "must be an object {\"type\": ...}");
  const std::string type = Str(tc, "type");
  if (type == "auto" || type == "none") {
    (*chat)["tool_choice"] = type;
  } else if (type == "any") {
    (*chat)["tool_choice"] = "required";  // the chat parser's 400 names tool_choice
  } else if (type == "tool") {
    (*chat)["tool_choice"] = {{"type", "function"}, {"function", {{"name", Str(tc, "name")}}}};
  } else {
    return Invalid("tool_choice.type", "must be auto, any, tool or none");
  }
  auto dp = tc.find("disable_parallel_tool_use");
  if (dp != tc.end() && !dp->is_null()) {
    if (!dp->is_boolean())
      return Invalid("tool_choice.disable_parallel_tool_use", "must be a boolean");
    (*chat)["parallel_tool_calls"] = !dp->get<bool>();
  }
  return std::nullopt;
}

json UsageOf(const Usage& u, int64_t pin_tokens) {
  // Anthropic's three input counts add up to the prompt: read from the
  // cache, written to it (the pinned prefix's tokens this request computed)
  // and the rest.
  const int64_t pinned = std::min(pin_tokens, u.prompt_tokens);
  const int64_t created = std::max<int64_t>(0, pinned - u.cached_tokens);
  return json{{"input_tokens", u.prompt_tokens - u.cached_tokens - created},
              {"cache_creation_input_tokens", created},
              {"cache_read_input_tokens", u.cached_tokens},
              {"output_tokens", u.completion_tokens}};
}

json InputOf(const std::string& arguments) {
  json input = json::parse(arguments, nullptr, /*allow_exceptions=*/false);
  return input.is_object() ? input : json::object();
}

std::string Event(const json& data) {
  return "event: " + data["type"].get<std::string>() + "\ndata: " + DumpJson(data) + "\n\n";
}

class AnthropicFormatter : public ChatFormatter {
 public:
  AnthropicFormatter(const ResponseMeta& meta, int64_t input_tokens, int64_t pin_tokens)
      : meta_(meta), input_tokens_(input_tokens), pin_tokens_(pin_tokens) {}

  void Begin(size_t, std::vector<std::string>* events) override {
    json message = {{"id", meta_.id},           {"type", "message"},
                    {"role", "assistant"},      {"model", meta_.model},
                    {"content", json::array()}, {"stop_reason", nullptr},
                    {"stop_sequence", nullptr}, {"usage", UsageOf(Usage{input_tokens_, 0, 0}, 0)}};
    events->push_back(Event({{"type", "message_start"}, {"message", std::move(message)}}));
  }

  void Delta(int64_t, const AssistantDelta& delta, size_t, const json&,
             std::vector<std::string>* events) override {
    if (!delta.reasoning.empty()) {
      Open("thinking", {{"type", "thinking"}, {"thinking", ""}, {"signature", ""}}, events);
      events->push_back(BlockDelta({{"type", "thinking_delta"}, {"thinking", delta.reasoning}}));
    }
    if (!delta.content.empty()) {
      Open("text", {{"type", "text"}, {"text", ""}}, events);
      events->push_back(BlockDelta({{"type", "text_delta"}, {"text", delta.content}}));
    }
    for (const ToolCall& call : delta.calls) {
      Open("tool_use",
           {{"type", "tool_use"}, {"id", call.id}, {"name", call.name}, {"input", json::object()}},
           events);
      events->push_back(
          BlockDelta({{"type", "input_json_delta"}, {"partial_json", call.arguments}}));
      Close(events);  // each call is its own block
    }
  }

  void Finish(int64_t, const std::string& finish_reason, std::vector<std::string>*) override {
    finish_reason_ = finish_reason;
  }

  void End(const Usage& usage, bool failed, std::vector<std::string>* events) override {
    if (failed) return;
    Close(events);
    json u = UsageOf(usage, pin_tokens_);
    events->push_back(
        Event({{"type", "message_delta"},
               {"delta",
                {{"stop_reason", AnthropicStopReason(finish_reason_)}, {"stop_sequence", nullptr}}},
               {"usage", std::move(u)}}));
    events->push_back(Event({{"type", "message_stop"}}));
  }

  std::string ErrorEvent(const ApiError& error) override {
    return "event: error\ndata: " + AnthropicErrorJson(error) + "\n\n";
  }

  json Body(const std::vector<ChoiceResult>& choices, const Usage& usage) override {
    json content = json::array();
    std::string finish = "stop";
    if (!choices.empty()) {
      const ChoiceResult& c = choices[0];
      finish = c.finish_reason;
      if (!c.reasoning.empty())
        content.push_back({{"type", "thinking"}, {"thinking", c.reasoning}, {"signature", ""}});
      if (!c.text.empty()) content.push_back({{"type", "text"}, {"text", c.text}});
      for (const ToolCall& call : c.tool_calls)
        content.push_back({{"type", "tool_use"},
                           {"id", call.id},
                           {"name", call.name},
                           {"input", InputOf(call.arguments)}});
    }
    return json{{"id", meta_.id},
                {"type", "message"},
                {"role", "assistant"},
                {"model", meta_.model},
                {"content", std::move(content)},
                {"stop_reason", AnthropicStopReason(finish)},
                {"stop_sequence", nullptr},
                {"usage", UsageOf(usage, pin_tokens_)}};
  }

  std::string ErrorBody(const ApiError& error) override { return AnthropicErrorJson(error); }

 private:
  void Open(const std::string& type, json block, std::vector<std::string>* events) {
    if (open_ == type && type != "tool_use") return;
    Close(events);
    open_ = type;
    events->push_back(Event(
        {{"type", "content_block_start"}, {"index", block_index_}, {"content_block", block}}));
  }
  void Close(std::vector<std::string>* events) {
    if (open_.empty()) return;
    events->push_back(Event({{"type", "content_block_stop"}, {"index", block_index_}}));
    open_.clear();
    ++block_index_;
  }
  std::string BlockDelta(json delta) {
    return Event({{"type", "content_block_delta"}, {"index", block_index_}, {"delta", delta}});
  }

  ResponseMeta meta_;
  int64_t input_tokens_ = 0;
  int64_t pin_tokens_ = 0;
  std::string open_;  // the open block's type; "" = none
  int64_t block_index_ = 0;
  std::string finish_reason_ = "stop";
};

}  // namespace

std::optional<ApiError> AnthropicToChatBody(const ojson& body, bool count_tokens, ojson* chat,
                                            AnthropicCacheControl* cache) {
  if (cache != nullptr) *cache = AnthropicCacheControl{};
  if (!body.is_object()) return BadRequest("request body must be a JSON object");
  *chat = ojson::object();
  // The Messages API has no logprobs: a client asking for them must hear so.
  for (const char* key : {"logprobs", "top_logprobs"}) {
    auto it = body.find(key);
    if (it != body.end() && !it->is_null() && *it != false && *it != 0)
      return Invalid(key, "is not supported on /v1/messages (use /v1/chat/completions)");
  }
  auto model = body.find("model");
  if (model != body.end() && !model->is_null()) {
    if (!model->is_string()) return Invalid("model", "must be a string");
    (*chat)["model"] = *model;
  }
  auto max_tokens = body.find("max_tokens");
  if (max_tokens != body.end() && !max_tokens->is_null()) {
    (*chat)["max_tokens"] = *max_tokens;  // the chat parser checks it
  } else if (!count_tokens) {
    return Invalid("max_tokens", "is required");
  }
  ojson messages = ojson::array();
  std::vector<Breakpoint> breakpoints;
  auto system = body.find("system");
  if (system != body.end() && !system->is_null()) {
    std::string text;
    if (auto err = TextOf(*system, "system", &text)) return err;
    messages.push_back({{"role", "system"}, {"content", text}});
    if (system->is_array())
      for (size_t i = 0; i < system->size(); ++i)
        if (auto err = NoteBreakpoint((*system)[i], "system[" + std::to_string(i) + "]", 1, 1,
                                      cache, &breakpoints))
          return err;
  }
  auto in = body.find("messages");
  if (in == body.end() || !in->is_array() || in->empty())
    return Invalid("messages", "must be a non-empty list of messages");
  for (size_t i = 0; i < in->size(); ++i) {
    const std::string f = "messages[" + std::to_string(i) + "]";
    if (auto err = ConvertMessage((*in)[i], f, &messages)) return err;
    // A breakpoint in a message covers the prompt through that message.
    auto content = (*in)[i].find("content");
    if (content != (*in)[i].end() && content->is_array())
      for (size_t j = 0; j < content->size(); ++j)
        if (auto err = NoteBreakpoint((*content)[j], f + ".content[" + std::to_string(j) + "]",
                                      2, messages.size(), cache, &breakpoints))
          return err;
  }
  (*chat)["messages"] = std::move(messages);
  // A final assistant message is a prefill the model continues (Anthropic's
  // semantics): vLLM's continue_final_message.
  const ojson& last = (*chat)["messages"].back();
  if (Str(last, "role") == "assistant" && last["content"].is_string() &&
      !last["content"].get_ref<const std::string&>().empty())
    (*chat)["continue_final_message"] = true;
  auto tools = body.find("tools");
  if (tools != body.end() && !tools->is_null()) {
    ojson converted;
    if (auto err = ConvertTools(*tools, &converted)) return err;
    // Templates print tools in or before the first message: a breakpoint on
    // a tool covers the prompt through the first message.
    for (size_t i = 0; i < tools->size(); ++i)
      if (auto err = NoteBreakpoint((*tools)[i], "tools[" + std::to_string(i) + "]", 0, 1, cache,
                                    &breakpoints))
        return err;
    (*chat)["tools"] = std::move(converted);
  }
  if (auto err = CheckBreakpoints(std::move(breakpoints))) return err;
  auto tc = body.find("tool_choice");
  if (tc != body.end() && !tc->is_null())
    if (auto err = ConvertToolChoice(*tc, chat)) return err;
  auto stop = body.find("stop_sequences");
  if (stop != body.end() && !stop->is_null()) {
    if (!stop->is_array()) return Invalid("stop_sequences", "must be a list of strings");
    for (size_t i = 0; i < stop->size(); ++i)
      if (!(*stop)[i].is_string())
        return Invalid("stop_sequences[" + std::to_string(i) + "]", "must be a string");
    (*chat)["stop"] = *stop;
  }
  for (const char* key : {"temperature", "top_p", "top_k", "stream"}) {
    auto it = body.find(key);
    if (it != body.end() && !it->is_null()) (*chat)[key] = *it;
  }
  auto temperature = body.find("temperature");
  if (temperature != body.end() && temperature->is_number() &&
      (temperature->get<double>() < 0.0 || temperature->get<double>() > 1.0))
    return Invalid("temperature", "must be in [0, 1]");
  auto metadata = body.find("metadata");
  if (metadata != body.end() && !metadata->is_null() && !metadata->is_object())
    return Invalid("metadata", "must be an object");
  auto thinking = body.find("thinking");
  if (thinking != body.end() && !thinking->is_null()) {
    if (!thinking->is_object()) return Invalid("thinking", "must be an object");
    const std::string type = Str(*thinking, "type");
    if (type != "enabled" && type != "disabled")
      return Invalid("thinking.type", "must be \"enabled\" or \"disabled\"");
    // Qwen3-style templates switch reasoning with enable_thinking.
    (*chat)["chat_template_kwargs"] = {{"enable_thinking", type == "enabled"}};
  }
  return std::nullopt;
}

std::unique_ptr<ChatFormatter> MakeAnthropicFormatter(const ResponseMeta& meta,
                                                      int64_t input_tokens, int64_t pin_tokens) {
  return std::make_unique<AnthropicFormatter>(meta, input_tokens, pin_tokens);
}

std::string AnthropicErrorJson(const ApiError& error) {
  const char* type = "api_error";
  switch (error.http_status) {
    case 400:
      type = "invalid_request_error";
      break;
    case 401:
      type = "authentication_error";
      break;
    case 403:
      type = "permission_error";
      break;
    case 404:
      type = "not_found_error";
      break;
    case 413:
      type = "request_too_large";
      break;
    case 429:
      type = "rate_limit_error";
      break;
    case 503:
      type = "overloaded_error";
      break;
    default:
      break;
  }
  return DumpJson(json{{"type", "error"}, {"error", {{"type", type}, {"message", error.message}}}});
}

const char* AnthropicStopReason(const std::string& finish_reason) {
  if (finish_reason == "length") return "max_tokens";
  if (finish_reason == "tool_calls") return "tool_use";
  return "end_turn";
}

}  // namespace kvfork::server
