#include "tokenizer/jinja_builtins.h"

// GCC 12 at -O3 reports a false -Wrestrict inside std::string concatenation
// (GCC bug 105651); nothing here copies overlapping memory.
#pragma GCC diagnostic ignored "-Wrestrict"

#include <algorithm>
#include <cmath>
#include <map>
#include <set>

#include "tokenizer/jinja_pystr.h"

namespace kvfork::jinja {
namespace {

const Value* Arg(const CallArgs& args, size_t index, const char* name) {
  if (index < args.positional.size()) return &args.positional[index];
  return args.Keyword(name);
}

bool BoolArg(const CallArgs& args, size_t index, const char* name, bool fallback) {
  const Value* v = Arg(args, index, name);
  return v == nullptr ? fallback : v->Truthy();
}

// Args beyond the first `skip` positional ones, for select/map's test/filter.
CallArgs Rest(const CallArgs& args, size_t skip) {
  CallArgs rest;
  for (size_t i = skip; i < args.positional.size(); ++i) rest.positional.push_back(args.positional[i]);
  return rest;
}

// Dotted attribute lookup ("a.b" or "0") as jinja2's make_attrgetter does.
StatusOr<Value> AttrPath(const Value& item, const std::string& path) {
  Value v = item;
  size_t start = 0;
  while (true) {
    size_t dot = path.find('.', start);
    std::string part = path.substr(start, dot == std::string::npos ? std::string::npos : dot - start);
    const bool digits = !part.empty() && std::all_of(part.begin(), part.end(), ::isdigit);
    KVFORK_ASSIGN_OR_RETURN(v, digits ? GetItem(v, Value::Int(std::stoll(part)))
                                      : GetItem(v, Value::String(part)));
    if (dot == std::string::npos) return v;
    start = dot + 1;
  }
}

// Value used for sorting/comparing: lower-cased strings unless case-sensitive.
Value SortKey(const Value& v, bool case_sensitive) {
  if (!case_sensitive && v.is_string()) return Value::String(PyLower(v.string_value()));
  return v;
}

StatusOr<Value> GetAttribute(const Value& item, const Value* attribute) {
  if (attribute == nullptr || attribute->is_none()) return item;
  if (attribute->kind() == Kind::kInt) return GetItem(item, *attribute);
  return AttrPath(item, PyStr(*attribute));
}

StatusOr<ValueList> SortValues(ValueList items, bool case_sensitive, const Value* attribute,
                               bool reverse) {
  std::vector<std::pair<Value, Value>> keyed;
  for (Value& item : items) {
    KVFORK_ASSIGN_OR_RETURN(Value key, GetAttribute(item, attribute));
    keyed.emplace_back(SortKey(key, case_sensitive), std::move(item));
  }
  Status error;
  std::stable_sort(keyed.begin(), keyed.end(), [&](const auto& a, const auto& b) {
    // Python's sort with reverse=True keeps equal items in order, so compare
    // swapped rather than reversing afterwards.
    StatusOr<bool> less = reverse ? PyLess(b.first, a.first) : PyLess(a.first, b.first);
    if (!less.ok()) {
      if (error.ok()) error = less.status();
      return false;
    }
    return *less;
  });
  KVFORK_RETURN_IF_ERROR(error);
  ValueList out;
  for (auto& [k, v] : keyed) out.push_back(std::move(v));
  return out;
}

StatusOr<Value> ToJson(const Value& input, const CallArgs& args) {
  JsonDumpOptions o;
  o.ensure_ascii = BoolArg(args, 0, "ensure_ascii", false);
  const Value* indent = Arg(args, 1, "indent");
  if (indent != nullptr && !indent->is_none()) {
    if (indent->is_string()) {
      o.indent = indent->string_value();
    } else if (indent->kind() == Kind::kInt) {
      o.indent = std::string(std::max<int64_t>(0, indent->int_value()), ' ');
    } else {
      return InvalidArgumentError("tojson indent must be an int or str, not " + indent->TypeName());
    }
  }
  o.item_separator = o.indent ? "," : ", ";
  const Value* seps = Arg(args, 2, "separators");
  if (seps != nullptr && !seps->is_none()) {
    if (!seps->is_list() || seps->list().size() != 2 || !seps->list()[0].is_string() ||
        !seps->list()[1].is_string()) {
      return InvalidArgumentError("tojson separators must be a pair of strings");
    }
    o.item_separator = seps->list()[0].string_value();
    o.key_separator = seps->list()[1].string_value();
  }
  o.sort_keys = BoolArg(args, 3, "sort_keys", false);
  KVFORK_ASSIGN_OR_RETURN(std::string s, PyJsonDumps(input, o));
  return Value::String(std::move(s));
}

StatusOr<Value> Indent(const Value& input, const CallArgs& args) {
  const Value* width = Arg(args, 0, "width");
  std::string indention = "    ";
  if (width != nullptr) {
    indention = width->is_string() ? width->string_value()
                                   : std::string(std::max<int64_t>(0, width->int_value()), ' ');
  }
  const bool first = BoolArg(args, 1, "first", false);
  const bool blank = BoolArg(args, 2, "blank", false);
  // jinja2 appends a newline so that splitlines() keeps a trailing blank line.
  std::vector<std::string> lines = PySplitLines(PyStr(input) + "\n");
  std::string rv;
  if (blank) {
    for (size_t i = 0; i < lines.size(); ++i) rv += (i ? "\n" + indention : "") + lines[i];
  } else {
    rv = lines.empty() ? "" : lines[0];
    for (size_t i = 1; i < lines.size(); ++i) {
      rv += "\n" + (lines[i].empty() ? "" : indention + lines[i]);
    }
  }
  if (first) rv = indention + rv;
  return Value::String(rv);
}

StatusOr<Value> Escape(const Value& input) {
  std::string out;
  for (char c : PyStr(input)) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&#34;"; break;
      case '\'': out += "&#39;"; break;
      default: out.push_back(c);
    }
  }
  return Value::String(out);
}

