#include "server/responses_api.h"

#include <random>
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

std::string ItemId(const char* prefix) {
  thread_local std::mt19937_64 rng(std::random_device{}());
  static const char* kHex = "0123456789abcdef";
  std::string id = prefix;
  for (int i = 0; i < 24; ++i) id += kHex[rng() & 15];
  return id;
}

// A message item's content: a string or parts with text.
std::optional<ApiError> ContentText(const ojson& content, const std::string& field,
                                    std::string* out) {
  out->clear();
  if (content.is_string()) {
    *out = content.get<std::string>();
    return std::nullopt;
  }
  if (!content.is_array()) return Invalid(field, "must be a string or a list of content parts");
  for (size_t i = 0; i < content.size(); ++i) {
    const std::string f = field + "[" + std::to_string(i) + "]";
    const ojson& part = content[i];
    if (!part.is_object()) return Invalid(f, "must be an object");
    const std::string type = Str(part, "type");
    if (type != "input_text" && type != "output_text" && type != "text")
      return Invalid(f + ".type", "= \"" + type +
                                      "\" is not supported (input_text, output_text): this "
                                      "server has text input only");
    if (!part.contains("text") || !part["text"].is_string())
      return Invalid(f + ".text", "must be a string");
    *out += part["text"].get<std::string>();
  }
  return std::nullopt;
}

// The assistant message function_call items attach to: the last message
// when it is the assistant's, else a new one.
ojson& AssistantFor(ojson* messages) {
  if (messages->empty() || Str(messages->back(), "role") != "assistant")
    messages->push_back({{"role", "assistant"}, {"content", ""}});
  return messages->back();
}

std::optional<ApiError> ConvertInput(const ojson& input, ojson* messages) {
  if (input.is_string()) {
    messages->push_back({{"role", "user"}, {"content", input.get<std::string>()}});
    return std::nullopt;
  }
  if (!input.is_array() || input.empty())
    return Invalid("input", "must be a string or a non-empty list of items");
  for (size_t i = 0; i < input.size(); ++i) {
    const std::string f = "input[" + std::to_string(i) + "]";
    const ojson& item = input[i];
    if (!item.is_object()) return Invalid(f, "must be an object");
    const std::string type = Str(item, "type", item.contains("role") ? "message" : "");
    if (type == "message") {
      const std::string role = Str(item, "role");
      if (role != "user" && role != "assistant" && role != "system" && role != "developer")
        return Invalid(f + ".role", "must be user, assistant, system or developer");
      auto content = item.find("content");
      if (content == item.end()) return Invalid(f + ".content", "is required");
      std::string text;
      if (auto err = ContentText(*content, f + ".content", &text)) return err;
      messages->push_back({{"role", role == "developer" ? "system" : role}, {"content", text}});
    } else if (type == "function_call") {
      for (const char* key : {"call_id", "name", "arguments"})
        if (!item.contains(key) || !item[key].is_string())
          return Invalid(f + "." + key, "must be a string");
      ojson& assistant = AssistantFor(messages);
      if (!assistant.contains("tool_calls")) assistant["tool_calls"] = ojson::array();
      // The arguments as the model wrote them: the template prints them back.
      assistant["tool_calls"].push_back(
          {{"id", item["call_id"]},
           {"type", "function"},
           {"function", {{"name", item["name"]}, {"arguments", item["arguments"]}}}});
    } else if (type == "function_call_output") {
      if (!item.contains("call_id") || !item["call_id"].is_string())
        return Invalid(f + ".call_id", "must be a string");
      auto output = item.find("output");
      if (output == item.end()) return Invalid(f + ".output", "is required");
      std::string text;
      if (auto err = ContentText(*output, f + ".output", &text)) return err;
      messages->push_back({{"role", "tool"}, {"tool_call_id", item["call_id"]}, {"content", text}});
    } else if (type == "reasoning") {
      // Earlier reasoning: templates drop it from past turns anyway.
    } else {
      return Invalid(f + ".type", "= \"" + type +
                                      "\" is not supported (message, function_call, "
                                      "function_call_output, reasoning)");
    }
  }
  return std::nullopt;
}

