// The structured-output fields of a request (docs/structured_output.md),
// compiled into SamplingParams::grammar:
//   OpenAI     response_format {type: text | json_object | json_schema,
//              json_schema: {name, schema, strict, description}}
//   vLLM       structured_outputs {json | regex | choice | grammar | json_object},
//              guided_json, guided_regex, guided_choice, guided_grammar
//   llama.cpp  grammar (GBNF), json_schema, response_format {type:
//              json_object, schema}
// At most one of them may constrain a request. A malformed or unsupported
// one (an unknown response_format type, a JSON Schema keyword the compiler
// does not implement, a non-regular pattern) is a 400 naming the field.
// Pure functions: compiling is O(size of the schema), no engine needed.
#pragma once

#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "engine/request.h"
#include "server/api_error.h"

namespace kvfork::server {

std::optional<ApiError> ParseStructuredOutput(const nlohmann::ordered_json& body,
                                              SamplingParams* out);

// For other routes (forced tool calls, Responses' text.format): constrains
// the output to JSON valid under `schema`. `field` names it in errors.
std::optional<ApiError> ConstrainToJsonSchema(const nlohmann::ordered_json& schema,
                                              const std::string& field, SamplingParams* out);
// The same for a GBNF grammar (e.g. `<tool_call>` around a schema's JSON:
// grammar::JsonSchemaGrammar gives the JSON part's rules).
std::optional<ApiError> ConstrainToGbnf(const std::string& gbnf, const std::string& field,
                                        SamplingParams* out);

}  // namespace kvfork::server