StatusOr<Value> ToInt(const Value& input, const CallArgs& args) {
  const Value* fallback = Arg(args, 0, "default");
  Value def = fallback ? *fallback : Value::Int(0);
  if (input.kind() == Kind::kInt || input.kind() == Kind::kBool) return Value::Int(input.int_value());
  if (input.kind() == Kind::kFloat) {
    if (!std::isfinite(input.float_value())) return def;
    return Value::Int(static_cast<int64_t>(std::trunc(input.float_value())));
  }
  if (input.is_string()) {
    std::string s = PyStrip(input.string_value(), std::nullopt, true, true);
    std::string digits;
    for (char c : s) {
      if (c != '_') digits.push_back(c);
    }
    char* end = nullptr;
    errno = 0;
    long long v = std::strtoll(digits.c_str(), &end, 10);
    if (!digits.empty() && *end == '\0' && errno == 0) return Value::Int(v);
    double d = std::strtod(digits.c_str(), &end);
    if (!digits.empty() && *end == '\0' && std::isfinite(d)) {
      return Value::Int(static_cast<int64_t>(std::trunc(d)));
    }
  }
  return def;
}

StatusOr<Value> ToFloat(const Value& input, const CallArgs& args) {
  const Value* fallback = Arg(args, 0, "default");
  Value def = fallback ? *fallback : Value::Float(0.0);
  if (input.is_number()) return Value::Float(input.float_value());
  if (input.is_string()) {
    std::string s = PyStrip(input.string_value(), std::nullopt, true, true);
    char* end = nullptr;
    double d = std::strtod(s.c_str(), &end);
    if (!s.empty() && *end == '\0') return Value::Float(d);
  }
  return def;
}

StatusOr<Value> SelectOrReject(const Value& input, const CallArgs& args, bool select,
                               bool by_attr) {
  KVFORK_ASSIGN_OR_RETURN(ValueList items, Iterate(input));
  size_t next = 0;
  std::string attr;
  if (by_attr) {
    if (args.positional.empty()) return InvalidArgumentError("missing attribute for selectattr");
    attr = PyStr(args.positional[0]);
    next = 1;
  }
  std::string test;
  if (next < args.positional.size()) test = PyStr(args.positional[next]);
  CallArgs test_args = Rest(args, next + 1);
  ValueList out;
  for (const Value& item : items) {
    Value probe = item;
    if (by_attr) {
      KVFORK_ASSIGN_OR_RETURN(probe, AttrPath(item, attr));
    }
    bool hit = probe.Truthy();
    if (!test.empty()) {
      KVFORK_ASSIGN_OR_RETURN(hit, ApplyTest(test, probe, test_args));
    }
    if (hit == select) out.push_back(item);
  }
  return Value::List(std::move(out));
}

