#include "tokenizer/chat_template.h"

#include "tokenizer/jinja_interpreter.h"
#include "tokenizer/jinja_parser.h"
#include "tokenizer/jinja_pystr.h"

namespace kvfork {

struct ChatTemplate::Impl {
  jinja::Template tmpl;
};

ChatTemplate::ChatTemplate(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
ChatTemplate::~ChatTemplate() = default;
ChatTemplate::ChatTemplate(ChatTemplate&&) noexcept = default;
ChatTemplate& ChatTemplate::operator=(ChatTemplate&&) noexcept = default;

StatusOr<ChatTemplate> ChatTemplate::Parse(const std::string& source) {
  auto impl = std::make_unique<Impl>();
  KVFORK_ASSIGN_OR_RETURN(impl->tmpl, jinja::ParseTemplate(source));
  KVFORK_RETURN_IF_ERROR(jinja::CheckNames(impl->tmpl));
  return ChatTemplate(std::move(impl));
}

StatusOr<std::string> ChatTemplate::Render(const nlohmann::json& context) const {
  jinja::RenderOptions options;
  options.now = std::time(nullptr);
  return jinja::Render(impl_->tmpl, jinja::FromJson(context), options);
}

StatusOr<std::string> ChatTemplate::RenderOrdered(const nlohmann::ordered_json& context) const {
  return RenderAt(context, std::time(nullptr));
}

StatusOr<std::string> ChatTemplate::RenderAt(const nlohmann::ordered_json& context,
                                             std::time_t now) const {
  jinja::RenderOptions options;
  options.now = now;
  return jinja::Render(impl_->tmpl, jinja::FromJson(context), options);
}

StatusOr<std::string> CutAfterFinalMessage(std::string_view rendered,
                                           std::string_view final_content) {
  const std::string stripped = jinja::PyStrip(final_content, std::nullopt, true, true);
  const size_t at = rendered.rfind(stripped);
  if (at == std::string_view::npos)
    return InvalidArgumentError(
        "continue_final_message: the final message does not appear in the rendered chat (the "
        "chat template changed it)");
  const std::string lstripped = jinja::PyStrip(final_content, std::nullopt, true, false);
  // The template kept the message's spacing (or it had none): cut after all
  // of it; else after its stripped text.
  const size_t keep =
      rendered.substr(at, lstripped.size()) == final_content ? lstripped.size() : stripped.size();
  return std::string(rendered.substr(0, at + keep));
}

}  // namespace kvfork