std::optional<ApiError> ConvertTools(const ojson& tools, ojson* out) {
  if (!tools.is_array()) return Invalid("tools", "must be a list");
  *out = ojson::array();
  for (size_t i = 0; i < tools.size(); ++i) {
    const std::string f = "tools[" + std::to_string(i) + "]";
    const ojson& t = tools[i];
    if (!t.is_object()) return Invalid(f, "must be an object");
    const std::string type = Str(t, "type");
    if (type != "function")
      return Invalid(f + ".type", "= \"" + type +
                                      "\" is not supported: only function tools run here "
                                      "(no hosted tools)");
    if (!t.contains("name") || !t["name"].is_string())
      return Invalid(f + ".name", "must be a string");
    ojson fn = {{"name", t["name"]}};
    if (t.contains("description") && t["description"].is_string())
      fn["description"] = t["description"];
    if (t.contains("parameters") && !t["parameters"].is_null()) fn["parameters"] = t["parameters"];
    out->push_back({{"type", "function"}, {"function", std::move(fn)}});
  }
  return std::nullopt;
}

// Fields that would change the output and are not implemented.
std::optional<ApiError> RejectUnsupported(const ojson& body) {
  auto present = [&body](const char* key) {
    auto it = body.find(key);
    return it != body.end() && !it->is_null();
  };
  auto text = body.find("text");
  if (text != body.end() && text->is_object()) {
    auto format = text->find("format");
    if (format != text->end() && !format->is_null()) {
      const std::string type = Str(*format, "type");
      if (type != "text" && type != "json_schema" && type != "json_object")
        return Invalid("text.format",
                       "type \"" + type + "\" is not one of text, json_schema, json_object");
    }
    auto verbosity = text->find("verbosity");
    if (verbosity != text->end() && !verbosity->is_null())
      return Invalid("text.verbosity", "is not supported");
  }
  if (present("background") && body["background"] != false)
    return Invalid("background", "is not supported: responses run in the foreground");
  if (present("truncation") && body["truncation"] != "disabled")
    return Invalid("truncation", "is not supported: only \"disabled\" (prompts are never cut)");
  if (present("include") && !(body["include"].is_array() && body["include"].empty()))
    return Invalid("include", "is not supported: no extra output data is available");
  if (present("top_logprobs") && body["top_logprobs"] != 0)
    return Invalid("top_logprobs", "is not supported on /v1/responses (use /v1/chat/completions)");
  if (present("logprobs") && body["logprobs"] != false)
    return Invalid("logprobs", "is not supported on /v1/responses (use /v1/chat/completions)");
  for (const char* key : {"prompt", "conversation", "max_tool_calls"})
    if (present(key)) return Invalid(key, "is not supported");
  return std::nullopt;
}

json UsageOf(const Usage& u) {
  return json{{"input_tokens", u.prompt_tokens},
              {"input_tokens_details", {{"cached_tokens", u.cached_tokens}}},
              {"output_tokens", u.completion_tokens},
              {"output_tokens_details", {{"reasoning_tokens", 0}}},
              {"total_tokens", u.prompt_tokens + u.completion_tokens}};
}

json ReasoningItem(const std::string& id, const std::string& text) {
  return json{{"id", id},
              {"type", "reasoning"},
              {"summary", json::array()},
              {"content", json::array({{{"type", "reasoning_text"}, {"text", text}}})}};
}

json TextPart(const std::string& text) {
  return json{{"type", "output_text"}, {"text", text}, {"annotations", json::array()}};
}

json MessageItem(const std::string& id, const std::string& status, json content) {
  return json{{"id", id},
              {"type", "message"},
              {"status", status},
              {"role", "assistant"},
              {"content", std::move(content)}};
}

json CallItem(const std::string& id, const ToolCall& call, const std::string& arguments,
              const std::string& status) {
  return json{{"id", id},           {"type", "function_call"}, {"status", status},
              {"call_id", call.id}, {"name", call.name},       {"arguments", arguments}};
}

class ResponsesFormatter : public ChatFormatter {
 public:
  ResponsesFormatter(const ResponseMeta& meta, ResponsesRequest request, ResponseStore* store,
                     std::string salt)
      : meta_(meta), request_(std::move(request)), store_(store), salt_(std::move(salt)) {}

  void Begin(size_t, std::vector<std::string>* events) override {
    json r = Response("in_progress", "", json::array(), nullptr);
    events->push_back(Event("response.created", {{"response", r}}));
    events->push_back(Event("response.in_progress", {{"response", r}}));
  }

