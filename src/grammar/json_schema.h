// JSON Schema (and "any JSON object") to GBNF, in the style of llama.cpp's
// json-schema-to-grammar: the grammar emits compact JSON with optional
// whitespace after each token (one space, or a newline and up to 20 spaces
// or tabs: bounded, so a sampled output always gets back to the structure).
//
// Supported keywords (docs/structured_output.md lists them with their
// limits): type (one or a list), properties, required, additionalProperties,
// enum, const, anyOf, oneOf (as anyOf), items, minItems, maxItems, pattern
// (a regular expression), minLength, maxLength, $ref to "#", "#/$defs/..."
// or "#/definitions/...", $defs, definitions, and the annotations title,
// description, default, examples, $schema, $id, $comment, deprecated,
// readOnly, writeOnly. Any other keyword is an error naming it and where it
// is, never silently dropped.
#pragma once

#include <map>
#include <string>
#include <string_view>

#include "core/status.h"

namespace kvfork::grammar {

// A complete GBNF grammar for documents valid under `schema_json` (JSON
// text). `field` names the request field in errors
// ("response_format.json_schema.schema").
StatusOr<std::string> JsonSchemaGrammar(std::string_view schema_json, std::string_view field);

// Several schemas in one grammar (a tool call: one alternative per tool,
// each `{"name": "f", "arguments": <f's parameters>}` between the
// template's markers). Add returns the GBNF expression for one schema's
// documents (ends with optional whitespace); Build makes the grammar whose
// root is `root_expr` (built from Add's expressions and literals:
// GbnfLiteral in grammar.h) with every rule the schemas need.
//
//   JsonSchemaGrammarBuilder b;
//   auto args = b.Add(parameters_json, "tools[0].function.parameters");
//   std::string gbnf = b.Build(GbnfLiteral("<tool_call>\n{\"name\": \"f\", \"arguments\": ") +
//                              " " + *args + " " + GbnfLiteral("}\n</tool_call>"));
//   // then server::ConstrainToGbnf(gbnf, "tool_choice", &sampling)
class JsonSchemaGrammarBuilder {
 public:
  StatusOr<std::string> Add(std::string_view schema_json, std::string_view field);
  std::string Build(const std::string& root_expr) const;

 private:
  std::map<std::string, std::string> rules_;  // name -> body, shared by the schemas
  int schemas_ = 0;
};

// A complete GBNF grammar for any JSON object (response_format json_object).
std::string JsonObjectGrammar();

}  // namespace kvfork::grammar