StatusOr<Value> Map(const Value& input, const CallArgs& args) {
  KVFORK_ASSIGN_OR_RETURN(ValueList items, Iterate(input));
  ValueList out;
  if (const Value* attribute = args.Keyword("attribute")) {
    const Value* fallback = args.Keyword("default");
    for (const Value& item : items) {
      KVFORK_ASSIGN_OR_RETURN(Value v, AttrPath(item, PyStr(*attribute)));
      if (v.is_undefined() && fallback != nullptr) v = *fallback;
      out.push_back(v);
    }
    return Value::List(std::move(out));
  }
  if (args.positional.empty()) return InvalidArgumentError("map requires a filter name or attribute=");
  const std::string filter = PyStr(args.positional[0]);
  CallArgs rest = Rest(args, 1);
  rest.keyword = args.keyword;
  for (const Value& item : items) {
    KVFORK_ASSIGN_OR_RETURN(Value v, ApplyFilter(filter, item, rest));
    out.push_back(v);
  }
  return Value::List(std::move(out));
}

StatusOr<Value> MinMax(const Value& input, const CallArgs& args, bool want_max) {
  KVFORK_ASSIGN_OR_RETURN(ValueList items, Iterate(input));
  if (items.empty()) return Value::Undefined("No aggregated item, sequence was empty.");
  const bool cs = BoolArg(args, 0, "case_sensitive", false);
  const Value* attribute = Arg(args, 1, "attribute");
  Value best = items[0];
  KVFORK_ASSIGN_OR_RETURN(Value best_key, GetAttribute(best, attribute));
  best_key = SortKey(best_key, cs);
  for (size_t i = 1; i < items.size(); ++i) {
    KVFORK_ASSIGN_OR_RETURN(Value key, GetAttribute(items[i], attribute));
    key = SortKey(key, cs);
    KVFORK_ASSIGN_OR_RETURN(bool better, want_max ? PyLess(best_key, key) : PyLess(key, best_key));
    if (better) {
      best = items[i];
      best_key = key;
    }
  }
  return best;
}

StatusOr<Value> Add(const Value& a, const Value& b) {
  if (a.is_number() && b.is_number()) {
    if (a.kind() == Kind::kFloat || b.kind() == Kind::kFloat) {
      return Value::Float(a.float_value() + b.float_value());
    }
    return Value::Int(a.int_value() + b.int_value());
  }
  return InvalidArgumentError("unsupported operand type(s) for +: '" + a.TypeName() + "' and '" +
                              b.TypeName() + "'");
}

using FilterFn = StatusOr<Value> (*)(const Value&, const CallArgs&);