  void Delta(int64_t, const AssistantDelta& delta, size_t, const json&,
             std::vector<std::string>* events) override {
    if (!delta.reasoning.empty()) {
      OpenItem("reasoning", events);
      text_ += delta.reasoning;
      reasoning_ += delta.reasoning;
      events->push_back(Event("response.reasoning_text.delta", {{"item_id", item_id_},
                                                                {"output_index", OutputIndex()},
                                                                {"content_index", 0},
                                                                {"delta", delta.reasoning}}));
    }
    if (!delta.content.empty()) {
      OpenItem("message", events);
      text_ += delta.content;
      content_ += delta.content;
      events->push_back(Event("response.output_text.delta", {{"item_id", item_id_},
                                                             {"output_index", OutputIndex()},
                                                             {"content_index", 0},
                                                             {"delta", delta.content},
                                                             {"logprobs", json::array()}}));
    }
    for (const ToolCall& call : delta.calls) {
      CloseItem(events);
      calls_.push_back(call);
      const std::string id = ItemId("fc_");
      const int64_t index = OutputIndex();
      events->push_back(
          Event("response.output_item.added",
                {{"output_index", index}, {"item", CallItem(id, call, "", "in_progress")}}));
      events->push_back(
          Event("response.function_call_arguments.delta",
                {{"item_id", id}, {"output_index", index}, {"delta", call.arguments}}));
      events->push_back(
          Event("response.function_call_arguments.done",
                {{"item_id", id}, {"output_index", index}, {"arguments", call.arguments}}));
      json item = CallItem(id, call, call.arguments, "completed");
      output_.push_back(item);
      events->push_back(
          Event("response.output_item.done", {{"output_index", index}, {"item", item}}));
    }
  }

  void Finish(int64_t, const std::string& finish_reason, std::vector<std::string>*) override {
    finish_reason_ = finish_reason;
  }

  void End(const Usage& usage, bool failed, std::vector<std::string>* events) override {
    if (failed) return;
    CloseItem(events);
    const bool incomplete = finish_reason_ == "length";
    json r = Finished(usage);
    events->push_back(Event(incomplete ? "response.incomplete" : "response.completed",
                            {{"response", std::move(r)}}));
  }

  std::string ErrorEvent(const ApiError& error) override {
    json e = {{"type", "error"},
              {"code", error.code.empty() ? json(nullptr) : json(error.code)},
              {"message", error.message},
              {"param", error.param.empty() ? json(nullptr) : json(error.param)},
              {"sequence_number", sequence_++}};
    return "event: error\ndata: " + DumpJson(e) + "\n\n";
  }

  json Body(const std::vector<ChoiceResult>& choices, const Usage& usage) override {
    if (!choices.empty()) {
      const ChoiceResult& c = choices[0];
      finish_reason_ = c.finish_reason;
      reasoning_ = c.reasoning;
      content_ = c.text;
      calls_ = c.tool_calls;
      if (!c.reasoning.empty()) output_.push_back(ReasoningItem(ItemId("rs_"), c.reasoning));
      if (!c.text.empty())
        output_.push_back(
            MessageItem(ItemId("msg_"), "completed", json::array({TextPart(c.text)})));
      for (const ToolCall& call : c.tool_calls)
        output_.push_back(CallItem(ItemId("fc_"), call, call.arguments, "completed"));
    }
    return Finished(usage);
  }

 private:
  int64_t OutputIndex() const { return static_cast<int64_t>(output_.size()); }

  std::string Event(const std::string& type, json data) {
    data["type"] = type;
    data["sequence_number"] = sequence_++;
    return "event: " + type + "\ndata: " + DumpJson(data) + "\n\n";
  }

  void OpenItem(const std::string& kind, std::vector<std::string>* events) {
    if (open_ == kind) return;
    CloseItem(events);
    open_ = kind;
    text_.clear();
    item_id_ = ItemId(kind == "message" ? "msg_" : "rs_");
    json item = kind == "message" ? MessageItem(item_id_, "in_progress", json::array())
                                  : json{{"id", item_id_},
                                         {"type", "reasoning"},
                                         {"summary", json::array()},
                                         {"content", json::array()}};
    events->push_back(
        Event("response.output_item.added", {{"output_index", OutputIndex()}, {"item", item}}));
    if (kind == "message")
      events->push_back(Event("response.content_part.added", {{"item_id", item_id_},
                                                              {"output_index", OutputIndex()},
                                                              {"content_index", 0},
                                                              {"part", TextPart("")}}));
  }

