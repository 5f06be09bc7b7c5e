#include "server/tool_call_parser.h"

#include <nlohmann/json.hpp>
#include <random>

namespace kvfork::server {
namespace {

using nlohmann::ordered_json;

constexpr std::string_view kHermesOpen = "<tool_call>";
constexpr std::string_view kHermesClose = "</tool_call>";
constexpr std::string_view kPythonTag = "<|python_tag|>";
constexpr std::string_view kMistralMarker = "[TOOL_CALLS]";

std::string CallId() {
  thread_local std::mt19937_64 rng(std::random_device{}());
  static const char* kHex = "0123456789abcdef";
  std::string id = "call_";
  for (int i = 0; i < 24; ++i) id += kHex[rng() & 15];
  return id;
}

bool IsSpace(char c) { return c == ' ' || c == '\n' || c == '\t' || c == '\r'; }

std::string_view Trim(std::string_view s) {
  while (!s.empty() && IsSpace(s.front())) s.remove_prefix(1);
  while (!s.empty() && IsSpace(s.back())) s.remove_suffix(1);
  return s;
}

// Bytes at the end of text that could be the start of marker: they are held
// back until the next text shows whether the marker follows.
size_t PartialMarkerSuffix(std::string_view text, std::string_view marker) {
  const size_t longest = std::min(text.size(), marker.size() - 1);
  for (size_t n = longest; n > 0; --n)
    if (text.substr(text.size() - n) == marker.substr(0, n)) return n;
  return 0;
}

// Where the JSON value starting at text[0] ends (one past its last byte);
// text is known to be valid JSON.
size_t ValueEnd(std::string_view text);

// The text of a top-level member's value of a valid JSON object's text, as
// written ("" if absent). Arguments keep the model's own spelling, so the
// next turn's template prints them back byte for byte and the prefix cache
// reuses the whole turn (a re-serialization would change the spacing).
std::string_view RawMember(std::string_view object, std::string_view key) {
  size_t i = 1;  // past '{'
  auto skip_space = [&] {
    while (i < object.size() && IsSpace(object[i])) ++i;
  };
  for (;;) {
    skip_space();
    if (i >= object.size() || object[i] != '"') return {};
    const size_t key_end = ValueEnd(object.substr(i));
    if (key_end == std::string_view::npos) return {};
    const std::string_view k = object.substr(i + 1, key_end - 2);
    i += key_end;
    skip_space();
    if (i >= object.size() || object[i] != ':') return {};
    ++i;
    skip_space();
    const size_t value_end = ValueEnd(object.substr(i));
    if (value_end == std::string_view::npos) return {};
    if (k == key) return object.substr(i, value_end);
    i += value_end;
    skip_space();
    if (i >= object.size() || object[i] != ',') return {};
    ++i;
  }
}

// {"name": ..., "arguments" | "parameters": {...} | "..."} -> a call; text
// is the object's JSON text.
std::optional<ToolCall> CallOfObject(const ordered_json& obj, std::string_view text) {
  if (!obj.is_object()) return std::nullopt;
  auto name = obj.find("name");
  if (name == obj.end() || !name->is_string() || name->get_ref<const std::string&>().empty())
    return std::nullopt;
  ToolCall call;
  call.id = CallId();
  call.name = name->get<std::string>();
  auto args = obj.find("arguments");
  if (args == obj.end()) args = obj.find("parameters");
  if (args == obj.end() || args->is_null()) {
    call.arguments = "{}";
  } else if (args->is_string()) {
    call.arguments = args->get<std::string>();  // some models write the JSON text already
  } else {
    const std::string_view raw = RawMember(Trim(text), args.key());
    call.arguments = !raw.empty()
                         ? std::string(raw)
                         : args->dump(-1, ' ', false, ordered_json::error_handler_t::replace);
  }
  return call;
}

std::optional<ordered_json> ParseJson(std::string_view text) {
  ordered_json j =
      ordered_json::parse(text.begin(), text.end(), nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return std::nullopt;
  return j;
}

// Where the JSON object or array starting at text[0] ends (one past its last
// byte), by bracket depth outside strings; npos when it does not end.
size_t JsonValueEnd(std::string_view text) {
  int depth = 0;
  bool in_string = false, escaped = false;
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (in_string) {
      if (escaped)
        escaped = false;
      else if (c == '\\')
        escaped = true;
      else if (c == '"')
        in_string = false;
      continue;
    }
    if (c == '"')
      in_string = true;
    else if (c == '{' || c == '[')
      ++depth;
    else if (c == '}' || c == ']') {
      if (--depth == 0) return i + 1;
    }
  }
  return std::string_view::npos;
}

size_t ValueEnd(std::string_view text) {
  if (text.empty()) return std::string_view::npos;
  if (text[0] == '{' || text[0] == '[') return JsonValueEnd(text);
  if (text[0] == '"') {
    for (size_t i = 1; i < text.size(); ++i) {
      if (text[i] == '\\')
        ++i;
      else if (text[i] == '"')
        return i + 1;
    }
    return std::string_view::npos;
  }
  size_t i = 0;  // number, true, false, null
  while (i < text.size() && text[i] != ',' && text[i] != '}' && text[i] != ']' && !IsSpace(text[i]))
    ++i;
  return i;
}

// A whole reply of llama3_json or mistral calls; nullopt unless all of it is calls.
std::optional<std::vector<ToolCall>> ParseWholeReply(ToolCallFormat format, std::string_view text) {
  text = Trim(text);
  const std::string_view marker = format == ToolCallFormat::kMistral ? kMistralMarker : kPythonTag;
  if (text.substr(0, marker.size()) == marker) text = Trim(text.substr(marker.size()));
  std::vector<ToolCall> calls;
  while (!text.empty()) {
    const size_t end = JsonValueEnd(text);
    if (end == std::string_view::npos) return std::nullopt;
    std::optional<ordered_json> value = ParseJson(text.substr(0, end));
    if (!value) return std::nullopt;
    if (value->is_array()) {
      for (const ordered_json& item : *value) {
        std::optional<ToolCall> call = CallOfObject(item, item.dump());
        if (!call) return std::nullopt;
        calls.push_back(std::move(*call));
      }
    } else {
      std::optional<ToolCall> call = CallOfObject(*value, text.substr(0, end));
      if (!call) return std::nullopt;
      calls.push_back(std::move(*call));
    }
    text = Trim(text.substr(end));
    if (!text.empty() && text.front() == ';') text = Trim(text.substr(1));
  }
  if (calls.empty()) return std::nullopt;
  return calls;
}

}  // namespace

std::optional<ToolCallFormat> ParseToolCallFormat(std::string_view name) {
  if (name == "hermes") return ToolCallFormat::kHermes;
  if (name == "llama3_json") return ToolCallFormat::kLlama3Json;
  if (name == "mistral") return ToolCallFormat::kMistral;
  if (name == "none") return ToolCallFormat::kNone;
  return std::nullopt;
}

const char* ToolCallFormatName(ToolCallFormat format) {
  switch (format) {
    case ToolCallFormat::kHermes:
      return "hermes";
    case ToolCallFormat::kLlama3Json:
      return "llama3_json";
    case ToolCallFormat::kMistral:
      return "mistral";
    case ToolCallFormat::kNone:
      break;
  }
  return "none";
}

ToolCallFormat DetectToolCallFormat(std::string_view source) {
  if (source.find(kHermesOpen) != std::string_view::npos) return ToolCallFormat::kHermes;
  if (source.find(kMistralMarker) != std::string_view::npos) return ToolCallFormat::kMistral;
  // Llama 3.1/3.2's template asks for {"name": ..., "parameters": ...} and
  // names the ipython role; 3.1 also prints <|python_tag|>.
  if (source.find(kPythonTag) != std::string_view::npos ||
      (source.find("ipython") != std::string_view::npos &&
       source.find("\"parameters\"") != std::string_view::npos))
    return ToolCallFormat::kLlama3Json;
  return ToolCallFormat::kNone;
}

ToolCallStreamParser::ToolCallStreamParser(ToolCallFormat format, size_t max_calls)
    : format_(format),
      max_calls_(max_calls),
      state_(format == ToolCallFormat::kHermes || format == ToolCallFormat::kNone
                 ? State::kContent
                 : State::kUndecided) {}

void ToolCallStreamParser::EmitCalls(std::vector<ToolCall> calls, ToolCallOutput* out) {
  for (ToolCall& call : calls) {
    if (calls_emitted_ >= max_calls_) return;
    ++calls_emitted_;
    out->calls.push_back(std::move(call));
  }
}

void ToolCallStreamParser::Step(ToolCallOutput* out) {
  for (;;) {
    switch (state_) {
      case State::kContent: {
        if (format_ != ToolCallFormat::kHermes) {
          out->content += pending_;
          pending_.clear();
          return;
        }
        const size_t open = pending_.find(kHermesOpen);
        if (open == std::string::npos) {
          const size_t keep = PartialMarkerSuffix(pending_, kHermesOpen);
          out->content += pending_.substr(0, pending_.size() - keep);
          pending_.erase(0, pending_.size() - keep);
          return;
        }
        out->content += pending_.substr(0, open);
        pending_.erase(0, open + kHermesOpen.size());
        state_ = State::kInCall;
        in_call_scanned_ = 0;
        break;
      }
      case State::kInCall: {
        // Search only where the closing tag can newly end: O(text) per call.
        const size_t from = in_call_scanned_ >= kHermesClose.size() - 1
                                ? in_call_scanned_ - (kHermesClose.size() - 1)
                                : 0;
        const size_t close = pending_.find(kHermesClose, from);
        if (close == std::string::npos) {
          in_call_scanned_ = pending_.size();
          return;
        }
        in_call_scanned_ = 0;
        const std::string body = pending_.substr(0, close);
        pending_.erase(0, close + kHermesClose.size());
        state_ = State::kContent;
        std::optional<ordered_json> value = ParseJson(Trim(body));
        std::optional<ToolCall> call = value ? CallOfObject(*value, body) : std::nullopt;
        if (call) {
          EmitCalls({std::move(*call)}, out);
        } else {
          out->content += std::string(kHermesOpen) + body + std::string(kHermesClose);
        }
        break;
      }
      case State::kUndecided: {
        const std::string_view start = Trim(pending_);
        if (start.empty()) return;
        const std::string_view marker =
            format_ == ToolCallFormat::kMistral ? kMistralMarker : kPythonTag;
        const char opener = format_ == ToolCallFormat::kMistral ? '[' : '{';
        const bool marker_prefix = start.size() < marker.size()
                                       ? marker.substr(0, start.size()) == start
                                       : start.substr(0, marker.size()) == marker;
        if (marker_prefix || start.front() == opener ||
            (format_ == ToolCallFormat::kMistral && start.front() == '{')) {
          state_ = State::kWholeReplyCall;
        } else {
          state_ = State::kContent;
        }
        break;
      }
      case State::kWholeReplyCall:
        return;  // decided at Finish
    }
  }
}

ToolCallOutput ToolCallStreamParser::Feed(std::string_view text) {
  ToolCallOutput out;
  pending_.append(text);
  Step(&out);
  return out;
}

ToolCallOutput ToolCallStreamParser::Finish() {
  ToolCallOutput out;
  Step(&out);
  switch (state_) {
    case State::kInCall: {
      // Cut short (max_tokens, or a stop string such as "</tool_call>" that
      // is left out of the text): a body that parses is still the call.
      std::optional<ordered_json> value = ParseJson(Trim(pending_));
      std::optional<ToolCall> call = value ? CallOfObject(*value, pending_) : std::nullopt;
      if (call) {
        EmitCalls({std::move(*call)}, &out);
      } else {
        out.content += std::string(kHermesOpen) + pending_;
      }
      break;
    }
    case State::kWholeReplyCall: {
      std::optional<std::vector<ToolCall>> calls = ParseWholeReply(format_, pending_);
      if (calls) {
        EmitCalls(std::move(*calls), &out);
      } else {
        out.content += pending_;
      }
      break;
    }
    case State::kContent:
    case State::kUndecided:
      out.content += pending_;
      break;
  }
  pending_.clear();
  state_ = State::kContent;
  return out;
}

ToolCallOutput ParseToolCalls(ToolCallFormat format, std::string_view text, size_t max_calls) {
  ToolCallStreamParser parser(format, max_calls);
  ToolCallOutput out = parser.Feed(text);
  ToolCallOutput rest = parser.Finish();
  out.content += rest.content;
  for (ToolCall& c : rest.calls) out.calls.push_back(std::move(c));
  return out;
}

}  // namespace kvfork::server