const std::map<std::string, FilterFn>& Filters() {
  static const std::map<std::string, FilterFn> k = {
      {"abs", [](const Value& v, const CallArgs&) -> StatusOr<Value> {
         if (v.kind() == Kind::kFloat) return Value::Float(std::fabs(v.float_value()));
         if (v.is_number()) return Value::Int(std::llabs(v.int_value()));
         return InvalidArgumentError("bad operand type for abs(): '" + v.TypeName() + "'");
       }},
      {"attr", [](const Value& v, const CallArgs& a) -> StatusOr<Value> {
         const Value* name = Arg(a, 0, "name");
         if (name == nullptr) return InvalidArgumentError("attr filter needs a name");
         return GetAttr(v, PyStr(*name));
       }},
      {"capitalize", [](const Value& v, const CallArgs&) -> StatusOr<Value> {
         return Value::String(PyCapitalize(PyStr(v)));
       }},
      {"count", [](const Value& v, const CallArgs&) -> StatusOr<Value> {
         KVFORK_ASSIGN_OR_RETURN(int64_t n, Length(v));
         return Value::Int(n);
       }},
      {"default", [](const Value& v, const CallArgs& a) -> StatusOr<Value> {
         const Value* def = Arg(a, 0, "default_value");
         const bool boolean = BoolArg(a, 1, "boolean", false);
         if (v.is_undefined() || (boolean && !v.Truthy())) return def ? *def : Value::String("");
         return v;
       }},
      {"dictsort", [](const Value& v, const CallArgs& a) -> StatusOr<Value> {
         if (!v.is_dict()) return InvalidArgumentError("dictsort needs a mapping, got " + v.TypeName());
         const bool cs = BoolArg(a, 0, "case_sensitive", false);
         const Value* by = Arg(a, 1, "by");
         const bool by_value = by != nullptr && PyStr(*by) == "value";
         const bool reverse = BoolArg(a, 2, "reverse", false);
         ValueList pairs;
         for (const auto& [k, val] : v.items()) {
           pairs.push_back(Value::List({Value::String(k), val}, true));
         }
         Value index = Value::Int(by_value ? 1 : 0);
         KVFORK_ASSIGN_OR_RETURN(ValueList sorted, SortValues(pairs, cs, &index, reverse));
         return Value::List(std::move(sorted));
       }},
      {"escape", [](const Value& v, const CallArgs&) { return Escape(v); }},
      {"first", [](const Value& v, const CallArgs&) -> StatusOr<Value> {
         KVFORK_ASSIGN_OR_RETURN(ValueList items, Iterate(v));
         if (items.empty()) return Value::Undefined("No first item, sequence was empty.");
         return items.front();
       }},
      {"float", ToFloat},
      {"indent", Indent},
      {"int", ToInt},
      {"items", [](const Value& v, const CallArgs&) -> StatusOr<Value> {
         if (v.is_undefined()) return Value::List({});
         if (!v.is_dict()) return InvalidArgumentError("Can only get item pairs from a mapping.");
         ValueList pairs;
         for (const auto& [k, val] : v.items()) {
           pairs.push_back(Value::List({Value::String(k), val}, true));
         }
         return Value::List(std::move(pairs));
       }},
      {"join", [](const Value& v, const CallArgs& a) -> StatusOr<Value> {
         const Value* sep = Arg(a, 0, "d");
         const Value* attribute = Arg(a, 1, "attribute");
         KVFORK_ASSIGN_OR_RETURN(ValueList items, Iterate(v));
         std::string out;
         for (size_t i = 0; i < items.size(); ++i) {
           KVFORK_ASSIGN_OR_RETURN(Value item, GetAttribute(items[i], attribute));
           if (i > 0 && sep != nullptr) out += PyStr(*sep);
           out += PyStr(item);
         }
         return Value::String(out);
       }},
      {"last", [](const Value& v, const CallArgs&) -> StatusOr<Value> {
         KVFORK_ASSIGN_OR_RETURN(ValueList items, Iterate(v));
         if (items.empty()) return Value::Undefined("No last item, sequence was empty.");
         return items.back();
       }},
      {"length", [](const Value& v, const CallArgs&) -> StatusOr<Value> {
         KVFORK_ASSIGN_OR_RETURN(int64_t n, Length(v));
         return Value::Int(n);
       }},
      {"list", [](const Value& v, const CallArgs&) -> StatusOr<Value> {
         KVFORK_ASSIGN_OR_RETURN(ValueList items, Iterate(v));
         return Value::List(std::move(items));
       }},
      {"lower", [](const Value& v, const CallArgs&) -> StatusOr<Value> {
         return Value::String(PyLower(PyStr(v)));
       }},
      {"map", Map},
      {"max", [](const Value& v, const CallArgs& a) { return MinMax(v, a, true); }},
      {"min", [](const Value& v, const CallArgs& a) { return MinMax(v, a, false); }},
      {"reject", [](const Value& v, const CallArgs& a) { return SelectOrReject(v, a, false, false); }},
      {"rejectattr", [](const Value& v, const CallArgs& a) { return SelectOrReject(v, a, false, true); }},
      {"replace", [](const Value& v, const CallArgs& a) -> StatusOr<Value> {
         const Value* old_sub = Arg(a, 0, "old");
         const Value* new_sub = Arg(a, 1, "new");
         const Value* count = Arg(a, 2, "count");
         if (old_sub == nullptr || new_sub == nullptr) {
           return InvalidArgumentError("replace filter needs old and new");
         }
         return Value::String(PyReplace(PyStr(v), PyStr(*old_sub), PyStr(*new_sub),
                                        count && !count->is_none() ? count->int_value() : -1));
       }},
      {"reverse", [](const Value& v, const CallArgs&) -> StatusOr<Value> {
         if (v.is_string()) {
           std::vector<uint32_t> cps = DecodeUtf8(v.string_value());
           std::reverse(cps.begin(), cps.end());
           return Value::String(EncodeUtf8(cps));
         }
         KVFORK_ASSIGN_OR_RETURN(ValueList items, Iterate(v));
         std::reverse(items.begin(), items.end());
         return Value::List(std::move(items));
       }},
      {"round", [](const Value& v, const CallArgs& a) -> StatusOr<Value> {
         const Value* precision = Arg(a, 0, "precision");
         const Value* method = Arg(a, 1, "method");
         const std::string m = method ? PyStr(*method) : "common";
         if (!v.is_number()) return InvalidArgumentError("round needs a number, got " + v.TypeName());
         const int64_t p = precision ? precision->int_value() : 0;
         const double scale = std::pow(10.0, static_cast<double>(p));
         double x = v.float_value() * scale;
         if (m == "common") {
           x = std::nearbyint(x);  // Python's round(): half to even
         } else if (m == "ceil") {
           x = std::ceil(x);
         } else if (m == "floor") {
           x = std::floor(x);
         } else {
           return InvalidArgumentError("method must be 'common', 'ceil' or 'floor'");
         }
         return Value::Float(x / scale);
       }},
      {"safe", [](const Value& v, const CallArgs&) -> StatusOr<Value> { return v; }},
      {"select", [](const Value& v, const CallArgs& a) { return SelectOrReject(v, a, true, false); }},
      {"selectattr", [](const Value& v, const CallArgs& a) { return SelectOrReject(v, a, true, true); }},
      {"sort", [](const Value& v, const CallArgs& a) -> StatusOr<Value> {
         KVFORK_ASSIGN_OR_RETURN(ValueList items, Iterate(v));
         KVFORK_ASSIGN_OR_RETURN(ValueList sorted,
                                 SortValues(std::move(items), BoolArg(a, 1, "case_sensitive", false),
                                            Arg(a, 2, "attribute"), BoolArg(a, 0, "reverse", false)));
         return Value::List(std::move(sorted));
       }},
      {"string", [](const Value& v, const CallArgs&) -> StatusOr<Value> {
         return Value::String(PyStr(v));
       }},
      {"sum", [](const Value& v, const CallArgs& a) -> StatusOr<Value> {
         KVFORK_ASSIGN_OR_RETURN(ValueList items, Iterate(v));
         const Value* attribute = Arg(a, 0, "attribute");
         const Value* start = Arg(a, 1, "start");
         Value total = start ? *start : Value::Int(0);
         for (const Value& item : items) {
           KVFORK_ASSIGN_OR_RETURN(Value x, GetAttribute(item, attribute));
           KVFORK_ASSIGN_OR_RETURN(total, Add(total, x));
         }
         return total;
       }},
      {"title", [](const Value& v, const CallArgs&) -> StatusOr<Value> {
         return Value::String(PyTitle(PyStr(v)));
       }},
      {"tojson", ToJson},
      {"trim", [](const Value& v, const CallArgs& a) -> StatusOr<Value> {
         const Value* chars = Arg(a, 0, "chars");
         std::optional<std::string> set;
         if (chars != nullptr && !chars->is_none()) set = PyStr(*chars);
         return Value::String(PyStrip(PyStr(v), set, true, true));
       }},
      {"unique", [](const Value& v, const CallArgs& a) -> StatusOr<Value> {
         KVFORK_ASSIGN_OR_RETURN(ValueList items, Iterate(v));
         const bool cs = BoolArg(a, 0, "case_sensitive", false);
         const Value* attribute = Arg(a, 1, "attribute");
         ValueList out;
         ValueList seen;
         for (const Value& item : items) {
           KVFORK_ASSIGN_OR_RETURN(Value key, GetAttribute(item, attribute));
           key = SortKey(key, cs);
           bool dup = false;
           for (const Value& s : seen) dup = dup || PyEquals(s, key);
           if (dup) continue;
           seen.push_back(key);
           out.push_back(item);
         }
         return Value::List(std::move(out));
       }},
      {"upper", [](const Value& v, const CallArgs&) -> StatusOr<Value> {
         return Value::String(PyUpper(PyStr(v)));
       }},
      {"wordcount", [](const Value& v, const CallArgs&) -> StatusOr<Value> {
         // jinja2 counts \w+ runs; whitespace-separated words agree for text.
         return Value::Int(static_cast<int64_t>(PySplit(PyStr(v), std::nullopt, -1).size()));
       }},
  };
  return k;
}

