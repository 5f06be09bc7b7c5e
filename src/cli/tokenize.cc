// `kvfork tokenize --model DIR [--ids] [--add-special] TEXT...`: prints the
// token ids of TEXT (the positional arguments joined by spaces; "-" reads
// stdin) with the tokenizer of model directory DIR. Without --ids, one line
// per token: id, then the token's bytes as a quoted, escaped string.
// `--chat FILE.json` renders a conversation with the model's chat template
// instead: FILE holds a messages list, or an object of template variables
// ({"messages": [...], "tools": [...], "enable_thinking": false, ...}); the
// rendered prompt is printed, or its ids with --ids.
#include <cstdio>
#include <fstream>
#include <iostream>
#include <iterator>
#include <string>

#include "cli/command.h"
#include "cli/flags.h"
#include "cli/model_tokenizer.h"
#include "tokenizer/chat_template.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/utf8.h"

namespace kvfork::cli {
namespace {

std::string Quote(const std::string& bytes) {
  // A token holding part of a character shows its bytes as \xNN.
  const bool valid = utf8::IsValid(bytes);
  std::string out = "\"";
  for (unsigned char c : bytes) {
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      default:
        if (c < 0x20 || c == 0x7f || (!valid && c >= 0x80)) {
          char buf[8];
          std::snprintf(buf, sizeof(buf), "\\x%02x", c);
          out += buf;
        } else {
          out.push_back(static_cast<char>(c));  // UTF-8 passes through
        }
    }
  }
  return out + "\"";
}

// The template variables of a --chat file, with the tokenizer's special
// tokens and add_generation_prompt filled in where the file has none.
StatusOr<nlohmann::ordered_json> LoadChatContext(const std::string& path, const Tokenizer& tok,
                                                 bool add_generation_prompt) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return NotFoundError("--chat: cannot open " + path);
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  nlohmann::ordered_json doc =
      nlohmann::ordered_json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (doc.is_discarded()) return InvalidArgumentError("--chat: " + path + " is not valid JSON");
  nlohmann::ordered_json context;
  if (doc.is_array()) {
    context["messages"] = doc;
  } else if (doc.is_object() && doc.contains("messages") && doc["messages"].is_array()) {
    context = doc;
  } else {
    return InvalidArgumentError("--chat: " + path +
                                " must hold a messages list or an object with \"messages\"");
  }
  if (!context.contains("add_generation_prompt"))
    context["add_generation_prompt"] = add_generation_prompt;
  if (!context.contains("bos_token")) context["bos_token"] = tok.bos_token();
  if (!context.contains("eos_token")) context["eos_token"] = tok.eos_token();
  return context;
}

int RunTokenize(int argc, char** argv) {
  Flags flags = Flags::Parse(argc, argv, {"ids", "add-special", "add-generation-prompt"});
  flags.DescribePositional("TEXT...", "the text to tokenize, joined by spaces; \"-\" reads stdin");
  const std::string model =
      flags.GetRequiredString("model", "model directory or .gguf whose tokenizer is used");
  const bool ids_only = flags.GetBool("ids", "print the ids only, space-separated on one line");
  const bool add_special = flags.GetBool("add-special", "add the tokenizer's special tokens (BOS)");
  const bool add_generation_prompt =
      flags.GetBool("add-generation-prompt", "with --chat: end with the assistant's turn opening");
  const std::string chat_file = flags.GetString(
      "chat", "", "render this JSON conversation with the chat template (none: tokenize TEXT)");
  if (Status finish = flags.Finish(); !finish.ok()) {
    std::fprintf(stderr, "kvfork tokenize: %s\n", finish.ToString().c_str());
    return 2;
  }
  std::string text;
  if (flags.positional().size() == 1 && flags.positional()[0] == "-") {
    text.assign(std::istreambuf_iterator<char>(std::cin), std::istreambuf_iterator<char>());
  } else {
    for (size_t i = 0; i < flags.positional().size(); ++i) {
      if (i > 0) text += ' ';
      text += flags.positional()[i];
    }
  }
  auto tok = LoadModelTokenizer(model, "");
  if (!tok.ok()) {
    std::fprintf(stderr, "tokenize: %s\n", tok.status().ToString().c_str());
    return 1;
  }
  if (!chat_file.empty()) {
    auto context = LoadChatContext(chat_file, **tok, add_generation_prompt);
    if (!context.ok()) {
      std::fprintf(stderr, "tokenize: %s\n", context.status().ToString().c_str());
      return 1;
    }
    if ((*tok)->chat_template().empty()) {
      std::fprintf(stderr, "tokenize: %s has no chat_template in tokenizer_config.json\n",
                   model.c_str());
      return 1;
    }
    auto tmpl = ChatTemplate::Parse((*tok)->chat_template());
    if (!tmpl.ok()) {
      std::fprintf(stderr, "tokenize: chat template: %s\n", tmpl.status().ToString().c_str());
      return 1;
    }
    auto rendered = tmpl->RenderOrdered(*context);
    if (!rendered.ok()) {
      std::fprintf(stderr, "tokenize: chat template: %s\n", rendered.status().ToString().c_str());
      return 1;
    }
    if (!ids_only) {
      std::fwrite(rendered->data(), 1, rendered->size(), stdout);
      return 0;
    }
    // The template writes the special tokens itself (BOS included).
    text = *rendered;
  }
  const std::vector<int32_t> ids = (*tok)->Encode(text, add_special);
  if (ids_only) {
    for (size_t i = 0; i < ids.size(); ++i) std::printf(i ? " %d" : "%d", ids[i]);
    std::printf("\n");
  } else {
    for (int32_t id : ids) std::printf("%d\t%s\n", id, Quote((*tok)->TokenBytes(id)).c_str());
  }
  return 0;
}

}  // namespace

KVFORK_REGISTER_COMMAND(tokenize, "tokenize", "print the token ids of a text (--model DIR)",
                        RunTokenize);

}  // namespace kvfork::cli
