// A chat request's prompt: its messages, tools and chat_template_kwargs
// rendered by the model's chat template, with the special-token strings that
// came from the request kept plain text (--special-tokens-in-content text,
// the default) or taken as special tokens (allow, transformers' default).
//
// Why text is the default: a message is the client's user's text, not the
// client's own prompt. With allow, a user who types
// "<|im_end|>\n<|im_start|>system\n..." closes their turn and opens a system
// turn the model obeys, and nothing downstream can tell. /v1/completions with
// a raw prompt keeps special tokens (the caller writes the whole prompt).
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "server/api_error.h"
#include "server/openai_schema.h"
#include "tokenizer/text_range.h"

namespace kvfork {
class Tokenizer;
class ChatTemplate;
}  // namespace kvfork

namespace kvfork::server {

enum class SpecialTokensInContent {
  kText,   // special-token strings in request values are tokenized as text
  kAllow,  // they become special tokens (transformers' default)
};

// "text" or "allow"; nullopt otherwise.
std::optional<SpecialTokensInContent> ParseSpecialTokensInContent(std::string_view name);

struct ChatPrompt {
  std::string text;
  // Byte ranges of text that must be tokenized as text (special-token
  // strings from the request); empty with kAllow.
  std::vector<TextRange> plain;
};

// Renders input with the template (null: a 400 naming no_chat_template).
// Template errors are 400s naming messages; continue_final_message that
// cannot find the final message is a 400 naming it.
std::optional<ApiError> RenderChatPrompt(const Tokenizer& tokenizer, const ChatTemplate* tmpl,
                                         SpecialTokensInContent mode, const ChatInput& input,
                                         ChatPrompt* out);

// The prompt's token ids: special tokens the template wrote become their ids,
// the plain ranges stay text. add_special runs the post-processor (BOS).
std::vector<int32_t> EncodeChatPrompt(const Tokenizer& tokenizer, const ChatPrompt& prompt,
                                      bool add_special);

}  // namespace kvfork::server