const std::map<std::string, std::string>& FilterAliases() {
  static const std::map<std::string, std::string> k = {{"d", "default"}, {"e", "escape"}};
  return k;
}

StatusOr<bool> Compare(const std::string& op, const Value& a, const Value& b) {
  if (op == "==") return PyEquals(a, b);
  if (op == "!=") return !PyEquals(a, b);
  if (a.is_undefined()) return UndefinedError(a);
  if (b.is_undefined()) return UndefinedError(b);
  if (op == "<") return PyLess(a, b);
  if (op == ">") return PyLess(b, a);
  KVFORK_ASSIGN_OR_RETURN(bool less, op == "<=" ? PyLess(b, a) : PyLess(a, b));
  return !less;
}

StatusOr<const Value*> TestArg(const CallArgs& args, const std::string& test) {
  if (args.positional.empty()) {
    return InvalidArgumentError("test '" + test + "' needs an argument");
  }
  return &args.positional[0];
}

}  // namespace

bool HasFilter(const std::string& name) {
  return Filters().count(name) > 0 || FilterAliases().count(name) > 0;
}

StatusOr<Value> ApplyFilter(const std::string& name, const Value& input, const CallArgs& args) {
  auto alias = FilterAliases().find(name);
  const std::string& real = alias == FilterAliases().end() ? name : alias->second;
  auto it = Filters().find(real);
  if (it == Filters().end()) return UnimplementedError("unsupported construct: filter '" + name + "'");
  // Filters other than default/length/count/list/items/join see undefined
  // as an error only when they use it, like jinja2: str(undefined) is "".
  return it->second(input, args);
}

