// tool_choice "required" and a named function, enforced with a grammar
// (constrained decoding, src/grammar): the reply is exactly one tool call in
// the model's format, its arguments valid under the tool's parameters
// schema, so the call always parses:
//   hermes       <tool_call>\n{"name": "NAME", "arguments": ARGS}\n</tool_call>
//   llama3_json  {"name": "NAME", "parameters": ARGS}
//   mistral      [{"name": "NAME", "arguments": ARGS}]  ([TOOL_CALLS] is a
//                special token outside the byte-level grammar)
// Pure functions.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

#include "core/status.h"
#include "server/tool_call_parser.h"

namespace kvfork::server {

// The GBNF of one call to one of `tools` (OpenAI chat tools, as the request
// sent them), or only to `only_name` when it is not empty. Errors name the
// tool's field ("tools[1].function.parameters").
StatusOr<std::string> ForcedToolCallGbnf(ToolCallFormat format, const nlohmann::ordered_json& tools,
                                         const std::string& only_name);

// gbnf with every rule name (definitions and references) prefixed, so
// several grammars can live in one.
std::string PrefixGbnfRules(std::string_view gbnf, std::string_view prefix);

}  // namespace kvfork::server
