#include "server/structured_output.h"

#include <vector>

#include "grammar/compile.h"

namespace kvfork::server {
namespace {

#define RETURN_IF_API_ERROR(expr)           \
  do {                                      \
    std::optional<ApiError> error = (expr); \
    if (error) return error;                \
  } while (0)

using json = nlohmann::ordered_json;
using GrammarPtr = std::shared_ptr<const grammar::Grammar>;

std::optional<ApiError> FromStatus(const StatusOr<GrammarPtr>& g, const std::string& field,
                                   GrammarPtr* out) {
  if (!g.ok()) return InvalidField(field, g.status().message());
  *out = *g;
  return std::nullopt;
}

// A schema given as an object, or as JSON text (vLLM accepts both).
std::optional<ApiError> Schema(const json& v, const std::string& field, GrammarPtr* out) {
  std::string text;
  if (v.is_string()) {
    text = v.get<std::string>();
  } else if (v.is_object() || v.is_boolean()) {
    text = v.dump();
  } else {
    return InvalidField(field, "'" + field + "' must be a JSON Schema (an object)");
  }
  return FromStatus(grammar::CompileJsonSchema(text, field), field, out);
}

std::optional<ApiError> String(const json& v, const std::string& field, std::string* out) {
  if (!v.is_string()) return InvalidField(field, "'" + field + "' must be a string");
  *out = v.get<std::string>();
  return std::nullopt;
}

std::optional<ApiError> Choice(const json& v, const std::string& field, GrammarPtr* out) {
  if (!v.is_array() || v.empty())
    return InvalidField(field, "'" + field + "' must be a non-empty array of strings");
  std::vector<std::string> choices;
  for (size_t i = 0; i < v.size(); ++i) {
    if (!v[i].is_string())
      return InvalidField(field + "[" + std::to_string(i) + "]",
                          "'" + field + "[" + std::to_string(i) + "]' must be a string");
    choices.push_back(v[i].get<std::string>());
  }
  return FromStatus(grammar::CompileChoice(choices, field), field, out);
}

std::optional<ApiError> ResponseFormat(const json& rf, GrammarPtr* out) {
  if (!rf.is_object())
    return InvalidField("response_format", "'response_format' must be an object");
  auto type = rf.find("type");
  if (type == rf.end() || !type->is_string())
    return InvalidField("response_format.type", "'response_format.type' must be a string");
  const std::string t = type->get<std::string>();
  if (t == "text") return std::nullopt;
  if (t == "json_object") {
    // llama.cpp: {type: json_object, schema: {...}} constrains to the schema.
    auto schema = rf.find("schema");
    if (schema != rf.end() && !schema->is_null())
      return Schema(*schema, "response_format.schema", out);
    *out = grammar::CompileJsonObject();
    return std::nullopt;
  }
  if (t == "json_schema") {
    auto js = rf.find("json_schema");
    if (js == rf.end() || !js->is_object())
      return InvalidField("response_format.json_schema",
                          "'response_format.json_schema' must be an object with a 'schema'");
    for (auto it = js->begin(); it != js->end(); ++it)
      if (it.key() != "name" && it.key() != "schema" && it.key() != "strict" &&
          it.key() != "description")
        return InvalidField("response_format.json_schema." + it.key(),
                            "'response_format.json_schema." + it.key() + "' is not a known field");
    auto schema = js->find("schema");
    if (schema == js->end() || schema->is_null()) {
      *out = grammar::CompileJsonObject();  // OpenAI: the schema is optional
      return std::nullopt;
    }
    return Schema(*schema, "response_format.json_schema.schema", out);
  }
  return InvalidField("response_format.type",
                      "'response_format.type' = \"" + t +
                          "\" is not supported: use \"text\", \"json_object\" or \"json_schema\"");
}

std::optional<ApiError> StructuredOutputs(const json& so, GrammarPtr* out) {
  if (!so.is_object())
    return InvalidField("structured_outputs", "'structured_outputs' must be an object");
  std::string given;
  for (auto it = so.begin(); it != so.end(); ++it) {
    if (it.value().is_null()) continue;
    const std::string field = "structured_outputs." + it.key();
    const std::string& k = it.key();
    if (k != "json" && k != "regex" && k != "choice" && k != "grammar" && k != "json_object")
      return InvalidField(field, "'" + field +
                                     "' is not supported (supported: json, regex, "
                                     "choice, grammar, json_object)");
    if (!given.empty())
      return InvalidField(field, "'" + field + "' and 'structured_outputs." + given +
                                     "' both constrain the output: give one");
    given = k;
    if (k == "json") RETURN_IF_API_ERROR(Schema(it.value(), field, out));
    if (k == "choice") RETURN_IF_API_ERROR(Choice(it.value(), field, out));
    if (k == "regex" || k == "grammar") {
      std::string text;
      RETURN_IF_API_ERROR(String(it.value(), field, &text));
      RETURN_IF_API_ERROR(FromStatus(
          k == "regex" ? grammar::CompileRegex(text, field) : grammar::CompileGbnf(text, field),
          field, out));
    }
    if (k == "json_object") {
      if (it.value() != true) return InvalidField(field, "'" + field + "' must be true");
      *out = grammar::CompileJsonObject();
    }
  }
  return std::nullopt;
}

}  // namespace

std::optional<ApiError> ParseStructuredOutput(const json& body, SamplingParams* out) {
  std::string given;  // the field that set the grammar
  GrammarPtr g;
  for (const char* name : {"response_format", "structured_outputs", "guided_json", "guided_regex",
                           "guided_choice", "guided_grammar", "grammar", "json_schema"}) {
    auto it = body.find(name);
    if (it == body.end() || it->is_null()) continue;
    GrammarPtr next;
    const std::string field = name;
    if (field == "response_format") {
      RETURN_IF_API_ERROR(ResponseFormat(*it, &next));
    } else if (field == "structured_outputs") {
      RETURN_IF_API_ERROR(StructuredOutputs(*it, &next));
    } else if (field == "guided_json" || field == "json_schema") {
      RETURN_IF_API_ERROR(Schema(*it, field, &next));
    } else if (field == "guided_choice") {
      RETURN_IF_API_ERROR(Choice(*it, field, &next));
    } else {
      std::string text;
      RETURN_IF_API_ERROR(String(*it, field, &text));
      if (text.empty() && field == "grammar") continue;  // llama.cpp sends "" for none
      RETURN_IF_API_ERROR(FromStatus(field == "guided_regex" ? grammar::CompileRegex(text, field)
                                                             : grammar::CompileGbnf(text, field),
                                     field, &next));
    }
    if (next == nullptr) continue;  // response_format text
    if (g != nullptr)
      return InvalidField(
          field, "'" + field + "' and '" + given + "' both constrain the output: give one");
    g = std::move(next);
    given = field;
  }
  out->grammar = std::move(g);
  return std::nullopt;
}

std::optional<ApiError> ConstrainToJsonSchema(const json& schema, const std::string& field,
                                              SamplingParams* out) {
  return Schema(schema, field, &out->grammar);
}

std::optional<ApiError> ConstrainToGbnf(const std::string& gbnf, const std::string& field,
                                        SamplingParams* out) {
  return FromStatus(grammar::CompileGbnf(gbnf, field), field, &out->grammar);
}

}  // namespace kvfork::server