bool HasTest(const std::string& name) {
  static const std::set<std::string> k = {
      "boolean", "callable", "defined", "divisibleby", "eq", "equalto", "==", "escaped", "even",
      "false", "filter", "float", "ge", ">=", "gt", "greaterthan", ">", "in", "integer",
      "iterable", "le", "<=", "lower", "lt", "lessthan", "<", "mapping", "ne", "!=", "none",
      "number", "odd", "sameas", "sequence", "string", "test", "true", "undefined", "upper"};
  return k.count(name) > 0;
}

StatusOr<bool> ApplyTest(const std::string& name, const Value& v, const CallArgs& args) {
  if (name == "defined") return !v.is_undefined();
  if (name == "undefined") return v.is_undefined();
  if (name == "none") return v.is_none();
  if (name == "boolean") return v.kind() == Kind::kBool;
  if (name == "true") return v.kind() == Kind::kBool && v.bool_value();
  if (name == "false") return v.kind() == Kind::kBool && !v.bool_value();
  if (name == "integer") return v.kind() == Kind::kInt;
  if (name == "float") return v.kind() == Kind::kFloat;
  if (name == "number") return v.is_number();
  if (name == "string") return v.is_string();
  if (name == "mapping") return v.is_dict();
  if (name == "iterable") return v.is_undefined() || v.is_string() || v.is_list() || v.is_dict();
  if (name == "sequence") return v.is_string() || v.is_list() || v.is_dict();
  if (name == "callable") return v.kind() == Kind::kCallable;
  if (name == "escaped") return false;
  if (name == "lower" || name == "upper") {
    const std::string s = PyStr(v);
    return name == "lower" ? PyLower(s) == s : PyUpper(s) == s;
  }
  if (name == "filter") return HasFilter(PyStr(v));
  if (name == "test") return HasTest(PyStr(v));
  if (name == "odd" || name == "even") {
    if (v.kind() != Kind::kInt && v.kind() != Kind::kBool) {
      return InvalidArgumentError("test '" + name + "' needs an integer, got " + v.TypeName());
    }
    return (v.int_value() % 2 != 0) == (name == "odd");
  }
  KVFORK_ASSIGN_OR_RETURN(const Value* other, TestArg(args, name));
  if (name == "divisibleby") {
    if (!v.is_number() || !other->is_number() || other->int_value() == 0) {
      return InvalidArgumentError("divisibleby needs non-zero integers");
    }
    return v.int_value() % other->int_value() == 0;
  }
  if (name == "in") return Contains(*other, v);
  if (name == "sameas") {
    // `is` identity: singletons compare by value; containers are not tracked.
    if (v.is_none() || other->is_none() || v.kind() == Kind::kBool) {
      return v.kind() == other->kind() && PyEquals(v, *other);
    }
    return UnimplementedError("unsupported construct: 'sameas' test on " + v.TypeName());
  }
  static const std::map<std::string, std::string> kOps = {
      {"eq", "=="}, {"equalto", "=="}, {"==", "=="}, {"ne", "!="}, {"!=", "!="},
      {"lt", "<"},  {"lessthan", "<"}, {"<", "<"},   {"le", "<="}, {"<=", "<="},
      {"gt", ">"},  {"greaterthan", ">"}, {">", ">"}, {"ge", ">="}, {">=", ">="}};
  auto op = kOps.find(name);
  if (op != kOps.end()) return Compare(op->second, v, *other);
  return UnimplementedError("unsupported construct: test '" + name + "'");
}