  void CloseItem(std::vector<std::string>* events) {
    if (open_.empty()) return;
    const int64_t index = OutputIndex();
    json item;
    if (open_ == "message") {
      events->push_back(Event(
          "response.output_text.done",
          {{"item_id", item_id_}, {"output_index", index}, {"content_index", 0}, {"text", text_}}));
      events->push_back(Event("response.content_part.done", {{"item_id", item_id_},
                                                             {"output_index", index},
                                                             {"content_index", 0},
                                                             {"part", TextPart(text_)}}));
      item = MessageItem(item_id_, "completed", json::array({TextPart(text_)}));
    } else {
      events->push_back(Event(
          "response.reasoning_text.done",
          {{"item_id", item_id_}, {"output_index", index}, {"content_index", 0}, {"text", text_}}));
      item = ReasoningItem(item_id_, text_);
    }
    output_.push_back(item);
    events->push_back(
        Event("response.output_item.done", {{"output_index", index}, {"item", std::move(item)}}));
    open_.clear();
  }

  json Response(const std::string& status, const std::string& incomplete_reason, json output,
                const json& usage) const {
    json r = {{"id", meta_.id},
              {"object", "response"},
              {"created_at", meta_.created},
              {"status", status},
              {"error", nullptr},
              {"incomplete_details",
               incomplete_reason.empty() ? json(nullptr) : json{{"reason", incomplete_reason}}},
              {"model", meta_.model},
              {"output", std::move(output)},
              {"usage", usage}};
    for (auto it = request_.echo.begin(); it != request_.echo.end(); ++it) r[it.key()] = it.value();
    return r;
  }

  // The final response object; stored when asked.
  json Finished(const Usage& usage) {
    const bool incomplete = finish_reason_ == "length";
    json r = Response(incomplete ? "incomplete" : "completed",
                      incomplete ? "max_output_tokens" : "", output_, UsageOf(usage));
    if (request_.store && store_ != nullptr) {
      StoredResponse stored;
      stored.messages = request_.conversation;
      // A continued prefill is replaced by the whole reply.
      if (request_.continues_final && !stored.messages.empty() &&
          Str(stored.messages.back(), "role") == "assistant")
        stored.messages.erase(stored.messages.size() - 1);
      ojson reply = {{"role", "assistant"}, {"content", content_}};
      if (!reasoning_.empty()) reply["reasoning_content"] = reasoning_;
      if (!calls_.empty()) {
        ojson calls = ojson::array();
        for (const ToolCall& c : calls_)
          calls.push_back({{"id", c.id},
                           {"type", "function"},
                           {"function", {{"name", c.name}, {"arguments", c.arguments}}}});
        reply["tool_calls"] = std::move(calls);
      }
      stored.messages.push_back(std::move(reply));
      stored.response = r;
      store_->Put(salt_, meta_.id, std::move(stored));
    }
    return r;
  }

  ResponseMeta meta_;
  ResponsesRequest request_;
  ResponseStore* store_;
  std::string salt_;
  int64_t sequence_ = 0;
  json output_ = json::array();  // finished output items
  std::string open_;             // "reasoning" | "message" | "" (none open)
  std::string item_id_;          // the open item's id
  std::string text_;             // the open item's text
  std::string reasoning_, content_;
  std::vector<ToolCall> calls_;
  std::string finish_reason_ = "stop";
};

}  // namespace

