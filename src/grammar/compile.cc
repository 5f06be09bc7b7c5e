#include "grammar/compile.h"

#include "core/logging.h"
#include "grammar/json_schema.h"
#include "grammar/regex_to_gbnf.h"

namespace kvfork::grammar {

StatusOr<std::shared_ptr<const Grammar>> CompileJsonSchema(std::string_view schema_json,
                                                           std::string_view field) {
  KVFORK_ASSIGN_OR_RETURN(std::string gbnf, JsonSchemaGrammar(schema_json, field));
  return Grammar::FromGbnf(gbnf, field);
}

std::shared_ptr<const Grammar> CompileJsonObject() {
  static const std::shared_ptr<const Grammar> g = [] {
    StatusOr<std::shared_ptr<const Grammar>> r = Grammar::FromGbnf(JsonObjectGrammar());
    KVFORK_CHECK_MSG(r.ok(), r.status().ToString());  // a constant grammar
    return *r;
  }();
  return g;
}

StatusOr<std::shared_ptr<const Grammar>> CompileRegex(std::string_view regex,
                                                      std::string_view field) {
  KVFORK_ASSIGN_OR_RETURN(std::string gbnf, RegexGrammar(regex, field));
  return Grammar::FromGbnf(gbnf, field);
}

StatusOr<std::shared_ptr<const Grammar>> CompileChoice(const std::vector<std::string>& choices,
                                                       std::string_view field) {
  if (choices.empty()) return InvalidArgumentError("'" + std::string(field) + "' is empty");
  std::string gbnf = "root ::= ";
  for (size_t i = 0; i < choices.size(); ++i) {
    if (choices[i].empty())
      return InvalidArgumentError("'" + std::string(field) + "[" + std::to_string(i) +
                                  "]' is an empty string");
    gbnf += (i ? " | " : "") + GbnfLiteral(choices[i]);
  }
  return Grammar::FromGbnf(gbnf, field);
}

StatusOr<std::shared_ptr<const Grammar>> CompileGbnf(std::string_view gbnf,
                                                     std::string_view field) {
  return Grammar::FromGbnf(gbnf, field);
}

}  // namespace kvfork::grammar
