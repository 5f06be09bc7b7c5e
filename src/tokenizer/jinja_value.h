// The values a Jinja template computes with, with Python's semantics: truth,
// ==, <, str(), repr() and json.dumps() as CPython prints them, so that a
// rendered prompt is byte-identical to Python's jinja2.
//
// A Value is a small handle: lists and dicts are shared, immutable once built
// (the sandbox transformers uses forbids mutating them), so copying a Value is
// cheap and values may be read from several threads. Only a namespace()
// object is mutable, and it lives inside one render.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/status.h"

namespace kvfork::jinja {

class Value;
using ValueList = std::vector<Value>;
// Insertion-ordered, like a Python dict. Keys are strings (all JSON keys are).
using ValueItems = std::vector<std::pair<std::string, Value>>;

struct CallArgs {
  std::vector<Value> positional;
  std::vector<std::pair<std::string, Value>> keyword;
  const Value* Keyword(const std::string& name) const;
};
using NativeFunction = std::function<StatusOr<Value>(const CallArgs&)>;

enum class Kind { kUndefined, kNone, kBool, kInt, kFloat, kString, kList, kDict, kNamespace,
                  kCallable };

class Value {
 public:
  Value() = default;  // undefined
  static Value Undefined(std::string hint);
  static Value None();
  static Value Bool(bool b);
  static Value Int(int64_t i);
  static Value Float(double f);
  static Value String(std::string s);
  static Value List(ValueList items, bool is_tuple = false);
  static Value Dict(ValueItems items);
  static Value Namespace(ValueItems items);
  static Value Function(std::string name, NativeFunction fn);

  Kind kind() const { return kind_; }
  bool is_undefined() const { return kind_ == Kind::kUndefined; }
  bool is_none() const { return kind_ == Kind::kNone; }
  bool is_string() const { return kind_ == Kind::kString; }
  bool is_list() const { return kind_ == Kind::kList; }
  bool is_dict() const { return kind_ == Kind::kDict; }
  // bool, int and float: Python's numbers (bool is an int).
  bool is_number() const {
    return kind_ == Kind::kBool || kind_ == Kind::kInt || kind_ == Kind::kFloat;
  }
  bool is_tuple() const { return kind_ == Kind::kList && is_tuple_; }

  bool bool_value() const { return b_; }
  int64_t int_value() const { return kind_ == Kind::kBool ? (b_ ? 1 : 0) : i_; }
  double float_value() const {
    return kind_ == Kind::kFloat ? f_ : static_cast<double>(int_value());
  }
  const std::string& string_value() const { return *s_; }
  const ValueList& list() const { return *list_; }
  const ValueItems& items() const { return *items_; }
  ValueItems& namespace_items() const { return *ns_; }
  const std::string& function_name() const { return *s_; }
  const NativeFunction& function() const { return *fn_; }
  // For an undefined value: what was looked up, for the error message.
  const std::string& undefined_hint() const { return *s_; }

  // A dict's value for key, or nullptr.
  const Value* Find(const std::string& key) const;

  bool Truthy() const;
  // Python's type name ("str", "dict", ...), for error messages.
  std::string TypeName() const;

 private:
  Kind kind_ = Kind::kUndefined;
  bool b_ = false;
  bool is_tuple_ = false;
  int64_t i_ = 0;
  double f_ = 0;
  std::shared_ptr<const std::string> s_;
  std::shared_ptr<const ValueList> list_;
  std::shared_ptr<const ValueItems> items_;
  std::shared_ptr<ValueItems> ns_;
  std::shared_ptr<const NativeFunction> fn_;
};

// Python ==.
bool PyEquals(const Value& a, const Value& b);
// Python <; an error for types Python cannot order ("'<' not supported ...").
StatusOr<bool> PyLess(const Value& a, const Value& b);
// str(v) as jinja2 prints it; undefined prints as "".
std::string PyStr(const Value& v);
std::string PyRepr(const Value& v);

struct JsonDumpOptions {
  std::optional<std::string> indent;  // nullopt: one line
  std::string item_separator;         // default ", " or "," with indent
  std::string key_separator = ": ";
  bool sort_keys = false;
  bool ensure_ascii = false;  // transformers' tojson passes False
};
// json.dumps(v, ...); undefined, functions and namespaces are errors as in
// Python ("Object of type Undefined is not JSON serializable").
StatusOr<std::string> PyJsonDumps(const Value& v, const JsonDumpOptions& options);

// JSON -> Value: objects keep their key order (use ordered_json to keep the
// caller's order, as Python's json.loads does).
Value FromJson(const nlohmann::json& j);
Value FromJson(const nlohmann::ordered_json& j);

}  // namespace kvfork::jinja
