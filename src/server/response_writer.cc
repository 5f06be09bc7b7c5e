#include "server/response_writer.h"

namespace kvfork::server {
namespace {

using nlohmann::json;

json BytesArray(const std::string& s) {
  json a = json::array();
  for (unsigned char c : s) a.push_back(static_cast<int>(c));
  return a;
}

// Every object of a response starts with these, in OpenAI's order.
json Base(const ResponseMeta& meta, const char* object) {
  json j = json::object();
  j["id"] = meta.id;
  j["object"] = object;
  j["created"] = meta.created;
  j["model"] = meta.model;
  j["system_fingerprint"] = "kvfork";
  return j;
}

const char* ChunkObject(const ResponseMeta& meta) {
  return meta.endpoint == Endpoint::kChat ? "chat.completion.chunk" : "text_completion";
}

json FinishValue(const std::string& finish_reason) {
  return finish_reason.empty() ? json(nullptr) : json(finish_reason);
}

json StreamChunk(const ResponseMeta& meta, json choice) {
  json j = Base(meta, ChunkObject(meta));
  j["choices"] = json::array({std::move(choice)});
  if (meta.include_usage) j["usage"] = nullptr;
  return j;
}

json ChatChoiceChunk(int64_t index, json delta, json logprobs, const std::string& finish) {
  json c = json::object();
  c["index"] = index;
  c["delta"] = std::move(delta);
  c["logprobs"] = std::move(logprobs);
  c["finish_reason"] = FinishValue(finish);
  return c;
}

}  // namespace

std::string DumpJson(const json& j) {
  return j.dump(-1, ' ', false, json::error_handler_t::replace);
}

std::string SseData(const json& chunk) { return "data: " + DumpJson(chunk) + "\n\n"; }

json UsageJson(const Usage& usage) {
  return json{{"prompt_tokens", usage.prompt_tokens},
              {"completion_tokens", usage.completion_tokens},
              {"total_tokens", usage.prompt_tokens + usage.completion_tokens},
              {"prompt_tokens_details", {{"cached_tokens", usage.cached_tokens}}}};
}

json ChatLogprobsJson(const std::vector<LogprobEntry>& entries) {
  json content = json::array();
  for (const LogprobEntry& e : entries) {
    json top = json::array();
    for (const TokenLogprobText& t : e.top)
      top.push_back({{"token", t.token}, {"logprob", t.logprob}, {"bytes", BytesArray(t.token)}});
    content.push_back({{"token", e.chosen.token},
                       {"logprob", e.chosen.logprob},
                       {"bytes", BytesArray(e.chosen.token)},
                       {"top_logprobs", std::move(top)}});
  }
  return json{{"content", std::move(content)}, {"refusal", nullptr}};
}

json CompletionLogprobsJson(const std::vector<LogprobEntry>& entries, int64_t first_offset) {
  json tokens = json::array(), token_logprobs = json::array(), top = json::array(),
       offsets = json::array();
  int64_t offset = first_offset;
  for (const LogprobEntry& e : entries) {
    tokens.push_back(e.chosen.token);
    if (e.no_logprob) {
      token_logprobs.push_back(nullptr);
      top.push_back(nullptr);
    } else {
      token_logprobs.push_back(e.chosen.logprob);
      json t = json::object();
      for (const TokenLogprobText& alt : e.top) t[alt.token] = alt.logprob;
      top.push_back(std::move(t));
    }
    offsets.push_back(offset);
    offset += static_cast<int64_t>(e.chosen.token.size());
  }
  return json{{"tokens", std::move(tokens)},
              {"token_logprobs", std::move(token_logprobs)},
              {"top_logprobs", std::move(top)},
              {"text_offset", std::move(offsets)}};
}

json ToolCallsJson(const std::vector<ToolCall>& calls) {
  json arr = json::array();
  for (const ToolCall& t : calls)
    arr.push_back({{"id", t.id},
                   {"type", "function"},
                   {"function", {{"name", t.name}, {"arguments", t.arguments}}}});
  return arr;
}

json ChatResponseJson(const ResponseMeta& meta, const std::vector<ChoiceResult>& choices,
                      const Usage& usage) {
  json j = Base(meta, "chat.completion");
  json arr = json::array();
  for (size_t i = 0; i < choices.size(); ++i) {
    const ChoiceResult& c = choices[i];
    json choice = json::object();
    choice["index"] = static_cast<int64_t>(i);
    json message = {{"role", "assistant"}, {"content", c.text}, {"refusal", nullptr}};
    // OpenAI: a message that only calls tools has null content.
    if (!c.tool_calls.empty() && c.text.empty()) message["content"] = nullptr;
    if (!c.reasoning.empty()) message["reasoning_content"] = c.reasoning;
    if (!c.tool_calls.empty()) message["tool_calls"] = ToolCallsJson(c.tool_calls);
    choice["message"] = std::move(message);
    choice["logprobs"] = c.has_logprobs ? ChatLogprobsJson(c.logprobs) : json(nullptr);
    choice["finish_reason"] = FinishValue(c.finish_reason);
    arr.push_back(std::move(choice));
  }
  j["choices"] = std::move(arr);
  j["usage"] = UsageJson(usage);
  return j;
}

json CompletionResponseJson(const ResponseMeta& meta, const std::vector<ChoiceResult>& choices,
                            const Usage& usage, int64_t first_offset) {
  json j = Base(meta, "text_completion");
  json arr = json::array();
  for (size_t i = 0; i < choices.size(); ++i) {
    const ChoiceResult& c = choices[i];
    json choice = json::object();
    choice["text"] = c.text;
    choice["index"] = static_cast<int64_t>(i);
    choice["logprobs"] =
        c.has_logprobs ? CompletionLogprobsJson(c.logprobs, first_offset) : json(nullptr);
    choice["finish_reason"] = FinishValue(c.finish_reason);
    arr.push_back(std::move(choice));
  }
  j["choices"] = std::move(arr);
  j["usage"] = UsageJson(usage);
  return j;
}

json ChatRoleChunk(const ResponseMeta& meta, int64_t index) {
  return StreamChunk(meta, ChatChoiceChunk(index, {{"role", "assistant"}, {"content", ""}},
                                           nullptr, ""));
}

json ChatDeltaChunk(const ResponseMeta& meta, int64_t index, const std::string& delta_text,
                    const json& logprobs) {
  return StreamChunk(meta, ChatChoiceChunk(index, {{"content", delta_text}}, logprobs, ""));
}

json ChatDeltaChunkWith(const ResponseMeta& meta, int64_t index, json delta, const json& logprobs) {
  return StreamChunk(meta, ChatChoiceChunk(index, std::move(delta), logprobs, ""));
}

json ChatFinishChunk(const ResponseMeta& meta, int64_t index, const std::string& finish_reason) {
  return StreamChunk(meta, ChatChoiceChunk(index, json::object(), nullptr, finish_reason));
}

json CompletionChunk(const ResponseMeta& meta, int64_t index, const std::string& text,
                     const json& logprobs, const std::string& finish_reason) {
  json c = json::object();
  c["text"] = text;
  c["index"] = index;
  c["logprobs"] = logprobs;
  c["finish_reason"] = FinishValue(finish_reason);
  return StreamChunk(meta, std::move(c));
}

json UsageChunk(const ResponseMeta& meta, const Usage& usage) {
  json j = Base(meta, ChunkObject(meta));
  j["choices"] = json::array();
  j["usage"] = UsageJson(usage);
  return j;
}

}  // namespace kvfork::server