Value Global(const std::string& name, std::time_t now) {
  if (name == "raise_exception") {
    return Value::Function(name, [](const CallArgs& args) -> StatusOr<Value> {
      const Value* msg = Arg(args, 0, "message");
      return InvalidArgumentError("raise_exception: " + (msg ? PyStr(*msg) : std::string()));
    });
  }
  if (name == "strftime_now") {
    return Value::Function(name, [now](const CallArgs& args) -> StatusOr<Value> {
      const Value* fmt = Arg(args, 0, "format");
      if (fmt == nullptr || !fmt->is_string()) {
        return InvalidArgumentError("strftime_now() needs a format string");
      }
      std::tm tm{};
      localtime_r(&now, &tm);
      char buf[512];
      size_t n = std::strftime(buf, sizeof(buf), fmt->string_value().c_str(), &tm);
      if (n == 0 && !fmt->string_value().empty()) {
        return InvalidArgumentError("strftime_now format too long or empty result: " +
                                    fmt->string_value());
      }
      return Value::String(std::string(buf, n));
    });
  }
  if (name == "namespace" || name == "dict") {
    const bool ns = name == "namespace";
    return Value::Function(name, [ns](const CallArgs& args) -> StatusOr<Value> {
      ValueItems items;
      for (const Value& p : args.positional) {
        if (!p.is_dict()) return InvalidArgumentError("namespace()/dict() positional argument must be a mapping");
        for (const auto& kv : p.items()) items.push_back(kv);
      }
      for (const auto& [k, v] : args.keyword) {
        bool replaced = false;
        for (auto& kv : items) {
          if (kv.first == k) {
            kv.second = v;
            replaced = true;
          }
        }
        if (!replaced) items.emplace_back(k, v);
      }
      return ns ? Value::Namespace(std::move(items)) : Value::Dict(std::move(items));
    });
  }
  if (name == "range") {
    return Value::Function(name, [](const CallArgs& args) -> StatusOr<Value> {
      std::vector<int64_t> a;
      for (const Value& v : args.positional) {
        if (v.kind() != Kind::kInt && v.kind() != Kind::kBool) {
          return InvalidArgumentError("range() needs integers, got " + v.TypeName());
        }
        a.push_back(v.int_value());
      }
      if (a.empty() || a.size() > 3) return InvalidArgumentError("range() takes 1 to 3 arguments");
      const int64_t start = a.size() == 1 ? 0 : a[0];
      const int64_t stop = a.size() == 1 ? a[0] : a[1];
      const int64_t step = a.size() == 3 ? a[2] : 1;
      if (step == 0) return InvalidArgumentError("range() arg 3 must not be zero");
      ValueList out;
      // The sandbox caps range() at 100000 items (MAX_RANGE).
      for (int64_t i = start; step > 0 ? i < stop : i > stop; i += step) {
        if (out.size() >= 100000) return InvalidArgumentError("Range too big. The sandbox blocks ranges larger than MAX_RANGE (100000).");
        out.push_back(Value::Int(i));
      }
      return Value::List(std::move(out));
    });
  }
  if (name == "lipsum" || name == "cycler" || name == "joiner") {
    return Value::Function(name, [name](const CallArgs&) -> StatusOr<Value> {
      return UnimplementedError("unsupported construct: global '" + name + "()'");
    });
  }
  return Value::Undefined("'" + name + "' is undefined");
}

}  // namespace kvfork::jinja
