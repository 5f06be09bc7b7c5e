#include "tokenizer/jinja_value.h"

// GCC 12 at -O3 reports a false -Wrestrict inside std::string concatenation
// (GCC bug 105651); nothing here copies overlapping memory.
#pragma GCC diagnostic ignored "-Wrestrict"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "tokenizer/jinja_pystr.h"

namespace kvfork::jinja {

const Value* CallArgs::Keyword(const std::string& name) const {
  for (const auto& [k, v] : keyword) {
    if (k == name) return &v;
  }
  return nullptr;
}

Value Value::Undefined(std::string hint) {
  Value v;
  v.s_ = std::make_shared<const std::string>(std::move(hint));
  return v;
}
Value Value::None() {
  Value v;
  v.kind_ = Kind::kNone;
  return v;
}
Value Value::Bool(bool b) {
  Value v;
  v.kind_ = Kind::kBool;
  v.b_ = b;
  return v;
}
Value Value::Int(int64_t i) {
  Value v;
  v.kind_ = Kind::kInt;
  v.i_ = i;
  return v;
}
Value Value::Float(double f) {
  Value v;
  v.kind_ = Kind::kFloat;
  v.f_ = f;
  return v;
}
Value Value::String(std::string s) {
  Value v;
  v.kind_ = Kind::kString;
  v.s_ = std::make_shared<const std::string>(std::move(s));
  return v;
}
Value Value::List(ValueList items, bool is_tuple) {
  Value v;
  v.kind_ = Kind::kList;
  v.is_tuple_ = is_tuple;
  v.list_ = std::make_shared<const ValueList>(std::move(items));
  return v;
}
Value Value::Dict(ValueItems items) {
  Value v;
  v.kind_ = Kind::kDict;
  v.items_ = std::make_shared<const ValueItems>(std::move(items));
  return v;
}
Value Value::Namespace(ValueItems items) {
  Value v;
  v.kind_ = Kind::kNamespace;
  v.ns_ = std::make_shared<ValueItems>(std::move(items));
  return v;
}
Value Value::Function(std::string name, NativeFunction fn) {
  Value v;
  v.kind_ = Kind::kCallable;
  v.s_ = std::make_shared<const std::string>(std::move(name));
  v.fn_ = std::make_shared<const NativeFunction>(std::move(fn));
  return v;
}

const Value* Value::Find(const std::string& key) const {
  const ValueItems* items = kind_ == Kind::kDict        ? items_.get()
                            : kind_ == Kind::kNamespace ? ns_.get()
                                                        : nullptr;
  if (items == nullptr) return nullptr;
  for (const auto& [k, v] : *items) {
    if (k == key) return &v;
  }
  return nullptr;
}

bool Value::Truthy() const {
  switch (kind_) {
    case Kind::kUndefined:
    case Kind::kNone:
      return false;
    case Kind::kBool:
      return b_;
    case Kind::kInt:
      return i_ != 0;
    case Kind::kFloat:
      return f_ != 0;
    case Kind::kString:
      return !s_->empty();
    case Kind::kList:
      return !list_->empty();
    case Kind::kDict:
      return !items_->empty();
    case Kind::kNamespace:
    case Kind::kCallable:
      return true;
  }
  return false;
}

std::string Value::TypeName() const {
  switch (kind_) {
    case Kind::kUndefined: return "Undefined";
    case Kind::kNone: return "NoneType";
    case Kind::kBool: return "bool";
    case Kind::kInt: return "int";
    case Kind::kFloat: return "float";
    case Kind::kString: return "str";
    case Kind::kList: return is_tuple_ ? "tuple" : "list";
    case Kind::kDict: return "dict";
    case Kind::kNamespace: return "Namespace";
    case Kind::kCallable: return "function";
  }
  return "?";
}

bool PyEquals(const Value& a, const Value& b) {
  if (a.is_number() && b.is_number()) {
    if (a.kind() == Kind::kFloat || b.kind() == Kind::kFloat) {
      return a.float_value() == b.float_value();
    }
    return a.int_value() == b.int_value();
  }
  if (a.kind() != b.kind()) return false;
  switch (a.kind()) {
    case Kind::kUndefined:
    case Kind::kNone:
      return true;
    case Kind::kString:
      return a.string_value() == b.string_value();
    case Kind::kList: {
      if (a.is_tuple() != b.is_tuple() || a.list().size() != b.list().size()) return false;
      for (size_t i = 0; i < a.list().size(); ++i) {
        if (!PyEquals(a.list()[i], b.list()[i])) return false;
      }
      return true;
    }
    case Kind::kDict: {
      if (a.items().size() != b.items().size()) return false;
      for (const auto& [k, v] : a.items()) {
        const Value* other = b.Find(k);
        if (other == nullptr || !PyEquals(v, *other)) return false;
      }
      return true;
    }
    case Kind::kNamespace:
      return &a.namespace_items() == &b.namespace_items();
    case Kind::kCallable:
      return &a.function() == &b.function();
    default:
      return false;
  }
}

StatusOr<bool> PyLess(const Value& a, const Value& b) {
  if (a.is_number() && b.is_number()) {
    if (a.kind() == Kind::kFloat || b.kind() == Kind::kFloat) {
      return a.float_value() < b.float_value();
    }
    return a.int_value() < b.int_value();
  }
  if (a.is_string() && b.is_string()) return a.string_value() < b.string_value();
  if (a.is_list() && b.is_list() && a.is_tuple() == b.is_tuple()) {
    const ValueList& x = a.list();
    const ValueList& y = b.list();
    for (size_t i = 0; i < x.size() && i < y.size(); ++i) {
      if (PyEquals(x[i], y[i])) continue;
      return PyLess(x[i], y[i]);
    }
    return x.size() < y.size();
  }
  return InvalidArgumentError("'<' not supported between instances of '" + a.TypeName() +
                              "' and '" + b.TypeName() + "'");
}

std::string PyRepr(const Value& v) {
  switch (v.kind()) {
    case Kind::kString:
      return PyStrRepr(v.string_value());
    case Kind::kList: {
      std::string out = v.is_tuple() ? "(" : "[";
      for (size_t i = 0; i < v.list().size(); ++i) {
        if (i > 0) out += ", ";
        out += PyRepr(v.list()[i]);
      }
      if (v.is_tuple() && v.list().size() == 1) out += ",";
      out += v.is_tuple() ? ")" : "]";
      return out;
    }
    case Kind::kDict:
    case Kind::kNamespace: {
      const ValueItems& items = v.is_dict() ? v.items() : v.namespace_items();
      std::string out = v.is_dict() ? "{" : "<Namespace {";
      for (size_t i = 0; i < items.size(); ++i) {
        if (i > 0) out += ", ";
        out += PyStrRepr(items[i].first) + ": " + PyRepr(items[i].second);
      }
      out += v.is_dict() ? "}" : "}>";
      return out;
    }
    default:
      return PyStr(v);
  }
}

std::string PyStr(const Value& v) {
  switch (v.kind()) {
    case Kind::kUndefined: return "";
    case Kind::kNone: return "None";
    case Kind::kBool: return v.bool_value() ? "True" : "False";
    case Kind::kInt: return std::to_string(v.int_value());
    case Kind::kFloat: return PyFloatRepr(v.float_value());
    case Kind::kString: return v.string_value();
    case Kind::kCallable: return "<function " + v.function_name() + ">";
    default: return PyRepr(v);
  }
}

namespace {

void JsonString(const std::string& s, bool ensure_ascii, std::string* out) {
  out->push_back('"');
  for (uint32_t cp : DecodeUtf8(s)) {
    char buf[16];
    switch (cp) {
      case '"': *out += "\\\""; break;
      case '\\': *out += "\\\\"; break;
      case '\n': *out += "\\n"; break;
      case '\r': *out += "\\r"; break;
      case '\t': *out += "\\t"; break;
      case '\b': *out += "\\b"; break;
      case '\f': *out += "\\f"; break;
      default:
        if (cp < 0x20 || (ensure_ascii && cp > 0x7E)) {
          if (cp >= 0x10000) {
            const uint32_t c = cp - 0x10000;
            std::snprintf(buf, sizeof(buf), "\\u%04x\\u%04x", 0xD800 + (c >> 10),
                          0xDC00 + (c & 0x3FF));
          } else {
            std::snprintf(buf, sizeof(buf), "\\u%04x", cp);
          }
          *out += buf;
        } else {
          AppendUtf8(cp, out);
        }
    }
  }
  out->push_back('"');
}

Status Dump(const Value& v, const JsonDumpOptions& o, int depth, std::string* out) {
  auto newline = [&](int d) {
    if (!o.indent) return;
    out->push_back('\n');
    for (int i = 0; i < d; ++i) *out += *o.indent;
  };
  switch (v.kind()) {
    case Kind::kNone: *out += "null"; return OkStatus();
    case Kind::kBool: *out += v.bool_value() ? "true" : "false"; return OkStatus();
    case Kind::kInt: *out += std::to_string(v.int_value()); return OkStatus();
    case Kind::kFloat: {
      const double f = v.float_value();
      if (std::isnan(f)) {
        *out += "NaN";
      } else if (std::isinf(f)) {
        *out += f < 0 ? "-Infinity" : "Infinity";
      } else {
        *out += PyFloatRepr(f);
      }
      return OkStatus();
    }
    case Kind::kString: JsonString(v.string_value(), o.ensure_ascii, out); return OkStatus();
    case Kind::kList: {
      if (v.list().empty()) {
        *out += "[]";
        return OkStatus();
      }
      out->push_back('[');
      for (size_t i = 0; i < v.list().size(); ++i) {
        if (i > 0) *out += o.item_separator;
        newline(depth + 1);
        KVFORK_RETURN_IF_ERROR(Dump(v.list()[i], o, depth + 1, out));
      }
      newline(depth);
      out->push_back(']');
      return OkStatus();
    }
    case Kind::kDict: {
      if (v.items().empty()) {
        *out += "{}";
        return OkStatus();
      }
      std::vector<const std::pair<std::string, Value>*> items;
      for (const auto& item : v.items()) items.push_back(&item);
      if (o.sort_keys) {
        std::stable_sort(items.begin(), items.end(),
                         [](auto* a, auto* b) { return a->first < b->first; });
      }
      out->push_back('{');
      for (size_t i = 0; i < items.size(); ++i) {
        if (i > 0) *out += o.item_separator;
        newline(depth + 1);
        JsonString(items[i]->first, o.ensure_ascii, out);
        *out += o.key_separator;
        KVFORK_RETURN_IF_ERROR(Dump(items[i]->second, o, depth + 1, out));
      }
      newline(depth);
      out->push_back('}');
      return OkStatus();
    }
    default:
      return InvalidArgumentError("Object of type " + v.TypeName() + " is not JSON serializable");
  }
}

template <typename J>
Value FromJsonImpl(const J& j) {
  switch (j.type()) {
    case nlohmann::json::value_t::null: return Value::None();
    case nlohmann::json::value_t::boolean: return Value::Bool(j.template get<bool>());
    case nlohmann::json::value_t::number_integer:
      return Value::Int(j.template get<int64_t>());
    case nlohmann::json::value_t::number_unsigned: {
      const uint64_t u = j.template get<uint64_t>();
      // Beyond int64 we keep the magnitude as a float rather than wrap.
      if (u > static_cast<uint64_t>(INT64_MAX)) return Value::Float(static_cast<double>(u));
      return Value::Int(static_cast<int64_t>(u));
    }
    case nlohmann::json::value_t::number_float: return Value::Float(j.template get<double>());
    case nlohmann::json::value_t::string: return Value::String(j.template get<std::string>());
    case nlohmann::json::value_t::array: {
      ValueList items;
      items.reserve(j.size());
      for (const auto& e : j) items.push_back(FromJsonImpl(e));
      return Value::List(std::move(items));
    }
    case nlohmann::json::value_t::object: {
      ValueItems items;
      items.reserve(j.size());
      for (auto it = j.begin(); it != j.end(); ++it) {
        items.emplace_back(it.key(), FromJsonImpl(it.value()));
      }
      return Value::Dict(std::move(items));
    }
    default:
      return Value::None();
  }
}

}  // namespace

StatusOr<std::string> PyJsonDumps(const Value& v, const JsonDumpOptions& options) {
  std::string out;
  KVFORK_RETURN_IF_ERROR(Dump(v, options, 0, &out));
  return out;
}

Value FromJson(const nlohmann::json& j) { return FromJsonImpl(j); }
Value FromJson(const nlohmann::ordered_json& j) { return FromJsonImpl(j); }

}  // namespace kvfork::jinja
