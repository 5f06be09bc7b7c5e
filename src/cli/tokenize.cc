// `kvfork tokenize --model DIR [--ids] [--add-special] TEXT...`: prints the
// token ids of TEXT (the positional arguments joined by spaces; "-" reads
// stdin) with the tokenizer of model directory DIR. Without --ids, one line
// per token: id, then the token's bytes as a quoted, escaped string.
#include <cstdio>
#include <iostream>
#include <iterator>
#include <string>

#include "cli/command.h"
#include "cli/flags.h"
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

int RunTokenize(int argc, char** argv) {
  auto flags = Flags::Parse(argc, argv, {"ids", "add-special", "help"});
  if (!flags.ok()) {
    std::fprintf(stderr, "tokenize: %s\n", flags.status().ToString().c_str());
    return 2;
  }
  if (flags->GetBool("help")) {
    std::printf(
        "usage: kvfork tokenize --model DIR [--ids] [--add-special] TEXT...  (TEXT \"-\": stdin)\n");
    return 0;
  }
  auto model = flags->GetRequiredString("model");
  const bool ids_only = flags->GetBool("ids");
  const bool add_special = flags->GetBool("add-special");
  Status finish = flags->Finish();
  if (!model.ok() || !finish.ok()) {
    std::fprintf(stderr, "tokenize: %s\n",
                 (!model.ok() ? model.status() : finish).ToString().c_str());
    return 2;
  }
  std::string text;
  if (flags->positional().size() == 1 && flags->positional()[0] == "-") {
    text.assign(std::istreambuf_iterator<char>(std::cin), std::istreambuf_iterator<char>());
  } else {
    for (size_t i = 0; i < flags->positional().size(); ++i) {
      if (i > 0) text += ' ';
      text += flags->positional()[i];
    }
  }
  auto tok = Tokenizer::Load(*model);
  if (!tok.ok()) {
    std::fprintf(stderr, "tokenize: %s\n", tok.status().ToString().c_str());
    return 1;
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
