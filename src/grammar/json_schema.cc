#include "grammar/json_schema.h"

#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <vector>

#include "grammar/grammar.h"
#include "grammar/regex_to_gbnf.h"

namespace kvfork::grammar {
namespace {

using json = nlohmann::ordered_json;

// Shared rules, added to a grammar when first used.
const std::map<std::string, std::string>& Primitives() {
  static const std::map<std::string, std::string> rules = {
      {"space", R"(| " " | "\n" [ \t]{0,20})"},
      {"boolean", R"(("true" | "false") space)"},
      {"null", R"("null" space)"},
      // Up to 16 digits per part, as llama.cpp: a sampled number ends.
      {"integral-part", R"([0] | [1-9] [0-9]{0,15})"},
      {"decimal-part", R"([0-9]{1,16})"},
      {"number", R"(("-"? integral-part) ("." decimal-part)? ([eE] [-+]? integral-part)? space)"},
      {"integer", R"(("-"? integral-part) space)"},
      // One code point; \u escapes are not surrogates, so a character is
      // what Python and JSON Schema's minLength/maxLength count.
      {"char",
       R"([^"\\\x00-\x1F] | "\\" (["\\/bfnrt] | "u" ([0-9a-cA-CefEF] [0-9a-fA-F]{3} | [dD] [0-7] [0-9a-fA-F]{2})))"},
      {"string", R"("\"" char* "\"" space)"},
      {"value", R"(object | array | string | number | boolean | null)"},
      {"object",
       R"("{" space ( string ":" space value ("," space string ":" space value)* )? "}" space)"},
      {"array", R"("[" space ( value ("," space value)* )? "]" space)"},
  };
  return rules;
}

const std::set<std::string>& Annotations() {
  static const std::set<std::string> s = {"title",    "description", "default",  "examples",
                                          "$schema",  "$id",         "$comment", "deprecated",
                                          "readOnly", "writeOnly"};
  return s;
}

class SchemaConverter {
 public:
  // rules: shared by the schemas of one grammar; prefix: this schema's
  // rule names (its $refs and optional-property chains).
  SchemaConverter(const json& root, std::string_view field,
                  std::map<std::string, std::string>* rules, std::string prefix)
      : root_(root), field_(field), rules_(*rules), prefix_(std::move(prefix)) {}

  // The GBNF expression for the schema's documents; its rules go to `rules`.
  StatusOr<std::string> Convert() { return Visit(root_, ""); }

 private:
  Status Error(const std::string& path, const std::string& what) const {
    return InvalidArgumentError("'" + std::string(field_) + "'" +
                                (path.empty() ? "" : " at '" + path + "'") + ": " + what);
  }

  std::string Use(const std::string& primitive) {
    if (rules_.count(primitive)) return primitive;
    rules_[primitive] = Primitives().at(primitive);
    // A primitive's body names other primitives: add those too.
    static const char* kDeps[][2] = {
        {"boolean", "space"},       {"null", "space"},    {"number", "integral-part"},
        {"number", "decimal-part"}, {"number", "space"},  {"integer", "integral-part"},
        {"integer", "space"},       {"string", "char"},   {"string", "space"},
        {"value", "object"},        {"value", "array"},   {"value", "string"},
        {"value", "number"},        {"value", "boolean"}, {"value", "null"},
        {"object", "space"},        {"object", "string"}, {"object", "value"},
        {"array", "space"},         {"array", "value"}};
    for (const auto& d : kDeps)
      if (primitive == d[0]) Use(d[1]);
    return primitive;
  }

  std::string Literal(const json& value) {
    Use("space");
    return GbnfLiteral(value.dump()) + " space";
  }

  StatusOr<int64_t> Count(const json& s, const char* key, const std::string& path) {
    const json& v = s[key];
    if (!v.is_number_integer() || v.get<int64_t>() < 0)
      return Error(path, std::string("'") + key + "' must be a non-negative integer");
    if (v.get<int64_t>() > 100000)
      return Error(path, std::string("'") + key + "' above 100000 is not supported");
    return v.get<int64_t>();
  }

  StatusOr<std::string> Ref(const std::string& ref, const std::string& path) {
    auto it = ref_rules_.find(ref);
    if (it != ref_rules_.end()) return it->second;
    const json* target = nullptr;
    if (ref == "#") {
      target = &root_;
    } else {
      for (const char* prefix : {"#/$defs/", "#/definitions/"}) {
        const std::string p = prefix;
        if (ref.rfind(p, 0) != 0) continue;
        const std::string defs = p.substr(2, p.size() - 3);
        const std::string name = ref.substr(p.size());
        if (root_.contains(defs) && root_[defs].is_object() && root_[defs].contains(name))
          target = &root_[defs][name];
      }
    }
    if (target == nullptr)
      return Error(path, "'$ref' \"" + ref +
                             "\" is not supported (only \"#\", \"#/$defs/NAME\" and "
                             "\"#/definitions/NAME\" of this schema)");
    const std::string rule = prefix_ + "ref-" + std::to_string(ref_rules_.size());
    ref_rules_[ref] = rule;  // before visiting: the definition may refer to itself
    KVFORK_ASSIGN_OR_RETURN(std::string body, Visit(*target, ref));
    rules_[rule] = body;
    return rule;
  }

  StatusOr<std::string> Visit(const json& s, const std::string& path) {
    if (++depth_ > 64) return Error(path, "the schema nests too deeply");
    StatusOr<std::string> r = VisitInner(s, path);
    --depth_;
    return r;
  }

  StatusOr<std::string> VisitInner(const json& s, const std::string& path) {
    if (s.is_boolean()) {
      if (s.get<bool>()) return Use("value");
      return Error(path, "the schema false matches nothing");
    }
    if (!s.is_object()) return Error(path, "a schema must be an object or a boolean");
    static const std::set<std::string> kSupported = {
        "type",       "properties", "required", "additionalProperties",
        "enum",       "const",      "anyOf",    "oneOf",
        "items",      "minItems",   "maxItems", "pattern",
        "minLength",  "maxLength",  "$ref",     "$defs",
        "definitions"};
    for (auto it = s.begin(); it != s.end(); ++it)
      if (!kSupported.count(it.key()) && !Annotations().count(it.key()))
        return Error(path, "JSON Schema keyword '" + it.key() + "' is not supported");
    if (s.contains("$ref")) {
      if (!s["$ref"].is_string()) return Error(path, "'$ref' must be a string");
      return Ref(s["$ref"].get<std::string>(), path);
    }
    if (s.contains("const")) return Literal(s["const"]);
    if (s.contains("enum")) {
      if (!s["enum"].is_array() || s["enum"].empty())
        return Error(path, "'enum' must be a non-empty array");
      std::string out = "(";
      for (size_t i = 0; i < s["enum"].size(); ++i)
        out += (i ? " | " : "") + GbnfLiteral(s["enum"][i].dump());
      Use("space");
      return out + ") space";
    }
    for (const char* key : {"anyOf", "oneOf"}) {
      if (!s.contains(key)) continue;
      const json& alts = s[key];
      if (!alts.is_array() || alts.empty())
        return Error(path, std::string("'") + key + "' must be a non-empty array");
      for (auto it = s.begin(); it != s.end(); ++it)
        if (it.key() != key && it.key() != "$defs" && it.key() != "definitions" &&
            !Annotations().count(it.key()))
          return Error(path, "'" + it.key() + "' beside '" + key +
                                 "' is not supported (move it into each alternative)");
      std::string out = "(";
      for (size_t i = 0; i < alts.size(); ++i) {
        KVFORK_ASSIGN_OR_RETURN(std::string a,
                                Visit(alts[i], path + "/" + key + "/" + std::to_string(i)));
        out += (i ? " | " : "") + a;
      }
      return out + ")";
    }
    std::vector<std::string> types;
    if (s.contains("type")) {
      const json& t = s["type"];
      if (t.is_string()) {
        types.push_back(t.get<std::string>());
      } else if (t.is_array() && !t.empty()) {
        for (const json& x : t) {
          if (!x.is_string()) return Error(path, "'type' must be a string or strings");
          types.push_back(x.get<std::string>());
        }
      } else {
        return Error(path, "'type' must be a string or a non-empty array of strings");
      }
    } else if (s.contains("properties") || s.contains("additionalProperties") ||
               s.contains("required")) {
      types.push_back("object");
    } else if (s.contains("items") || s.contains("minItems") || s.contains("maxItems")) {
      types.push_back("array");
    } else if (s.contains("pattern") || s.contains("minLength") || s.contains("maxLength")) {
      types.push_back("string");
    } else {
      return Use("value");
    }
    std::string out;
    for (size_t i = 0; i < types.size(); ++i) {
      KVFORK_ASSIGN_OR_RETURN(std::string t, Typed(s, types[i], path));
      out += (i ? " | " : "") + t;
    }
    return types.size() > 1 ? "(" + out + ")" : out;
  }

  StatusOr<std::string> Typed(const json& s, const std::string& type, const std::string& path) {
    if (type == "null" || type == "boolean" || type == "number" || type == "integer")
      return Use(type);
    if (type == "string") return StringRule(s, path);
    if (type == "array") return ArrayRule(s, path);
    if (type == "object") return ObjectRule(s, path);
    return Error(path, "'type' \"" + type + "\" is not a JSON Schema type");
  }

  StatusOr<std::string> StringRule(const json& s, const std::string& path) {
    Use("space");
    if (s.contains("pattern")) {
      if (!s["pattern"].is_string()) return Error(path, "'pattern' must be a string");
      if (s.contains("minLength") || s.contains("maxLength"))
        return Error(path, "'pattern' together with 'minLength'/'maxLength' is not supported");
      KVFORK_ASSIGN_OR_RETURN(
          std::string re,
          RegexToGbnf(s["pattern"].get<std::string>(), RegexTarget::kJsonString,
                      std::string(field_) + (path.empty() ? "" : " at " + path) + " pattern"));
      return "\"\\\"\" (" + re + ") \"\\\"\" space";
    }
    if (!s.contains("minLength") && !s.contains("maxLength")) return Use("string");
    int64_t min = 0, max = -1;
    if (s.contains("minLength")) {
      KVFORK_ASSIGN_OR_RETURN(min, Count(s, "minLength", path));
    }
    if (s.contains("maxLength")) {
      KVFORK_ASSIGN_OR_RETURN(max, Count(s, "maxLength", path));
    }
    if (max >= 0 && max < min) return Error(path, "'maxLength' is below 'minLength'");
    Use("char");
    return "\"\\\"\" char{" + std::to_string(min) + "," + (max >= 0 ? std::to_string(max) : "") +
           "} \"\\\"\" space";
  }

  StatusOr<std::string> ArrayRule(const json& s, const std::string& path) {
    Use("space");
    std::string item = "value";
    if (s.contains("items")) {
      if (s["items"].is_array())
        return Error(path, "'items' as an array (tuples) is not supported");
      KVFORK_ASSIGN_OR_RETURN(item, Visit(s["items"], path + "/items"));
    } else {
      Use("value");
    }
    int64_t min = 0, max = -1;
    if (s.contains("minItems")) {
      KVFORK_ASSIGN_OR_RETURN(min, Count(s, "minItems", path));
    }
    if (s.contains("maxItems")) {
      KVFORK_ASSIGN_OR_RETURN(max, Count(s, "maxItems", path));
    }
    if (max >= 0 && max < min) return Error(path, "'maxItems' is below 'minItems'");
    const std::string more = "(\",\" space " + item + ")";
    std::string body;
    if (max == 0) {
      body = "";
    } else if (min == 0) {
      body = "(" + item + " " + more + "{0," + (max >= 0 ? std::to_string(max - 1) : "") + "})?";
    } else {
      body = item + " " + more + "{" + std::to_string(min - 1) + "," +
             (max >= 0 ? std::to_string(max - 1) : "") + "}";
    }
    return "\"[\" space " + body + " \"]\" space";
  }

  StatusOr<std::string> ObjectRule(const json& s, const std::string& path) {
    Use("space");
    const bool has_props = s.contains("properties");
    if (has_props && !s["properties"].is_object())
      return Error(path, "'properties' must be an object");
    std::set<std::string> required;
    if (s.contains("required")) {
      if (!s["required"].is_array()) return Error(path, "'required' must be an array");
      for (const json& r : s["required"]) {
        if (!r.is_string()) return Error(path, "'required' must hold strings");
        required.insert(r.get<std::string>());
      }
    }
    const json additional = s.contains("additionalProperties") ? s["additionalProperties"] : json();
    if (!additional.is_null() && !additional.is_boolean() && !additional.is_object())
      return Error(path, "'additionalProperties' must be a boolean or a schema");
    // No declared properties: a map whose values follow additionalProperties.
    if (!has_props && required.empty()) {
      if (additional.is_boolean() && !additional.get<bool>())
        return std::string("\"{\" space \"}\" space");
      std::string value = "value";
      if (additional.is_object()) {
        KVFORK_ASSIGN_OR_RETURN(value, Visit(additional, path + "/additionalProperties"));
      } else {
        Use("value");
      }
      Use("string");
      const std::string kv = "string \":\" space " + value;
      return "\"{\" space (" + kv + " (\",\" space " + kv + ")*)? \"}\" space";
    }
    // Declared properties in the schema's order; additional ones are never
    // generated (a subset of what the schema allows).
    std::vector<std::pair<std::string, std::string>> props;  // (name, "key": value)
    std::vector<bool> is_required;
    std::set<std::string> declared;
    if (has_props) {
      for (auto it = s["properties"].begin(); it != s["properties"].end(); ++it) {
        KVFORK_ASSIGN_OR_RETURN(std::string v, Visit(it.value(), path + "/properties/" + it.key()));
        props.push_back({it.key(), GbnfLiteral(json(it.key()).dump()) + " space \":\" space " + v});
        is_required.push_back(required.count(it.key()) > 0);
        declared.insert(it.key());
      }
    }
    for (const std::string& r : required)
      if (!declared.count(r)) {
        props.push_back({r, GbnfLiteral(json(r).dump()) + " space \":\" space " + Use("value")});
        is_required.push_back(true);
      }
    // Required ones first (in order), then any in-order subset of the
    // optional ones.
    std::vector<std::string> req, opt;
    for (size_t i = 0; i < props.size(); ++i)
      (is_required[i] ? req : opt).push_back(props[i].second);
    std::string body;
    for (size_t i = 0; i < req.size(); ++i) body += (i ? " \",\" space " : "") + req[i];
    if (!opt.empty()) {
      // opt-k ::= kv_k ("," space opt-(k+1))? | opt-(k+1): a non-empty in-order
      // subset of the optional properties from k on.
      std::string next;
      for (size_t k = opt.size(); k-- > 0;) {
        const std::string name = prefix_ + "opt-" + std::to_string(opt_rules_++);
        std::string rule = opt[k];
        if (!next.empty()) rule = "(" + rule + " (\",\" space " + next + ")?) | " + next;
        rules_[name] = rule;
        next = name;
      }
      body += req.empty() ? "(" + next + ")?" : " (\",\" space " + next + ")?";
    }
    return "\"{\" space " + body + " \"}\" space";
  }

  const json& root_;
  std::string_view field_;
  std::map<std::string, std::string>& rules_;
  std::string prefix_;
  std::map<std::string, std::string> ref_rules_;
  int opt_rules_ = 0;
  int depth_ = 0;
};

}  // namespace

StatusOr<std::string> JsonSchemaGrammarBuilder::Add(std::string_view schema_json,
                                                    std::string_view field) {
  json schema = json::parse(schema_json, nullptr, /*allow_exceptions=*/false);
  if (schema.is_discarded())
    return InvalidArgumentError("'" + std::string(field) + "' is not JSON");
  SchemaConverter c(schema, field, &rules_, "s" + std::to_string(schemas_++) + "-");
  return c.Convert();
}

std::string JsonSchemaGrammarBuilder::Build(const std::string& root_expr) const {
  std::string out = "root ::= " + root_expr + "\n";
  for (const auto& [name, body] : rules_) out += name + " ::= " + body + "\n";
  return out;
}

StatusOr<std::string> JsonSchemaGrammar(std::string_view schema_json, std::string_view field) {
  JsonSchemaGrammarBuilder b;
  KVFORK_ASSIGN_OR_RETURN(std::string expr, b.Add(schema_json, field));
  return b.Build(expr);
}

std::string JsonObjectGrammar() {
  std::string out = "root ::= object\n";
  for (const auto& [name, body] : Primitives()) out += name + " ::= " + body + "\n";
  return out;
}

}  // namespace kvfork::grammar
