#include "server/unsupported_fields.h"

#include <functional>
#include <string>
#include <unordered_map>
#include <vector>

namespace kvfork::server {
namespace {

using nlohmann::ordered_json;

enum Where { kChatOnly = 1, kCompletionOnly = 2, kBoth = 3 };

struct Unsupported {
  const char* field;
  Where where;
  // True when the value asks for nothing beyond what the server does anyway.
  std::function<bool(const ordered_json&)> harmless;
  const char* why;  // completes "'field' is not supported: ..."
};

bool IsNull(const ordered_json& v) { return v.is_null(); }
bool NullOrFalse(const ordered_json& v) { return v.is_null() || v == false; }
bool NullOrTrue(const ordered_json& v) { return v.is_null() || v == true; }
bool NullOrEmpty(const ordered_json& v) {
  // json::empty() is false for every string; look at the string itself.
  if (v.is_string()) return v.get_ref<const std::string&>().empty();
  return v.is_null() || ((v.is_array() || v.is_object()) && v.empty());
}

const std::vector<Unsupported>& Table() {
  static const std::vector<Unsupported> table = {
      // OpenAI
      {"suffix", kCompletionOnly, NullOrEmpty, "text after the insertion point is not implemented"},
      {"echo", kChatOnly, NullOrFalse,
       "chat completions do not echo the prompt (use /v1/completions)"},
      {"functions", kChatOnly, IsNull, "use 'tools'"},
      {"function_call", kChatOnly, IsNull, "use 'tools'"},
      {"audio", kChatOnly, IsNull, "this server has no audio output"},
      {"modalities", kChatOnly,
       [](const ordered_json& v) { return v.is_null() || v == ordered_json::array({"text"}); },
       "only [\"text\"]"},
      {"prediction", kChatOnly, IsNull, "predicted outputs are not implemented"},
      {"web_search_options", kChatOnly, IsNull, "this server does not search the web"},
      {"verbosity", kChatOnly, IsNull, "not implemented"},
      // vLLM
      {"use_beam_search", kBoth, NullOrFalse, "beam search is not implemented"},
      {"length_penalty", kBoth,
       [](const ordered_json& v) { return v.is_null() || v == 1 || v == 1.0; },
       "only used by beam search, which is not implemented"},
      {"early_stopping", kBoth, NullOrFalse, "only used by beam search, which is not implemented"},
      {"skip_special_tokens", kBoth, NullOrTrue, "special tokens are always left out of the text"},
      {"truncate_prompt_tokens", kBoth, IsNull, "prompts are never truncated"},
      {"allowed_token_ids", kBoth, IsNull, "use 'logit_bias'"},
      {"bad_words", kBoth, NullOrEmpty, "not implemented"},
      {"logits_processors", kBoth, NullOrEmpty, "not implemented"},
      // Structured output (structured_output.h) has one backend, kvfork's own.
      {"guided_decoding_backend", kBoth,
       [](const ordered_json& v) { return v.is_null() || v.is_string(); }, "must be a string"},
      {"guided_whitespace_pattern", kBoth, IsNull,
       "JSON whitespace is fixed (a space, or a newline and up to 20 spaces or tabs)"},
      {"return_token_ids", kBoth, NullOrFalse, "not implemented"},
      {"chat_template", kChatOnly, IsNull, "the model directory's chat template is always used"},
      {"documents", kChatOnly, IsNull, "not implemented"},
      {"mm_processor_kwargs", kChatOnly, IsNull, "this server has no multimodal input"},
      {"priority", kBoth, [](const ordered_json& v) { return v.is_null() || v == 0; },
       "requests are scheduled first come, first served"},
      {"kv_transfer_params", kBoth, IsNull, "not implemented"},
      {"vllm_xargs", kBoth, IsNull, "not implemented"},
  };
  return table;
}

}  // namespace

std::optional<ApiError> RejectUnsupportedFields(Endpoint endpoint, const ordered_json& body) {
  const Where here = endpoint == Endpoint::kChat ? kChatOnly : kCompletionOnly;
  // One pass over the body's members (a body may hold many), each looked up.
  static const std::unordered_map<std::string, const Unsupported*> by_name = [] {
    std::unordered_map<std::string, const Unsupported*> m;
    for (const Unsupported& u : Table()) m[u.field] = &u;
    return m;
  }();
  for (auto it = body.begin(); it != body.end(); ++it) {
    auto found = by_name.find(it.key());
    if (found == by_name.end()) continue;
    const Unsupported& u = *found->second;
    if ((u.where & here) == 0 || u.harmless(it.value())) continue;
    std::string shown = it.value().dump(-1, ' ', false, ordered_json::error_handler_t::replace);
    if (shown.size() > 80) shown = shown.substr(0, 77) + "...";
    return InvalidField(it.key(), "'" + it.key() + "' = " + shown + " is not supported: " + u.why);
  }
  // stream_options.continuous_usage_stats (vLLM): usage in every chunk.
  auto so = body.find("stream_options");
  if (so != body.end() && so->is_object()) {
    auto cus = so->find("continuous_usage_stats");
    if (cus != so->end() && !NullOrFalse(*cus))
      return InvalidField("stream_options.continuous_usage_stats",
                          "'stream_options.continuous_usage_stats' is not supported: usage comes "
                          "in the last chunk (include_usage)");
  }
  return std::nullopt;
}

}  // namespace kvfork::server
