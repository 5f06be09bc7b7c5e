#include "server/tool_choice_grammar.h"

#include "grammar/json_schema.h"

namespace kvfork::server {
namespace {

using nlohmann::ordered_json;

bool IdentStart(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_'; }
bool IdentChar(char c) { return IdentStart(c) || (c >= '0' && c <= '9') || c == '-'; }

// A GBNF string literal holding text's bytes.
std::string Literal(std::string_view text) {
  std::string out = "\"";
  for (char c : text) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += c;
    } else if (c == '\n') {
      out += "\\n";
    } else {
      out += c;
    }
  }
  return out + "\"";
}

}  // namespace

std::string PrefixGbnfRules(std::string_view gbnf, std::string_view prefix) {
  std::string out;
  out.reserve(gbnf.size() * 2);
  size_t i = 0;
  while (i < gbnf.size()) {
    const char c = gbnf[i];
    if (c == '#') {  // a comment, to the end of the line
      while (i < gbnf.size() && gbnf[i] != '\n') out += gbnf[i++];
    } else if (c == '"' || c == '[') {  // a literal or a character class
      const char close = c == '"' ? '"' : ']';
      out += gbnf[i++];
      while (i < gbnf.size() && gbnf[i] != close) {
        if (gbnf[i] == '\\' && i + 1 < gbnf.size()) out += gbnf[i++];
        out += gbnf[i++];
      }
      if (i < gbnf.size()) out += gbnf[i++];
    } else if (IdentStart(c)) {
      size_t end = i;
      while (end < gbnf.size() && IdentChar(gbnf[end])) ++end;
      out += prefix;
      out.append(gbnf.substr(i, end - i));
      i = end;
    } else {
      out += gbnf[i++];
    }
  }
  return out;
}

StatusOr<std::string> ForcedToolCallGbnf(ToolCallFormat format, const ordered_json& tools,
                                         const std::string& only_name) {
  std::string open, close, args_key = "arguments";
  switch (format) {
    case ToolCallFormat::kHermes:
      open = "<tool_call>\n";
      close = "}\n</tool_call>";
      break;
    case ToolCallFormat::kLlama3Json:
      close = "}";
      args_key = "parameters";
      break;
    case ToolCallFormat::kMistral:
      open = "[";
      close = "}]";
      break;
    case ToolCallFormat::kNone:
      return InvalidArgumentError(
          "this model's chat template shows no tool-call format, so a call cannot be forced; "
          "start the server with --tool-call-parser hermes|llama3_json|mistral");
  }
  std::string rules, alternatives;
  for (size_t i = 0; i < tools.size(); ++i) {
    const ordered_json& fn = tools[i].contains("function") ? tools[i]["function"] : ordered_json();
    if (!fn.is_object() || !fn.contains("name") || !fn["name"].is_string())
      return InvalidArgumentError("'tools[" + std::to_string(i) +
                                  "].function.name' must be a string");
    const std::string name = fn["name"].get<std::string>();
    if (!only_name.empty() && name != only_name) continue;
    const std::string field = "tools[" + std::to_string(i) + "].function.parameters";
    const ordered_json schema = fn.contains("parameters") && fn["parameters"].is_object()
                                    ? fn["parameters"]
                                    : ordered_json{{"type", "object"}};
    KVFORK_ASSIGN_OR_RETURN(std::string args, grammar::JsonSchemaGrammar(schema.dump(), field));
    const std::string prefix = "t" + std::to_string(i) + "-";
    rules += PrefixGbnfRules(args, prefix);
    // The name as JSON spells it (quoted, escaped), the way the model writes it.
    const std::string head =
        open + "{\"name\": " + ordered_json(name).dump() + ", \"" + args_key + "\": ";
    rules += "t" + std::to_string(i) + " ::= " + Literal(head) + " " + prefix + "root " +
             Literal(close) + "\n";
    if (!alternatives.empty()) alternatives += " | ";
    alternatives += "t" + std::to_string(i);
  }
  if (alternatives.empty())
    return InvalidArgumentError(only_name.empty()
                                    ? "'tool_choice' needs at least one tool in 'tools'"
                                    : "'tool_choice' names function '" + only_name +
                                          "', which is not in 'tools'");
  return "root ::= " + alternatives + "\n" + rules;
}

}  // namespace kvfork::server