std::optional<ApiError> ResponsesToChatBody(const ojson& body, const ojson* previous,
                                            ResponsesRequest* out) {
  if (!body.is_object()) return BadRequest("request body must be a JSON object");
  if (auto err = RejectUnsupported(body)) return err;
  ojson& chat = out->chat_body;
  chat = ojson::object();
  json& echo = out->echo;
  echo = json::object();
  auto model = body.find("model");
  if (model != body.end() && !model->is_null()) {
    if (!model->is_string()) return Invalid("model", "must be a string");
    chat["model"] = *model;
  }
  ojson messages = ojson::array();
  std::string instructions;
  auto ins = body.find("instructions");
  if (ins != body.end() && !ins->is_null()) {
    if (!ins->is_string()) return Invalid("instructions", "must be a string");
    instructions = ins->get<std::string>();
    messages.push_back({{"role", "system"}, {"content", instructions}});
  }
  echo["instructions"] = instructions.empty() ? json(nullptr) : json(instructions);
  ojson conversation = previous != nullptr ? *previous : ojson::array();
  auto input = body.find("input");
  if (input == body.end() || input->is_null()) return Invalid("input", "is required");
  if (auto err = ConvertInput(*input, &conversation)) return err;
  for (const ojson& m : conversation) messages.push_back(m);
  out->conversation = std::move(conversation);
  chat["messages"] = std::move(messages);
  auto tools = body.find("tools");
  echo["tools"] = json::array();
  if (tools != body.end() && !tools->is_null()) {
    ojson converted;
    if (auto err = ConvertTools(*tools, &converted)) return err;
    chat["tools"] = std::move(converted);
    echo["tools"] = json::parse(tools->dump());
  }
  echo["tool_choice"] = "auto";
  auto tc = body.find("tool_choice");
  if (tc != body.end() && !tc->is_null()) {
    if (tc->is_object() && Str(*tc, "type") == "function") {
      chat["tool_choice"] = {{"type", "function"}, {"function", {{"name", Str(*tc, "name")}}}};
    } else {
      chat["tool_choice"] = *tc;  // the chat parser checks it and names tool_choice
    }
    echo["tool_choice"] = json::parse(tc->dump());
  }
  auto max_output = body.find("max_output_tokens");
  echo["max_output_tokens"] = nullptr;
  if (max_output != body.end() && !max_output->is_null()) {
    if (!max_output->is_number_integer() || max_output->get<int64_t>() < 1)
      return Invalid("max_output_tokens", "must be a positive integer");
    chat["max_tokens"] = *max_output;
    echo["max_output_tokens"] = max_output->get<int64_t>();
  }
  for (const char* key :
       {"temperature", "top_p", "stream", "parallel_tool_calls", "user", "top_k", "min_p", "seed",
        "stop", "logit_bias", "repetition_penalty", "presence_penalty", "frequency_penalty",
        "chat_template_kwargs", "continue_final_message", "cache_salt", "prompt_cache_key"}) {
    auto it = body.find(key);
    if (it != body.end() && !it->is_null()) chat[key] = *it;
  }
  echo["temperature"] =
      body.contains("temperature") ? json::parse(body["temperature"].dump()) : json(1.0);
  echo["top_p"] = body.contains("top_p") ? json::parse(body["top_p"].dump()) : json(1.0);
  auto ptc = body.find("parallel_tool_calls");
  echo["parallel_tool_calls"] = ptc == body.end() || *ptc != false;
  auto cfm = body.find("continue_final_message");
  out->continues_final = cfm != body.end() && *cfm == true;
  auto reasoning = body.find("reasoning");
  echo["reasoning"] = {{"effort", nullptr}, {"summary", nullptr}};
  if (reasoning != body.end() && !reasoning->is_null()) {
    if (!reasoning->is_object()) return Invalid("reasoning", "must be an object");
    auto effort = reasoning->find("effort");
    if (effort != reasoning->end() && !effort->is_null()) {
      chat["reasoning_effort"] = *effort;  // the chat parser checks the value
      echo["reasoning"]["effort"] = json::parse(effort->dump());
    }
  }
  auto store = body.find("store");
  if (store != body.end() && !store->is_null()) {
    if (!store->is_boolean()) return Invalid("store", "must be a boolean");
    out->store = store->get<bool>();
  }
  echo["store"] = out->store;
  auto metadata = body.find("metadata");
  echo["metadata"] = json::object();
  if (metadata != body.end() && !metadata->is_null()) {
    if (!metadata->is_object()) return Invalid("metadata", "must be an object");
    echo["metadata"] = json::parse(metadata->dump());
  }
  auto prev = body.find("previous_response_id");
  echo["previous_response_id"] =
      prev != body.end() && prev->is_string() ? json(prev->get<std::string>()) : json(nullptr);
  echo["text"] = {{"format", {{"type", "text"}}}};
  // text.format -> the chat's response_format (constrained decoding).
  auto text = body.find("text");
  if (text != body.end() && text->is_object() && text->contains("format") &&
      (*text)["format"].is_object()) {
    const ojson& format = (*text)["format"];
    const std::string type = Str(format, "type");
    if (type == "json_object") {
      chat["response_format"] = {{"type", "json_object"}};
    } else if (type == "json_schema") {
      ojson js = ojson::object();
      for (const char* key : {"name", "schema", "strict", "description"})
        if (format.contains(key)) js[key] = format[key];
      chat["response_format"] = {{"type", "json_schema"}, {"json_schema", std::move(js)}};
    }
    echo["text"] = {{"format", json::parse(format.dump())}};
  }
  echo["truncation"] = "disabled";
  return std::nullopt;
}

std::unique_ptr<ChatFormatter> MakeResponsesFormatter(const ResponseMeta& meta,
                                                      ResponsesRequest request,
                                                      ResponseStore* store, std::string salt) {
  return std::make_unique<ResponsesFormatter>(meta, std::move(request), store, std::move(salt));
}

}  // namespace kvfork::server
