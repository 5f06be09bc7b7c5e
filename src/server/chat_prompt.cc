#include "server/chat_prompt.h"

#include <utility>

#include "tokenizer/chat_template.h"
#include "tokenizer/special_token_shield.h"
#include "tokenizer/tokenizer.h"

namespace kvfork::server {

using nlohmann::ordered_json;

std::optional<SpecialTokensInContent> ParseSpecialTokensInContent(std::string_view name) {
  if (name == "text") return SpecialTokensInContent::kText;
  if (name == "allow") return SpecialTokensInContent::kAllow;
  return std::nullopt;
}

std::optional<ApiError> RenderChatPrompt(const Tokenizer& tokenizer, const ChatTemplate* tmpl,
                                         SpecialTokensInContent mode, const ChatInput& input,
                                         ChatPrompt* out) {
  if (tmpl == nullptr)
    return BadRequest("this model has no chat template; use /v1/completions", "no_chat_template");
  // Everything the request supplies goes through the shield; bos_token and
  // eos_token are the model's own and are added after it.
  ordered_json ctx =
      input.chat_template_kwargs.is_object() ? input.chat_template_kwargs : ordered_json::object();
  ctx["messages"] = input.messages;
  if (input.tools.is_array()) ctx["tools"] = input.tools;
  if (!input.reasoning_effort.empty()) ctx["reasoning_effort"] = input.reasoning_effort;
  SpecialTokenShield shield(tokenizer);
  if (mode == SpecialTokensInContent::kText) shield.Shield(&ctx);
  ctx["add_generation_prompt"] = input.add_generation_prompt;
  ctx["bos_token"] = tokenizer.bos_token();
  ctx["eos_token"] = tokenizer.eos_token();
  StatusOr<std::string> rendered = tmpl->RenderOrdered(ctx);
  if (!rendered.ok()) return FromStatus(rendered.status().WithContext("chat template"), "messages");
  std::string text = std::move(rendered).value();
  if (input.continue_final_message) {
    // The shielded content, as the template saw and printed it.
    const ordered_json& last = ctx["messages"].back();
    auto content = last.find("content");
    const std::string final_content =
        content != last.end() && content->is_string() ? content->get<std::string>() : "";
    StatusOr<std::string> cut = CutAfterFinalMessage(text, final_content);
    if (!cut.ok()) return InvalidField("continue_final_message", cut.status().message());
    text = std::move(cut).value();
  }
  out->plain.clear();
  out->text =
      mode == SpecialTokensInContent::kText ? shield.Restore(text, &out->plain) : std::move(text);
  return std::nullopt;
}

std::vector<int32_t> EncodeChatPrompt(const Tokenizer& tokenizer, const ChatPrompt& prompt,
                                      bool add_special) {
  return tokenizer.Encode(prompt.text, add_special, prompt.plain);
}

}  // namespace kvfork::server
