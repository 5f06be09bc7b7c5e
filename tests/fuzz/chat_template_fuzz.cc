#include <nlohmann/json.hpp>

#include "fuzz/fuzz_targets.h"
#include "tokenizer/chat_template.h"

namespace kvfork::fuzz {

void FuzzChatTemplate(std::string_view input) {
  std::vector<std::string> parts = SplitParts(input);
  StatusOr<ChatTemplate> tmpl = ChatTemplate::Parse(parts[0]);
  if (!tmpl.ok()) {
    KVFORK_CHECK(!tmpl.status().message().empty());
    return;
  }
  nlohmann::ordered_json ctx = nlohmann::ordered_json::object();
  if (parts.size() > 1) {
    nlohmann::ordered_json given =
        nlohmann::ordered_json::parse(parts[1], /*cb=*/nullptr, /*allow_exceptions=*/false);
    if (given.is_object()) {
      ctx = std::move(given);
    } else if (!given.is_discarded()) {
      ctx["messages"] = std::move(given);
      ctx["add_generation_prompt"] = true;
    }
  } else {
    ctx["messages"] = {{{"role", "user"}, {"content", "Hello"}}};
  }
  // A fixed clock, so a crash reproduces whatever strftime_now prints.
  StatusOr<std::string> out = tmpl->RenderAt(ctx, /*now=*/1722007545);
  if (!out.ok()) KVFORK_CHECK(!out.status().message().empty());
}

}  // namespace kvfork::fuzz
