#include "tokenizer/jinja_access.h"

// GCC 12 at -O3 reports a false -Wrestrict inside std::string concatenation
// (GCC bug 105651); nothing here copies overlapping memory.
#pragma GCC diagnostic ignored "-Wrestrict"

#include <set>

#include <utf8proc.h>

#include "tokenizer/jinja_pystr.h"

namespace kvfork::jinja {
namespace {

// object_type_repr() in jinja2.utils: how an undefined's message names the
// object that lacked the attribute.
std::string ObjectRepr(const Value& v) {
  if (v.is_none()) return "'None'";
  return "'" + v.TypeName() + " object'";
}

Value Missing(const Value& obj, const std::string& name) {
  return Value::Undefined(ObjectRepr(obj) + " has no attribute '" + name + "'");
}

const Value* Arg(const CallArgs& args, size_t index, const char* name) {
  if (index < args.positional.size()) return &args.positional[index];
  return args.Keyword(name);
}

StatusOr<std::optional<std::string>> OptionalStringArg(const CallArgs& args, size_t index,
                                                       const char* name, const char* method) {
  const Value* v = Arg(args, index, name);
  if (v == nullptr || v->is_none()) return std::optional<std::string>();
  if (!v->is_string()) {
    return InvalidArgumentError(std::string(method) + "() argument '" + name +
                                "' must be str or None, not " + v->TypeName());
  }
  return std::optional<std::string>(v->string_value());
}

StatusOr<std::string> StringArg(const CallArgs& args, size_t index, const char* name,
                                const char* method) {
  const Value* v = Arg(args, index, name);
  if (v == nullptr) {
    return InvalidArgumentError(std::string(method) + "() missing required argument '" + name +
                                "'");
  }
  if (!v->is_string()) {
    return InvalidArgumentError(std::string(method) + "() argument '" + name +
                                "' must be str, not " + v->TypeName());
  }
  return v->string_value();
}

StatusOr<int64_t> IntArg(const CallArgs& args, size_t index, const char* name, int64_t fallback) {
  const Value* v = Arg(args, index, name);
  if (v == nullptr || v->is_none()) return fallback;
  if (v->kind() != Kind::kInt && v->kind() != Kind::kBool) {
    return InvalidArgumentError(std::string("argument '") + name + "' must be an integer, not " +
                                v->TypeName());
  }
  return v->int_value();
}

Value StringList(const std::vector<std::string>& parts) {
  ValueList items;
  for (const auto& p : parts) items.push_back(Value::String(p));
  return Value::List(std::move(items));
}

bool AllCodepoints(const std::string& s, bool (*pred)(uint32_t)) {
  std::vector<uint32_t> cps = DecodeUtf8(s);
  if (cps.empty()) return false;
  for (uint32_t cp : cps) {
    if (!pred(cp)) return false;
  }
  return true;
}

bool IsAlpha(uint32_t cp) {
  auto c = utf8proc_category(cp);
  return c == UTF8PROC_CATEGORY_LU || c == UTF8PROC_CATEGORY_LL || c == UTF8PROC_CATEGORY_LT ||
         c == UTF8PROC_CATEGORY_LM || c == UTF8PROC_CATEGORY_LO;
}
bool IsDigit(uint32_t cp) { return utf8proc_category(cp) == UTF8PROC_CATEGORY_ND; }
bool IsAlnum(uint32_t cp) { return IsAlpha(cp) || IsDigit(cp); }
bool IsSpace(uint32_t cp) { return IsPySpace(cp); }

// Python's cased-character checks: at least one cased char, none of the other case.
bool CaseIs(const std::string& s, bool upper) {
  bool any = false;
  for (uint32_t cp : DecodeUtf8(s)) {
    const bool is_upper = utf8proc_tolower(cp) != static_cast<int32_t>(cp);
    const bool is_lower = utf8proc_toupper(cp) != static_cast<int32_t>(cp);
    if (upper ? is_lower : is_upper) return false;
    any = any || (upper ? is_upper : is_lower);
  }
  return any;
}

StatusOr<Value> StrMethod(const std::string& s, const std::string& name, const CallArgs& args) {
  const char* m = name.c_str();
  if (name == "startswith" || name == "endswith") {
    const Value* p = Arg(args, 0, "prefix");
    if (p == nullptr) return InvalidArgumentError(name + "() takes at least 1 argument (0 given)");
    if (args.positional.size() > 1) return UnimplementedError("str." + name + " start/end arguments");
    std::vector<std::string> candidates;
    if (p->is_string()) {
      candidates.push_back(p->string_value());
    } else if (p->is_tuple()) {
      for (const Value& c : p->list()) {
        if (!c.is_string()) return InvalidArgumentError("tuple for " + name + " must only contain str");
        candidates.push_back(c.string_value());
      }
    } else {
      return InvalidArgumentError(name + " first arg must be str or a tuple of str, not " +
                                  p->TypeName());
    }
    for (const auto& c : candidates) {
      const bool hit = c.size() <= s.size() &&
                       (name == "startswith" ? s.compare(0, c.size(), c) == 0
                                             : s.compare(s.size() - c.size(), c.size(), c) == 0);
      if (hit) return Value::Bool(true);
    }
    return Value::Bool(false);
  }
  if (name == "strip" || name == "lstrip" || name == "rstrip") {
    KVFORK_ASSIGN_OR_RETURN(auto chars, OptionalStringArg(args, 0, "chars", m));
    return Value::String(PyStrip(s, chars, name != "rstrip", name != "lstrip"));
  }
  if (name == "split" || name == "rsplit") {
    KVFORK_ASSIGN_OR_RETURN(auto sep, OptionalStringArg(args, 0, "sep", m));
    KVFORK_ASSIGN_OR_RETURN(int64_t maxsplit, IntArg(args, 1, "maxsplit", -1));
    if (sep && sep->empty()) return InvalidArgumentError("empty separator");
    return StringList(name == "split" ? PySplit(s, sep, maxsplit) : PyRsplit(s, sep, maxsplit));
  }
  if (name == "splitlines") {
    if (Arg(args, 0, "keepends") != nullptr) return UnimplementedError("str.splitlines(keepends)");
    return StringList(PySplitLines(s));
  }
  if (name == "join") {
    const Value* it = Arg(args, 0, "iterable");
    if (it == nullptr) return InvalidArgumentError("join() takes exactly one argument (0 given)");
    KVFORK_ASSIGN_OR_RETURN(ValueList items, Iterate(*it));
    std::string out;
    for (size_t i = 0; i < items.size(); ++i) {
      if (!items[i].is_string()) {
        return InvalidArgumentError("sequence item " + std::to_string(i) +
                                    ": expected str instance, " + items[i].TypeName() + " found");
      }
      if (i > 0) out += s;
      out += items[i].string_value();
    }
    return Value::String(out);
  }
  if (name == "replace") {
    KVFORK_ASSIGN_OR_RETURN(std::string old_sub, StringArg(args, 0, "old", m));
    KVFORK_ASSIGN_OR_RETURN(std::string new_sub, StringArg(args, 1, "new", m));
    KVFORK_ASSIGN_OR_RETURN(int64_t count, IntArg(args, 2, "count", -1));
    return Value::String(PyReplace(s, old_sub, new_sub, count));
  }
  if (name == "upper") return Value::String(PyUpper(s));
  if (name == "lower") return Value::String(PyLower(s));
  if (name == "title") return Value::String(PyTitle(s));
  if (name == "capitalize") return Value::String(PyCapitalize(s));
  if (name == "find" || name == "rfind" || name == "index" || name == "rindex") {
    KVFORK_ASSIGN_OR_RETURN(std::string sub, StringArg(args, 0, "sub", m));
    if (args.positional.size() > 1) return UnimplementedError("str." + name + " start/end arguments");
    size_t hit = name[0] == 'r' ? s.rfind(sub) : s.find(sub);
    if (hit == std::string::npos) {
      if (name == "index" || name == "rindex") return InvalidArgumentError("substring not found");
      return Value::Int(-1);
    }
    return Value::Int(static_cast<int64_t>(CodepointCount(std::string_view(s).substr(0, hit))));
  }
  if (name == "count") {
    KVFORK_ASSIGN_OR_RETURN(std::string sub, StringArg(args, 0, "sub", m));
    if (sub.empty()) return Value::Int(static_cast<int64_t>(CodepointCount(s)) + 1);
    int64_t n = 0;
    for (size_t p = s.find(sub); p != std::string::npos; p = s.find(sub, p + sub.size())) ++n;
    return Value::Int(n);
  }
  if (name == "removeprefix" || name == "removesuffix") {
    KVFORK_ASSIGN_OR_RETURN(std::string a, StringArg(args, 0, "prefix", m));
    if (name == "removeprefix" && s.compare(0, a.size(), a) == 0) return Value::String(s.substr(a.size()));
    if (name == "removesuffix" && a.size() <= s.size() && !a.empty() &&
        s.compare(s.size() - a.size(), a.size(), a) == 0) {
      return Value::String(s.substr(0, s.size() - a.size()));
    }
    return Value::String(s);
  }
  if (name == "isdigit" || name == "isdecimal" || name == "isnumeric") return Value::Bool(AllCodepoints(s, IsDigit));
  if (name == "isalpha") return Value::Bool(AllCodepoints(s, IsAlpha));
  if (name == "isalnum") return Value::Bool(AllCodepoints(s, IsAlnum));
  if (name == "isspace") return Value::Bool(AllCodepoints(s, IsSpace));
  if (name == "isupper") return Value::Bool(CaseIs(s, true));
  if (name == "islower") return Value::Bool(CaseIs(s, false));
  return UnimplementedError("unsupported construct: method str." + name + "()");
}

const std::set<std::string>& StrMethods() {
  static const std::set<std::string> k = {
      "startswith", "endswith", "strip", "lstrip", "rstrip", "split", "rsplit", "splitlines",
      "join", "replace", "upper", "lower", "title", "capitalize", "find", "rfind", "index",
      "rindex", "count", "removeprefix", "removesuffix", "isdigit", "isdecimal", "isnumeric",
      "isalpha", "isalnum", "isspace", "isupper", "islower",
      // Real str methods we do not implement: calling one is an error.
      "casefold", "center", "encode", "expandtabs", "format", "format_map", "isascii",
      "isidentifier", "isprintable", "istitle", "ljust", "partition", "rjust", "rpartition",
      "swapcase", "translate", "zfill"};
  return k;
}

StatusOr<Value> DictMethod(const Value& d, const std::string& name, const CallArgs& args) {
  if (name == "get") {
    const Value* key = Arg(args, 0, "key");
    if (key == nullptr) return InvalidArgumentError("get expected at least 1 argument, got 0");
    const Value* fallback = Arg(args, 1, "default");
    if (key->is_string()) {
      if (const Value* v = d.Find(key->string_value())) return *v;
    }
    return fallback ? *fallback : Value::None();
  }
  if (name == "items" || name == "keys" || name == "values") {
    ValueList out;
    for (const auto& [k, v] : d.items()) {
      if (name == "items") {
        out.push_back(Value::List({Value::String(k), v}, /*is_tuple=*/true));
      } else {
        out.push_back(name == "keys" ? Value::String(k) : v);
      }
    }
    return Value::List(std::move(out));
  }
  if (name == "copy") return d;
  return UnimplementedError("unsupported construct: method dict." + name + "()");
}

StatusOr<Value> ListMethod(const Value& l, const std::string& name, const CallArgs& args) {
  const Value* x = Arg(args, 0, "value");
  if (x == nullptr) return InvalidArgumentError("list." + name + "() takes exactly one argument");
  int64_t count = 0;
  for (size_t i = 0; i < l.list().size(); ++i) {
    if (PyEquals(l.list()[i], *x)) {
      if (name == "index") return Value::Int(static_cast<int64_t>(i));
      ++count;
    }
  }
  if (name == "index") return InvalidArgumentError(PyRepr(*x) + " is not in list");
  return Value::Int(count);
}

Value Bind(const Value& self, const std::string& type, const std::string& name,
           StatusOr<Value> (*method)(const Value&, const std::string&, const CallArgs&)) {
  return Value::Function(type + "." + name, [self, name, method](const CallArgs& args) {
    return method(self, name, args);
  });
}

StatusOr<Value> StrMethodOnValue(const Value& self, const std::string& name, const CallArgs& args) {
  return StrMethod(self.string_value(), name, args);
}

// Python's slice.indices(): clamps start/stop for a sequence of length n.
Status SliceIndices(const Value& start, const Value& stop, const Value& step, int64_t n,
                    int64_t* b, int64_t* e, int64_t* s) {
  auto get = [](const Value& v, int64_t* out) -> StatusOr<bool> {
    if (v.is_undefined() || v.is_none()) return false;
    if (v.kind() != Kind::kInt && v.kind() != Kind::kBool) {
      return InvalidArgumentError("slice indices must be integers or None, not " + v.TypeName());
    }
    *out = v.int_value();
    return true;
  };
  *s = 1;
  KVFORK_ASSIGN_OR_RETURN(bool has_step, get(step, s));
  (void)has_step;
  if (*s == 0) return InvalidArgumentError("slice step cannot be zero");
  const bool neg = *s < 0;
  int64_t lower = neg ? -1 : 0;
  int64_t upper = neg ? n - 1 : n;
  auto clamp = [&](int64_t v) {
    if (v < 0) {
      v += n;
      return v < lower ? lower : v;
    }
    return v > upper ? upper : v;
  };
  int64_t v = 0;
  KVFORK_ASSIGN_OR_RETURN(bool has_start, get(start, &v));
  *b = has_start ? clamp(v) : (neg ? upper : lower);
  KVFORK_ASSIGN_OR_RETURN(bool has_stop, get(stop, &v));
  *e = has_stop ? clamp(v) : (neg ? lower : upper);
  return OkStatus();
}

}  // namespace

Status UndefinedError(const Value& undefined) {
  return InvalidArgumentError("UndefinedError: " + undefined.undefined_hint());
}

std::vector<std::string> PySplitLines(const std::string& s) {
  std::vector<std::string> out;
  std::vector<uint32_t> cps = DecodeUtf8(s);
  std::vector<uint32_t> line;
  bool pending = false;
  for (size_t i = 0; i < cps.size(); ++i) {
    const uint32_t c = cps[i];
    const bool brk = c == '\n' || c == '\r' || c == 0x0B || c == 0x0C || c == 0x1C || c == 0x1D ||
                     c == 0x1E || c == 0x85 || c == 0x2028 || c == 0x2029;
    if (!brk) {
      line.push_back(c);
      pending = true;
      continue;
    }
    if (c == '\r' && i + 1 < cps.size() && cps[i + 1] == '\n') ++i;
    out.push_back(EncodeUtf8(line));
    line.clear();
    pending = false;
  }
  if (pending) out.push_back(EncodeUtf8(line));
  return out;
}

StatusOr<Value> GetAttr(const Value& obj, const std::string& name) {
  switch (obj.kind()) {
    case Kind::kUndefined:
      return UndefinedError(obj);
    case Kind::kString:
      if (StrMethods().count(name)) return Bind(obj, "str", name, StrMethodOnValue);
      return Missing(obj, name);
    case Kind::kDict: {
      static const std::set<std::string> kMethods = {"get", "items", "keys", "values", "copy"};
      static const std::set<std::string> kMutating = {"pop", "popitem", "setdefault", "update",
                                                      "clear", "fromkeys"};
      if (kMethods.count(name)) return Bind(obj, "dict", name, DictMethod);
      if (kMutating.count(name)) {
        return Value::Undefined("access to attribute '" + name + "' of 'dict' object is unsafe.");
      }
      if (const Value* v = obj.Find(name)) return *v;
      return Missing(obj, name);
    }
    case Kind::kList: {
      static const std::set<std::string> kMutating = {"append", "extend", "insert", "pop",
                                                      "remove", "reverse", "sort", "clear"};
      if (name == "index" || name == "count") return Bind(obj, "list", name, ListMethod);
      if (kMutating.count(name)) {
        return Value::Undefined("access to attribute '" + name + "' of '" + obj.TypeName() +
                                "' object is unsafe.");
      }
      return Missing(obj, name);
    }
    case Kind::kNamespace:
      if (const Value* v = obj.Find(name)) return *v;
      return Missing(obj, name);
    default:
      return Missing(obj, name);
  }
}

StatusOr<Value> GetItem(const Value& obj, const Value& key) {
  if (obj.is_undefined()) return UndefinedError(obj);
  const bool int_key = key.kind() == Kind::kInt || key.kind() == Kind::kBool;
  if ((obj.is_list() || obj.is_string()) && int_key) {
    const int64_t n = obj.is_list() ? static_cast<int64_t>(obj.list().size())
                                    : static_cast<int64_t>(CodepointCount(obj.string_value()));
    int64_t i = key.int_value();
    if (i < 0) i += n;
    if (i < 0 || i >= n) {
      return Value::Undefined(ObjectRepr(obj) + " has no element " + PyRepr(key));
    }
    if (obj.is_list()) return obj.list()[i];
    const std::string& s = obj.string_value();
    if (n == static_cast<int64_t>(s.size())) return Value::String(s.substr(i, 1));
    std::string out;
    AppendUtf8(DecodeUtf8(s)[i], &out);
    return Value::String(out);
  }
  if (obj.is_dict() && key.is_string()) {
    if (const Value* v = obj.Find(key.string_value())) return *v;
  }
  if (key.is_string()) return GetAttr(obj, key.string_value());
  if (key.is_undefined()) return UndefinedError(key);
  return Value::Undefined(ObjectRepr(obj) + " has no element " + PyRepr(key));
}

StatusOr<Value> GetSlice(const Value& obj, const Value& start, const Value& stop,
                         const Value& step) {
  if (obj.is_undefined()) return UndefinedError(obj);
  if (!obj.is_list() && !obj.is_string()) {
    return InvalidArgumentError("'" + obj.TypeName() + "' object is not subscriptable");
  }
  std::vector<uint32_t> cps;
  if (obj.is_string()) cps = DecodeUtf8(obj.string_value());
  const int64_t n = obj.is_list() ? static_cast<int64_t>(obj.list().size())
                                  : static_cast<int64_t>(cps.size());
  int64_t b = 0, e = 0, s = 1;
  KVFORK_RETURN_IF_ERROR(SliceIndices(start, stop, step, n, &b, &e, &s));
  ValueList items;
  std::vector<uint32_t> chars;
  for (int64_t i = b; s > 0 ? i < e : i > e; i += s) {
    if (obj.is_list()) {
      items.push_back(obj.list()[i]);
    } else {
      chars.push_back(cps[i]);
    }
  }
  if (obj.is_string()) return Value::String(EncodeUtf8(chars));
  return Value::List(std::move(items), obj.is_tuple());
}

StatusOr<ValueList> Iterate(const Value& v) {
  switch (v.kind()) {
    case Kind::kUndefined:
      return ValueList();
    case Kind::kList:
      return v.list();
    case Kind::kDict: {
      ValueList keys;
      for (const auto& [k, unused] : v.items()) keys.push_back(Value::String(k));
      return keys;
    }
    case Kind::kString: {
      ValueList chars;
      for (uint32_t cp : DecodeUtf8(v.string_value())) {
        std::string c;
        AppendUtf8(cp, &c);
        chars.push_back(Value::String(c));
      }
      return chars;
    }
    default:
      return InvalidArgumentError("'" + v.TypeName() + "' object is not iterable");
  }
}

StatusOr<bool> Contains(const Value& container, const Value& item) {
  if (container.is_string()) {
    if (item.is_undefined()) return UndefinedError(item);
    if (!item.is_string()) {
      return InvalidArgumentError("'in <string>' requires string as left operand, not " +
                                  item.TypeName());
    }
    return container.string_value().find(item.string_value()) != std::string::npos;
  }
  if (container.is_dict()) {
    return item.is_string() && container.Find(item.string_value()) != nullptr;
  }
  if (container.is_list()) {
    for (const Value& v : container.list()) {
      if (PyEquals(v, item)) return true;
    }
    return false;
  }
  if (container.is_undefined()) return false;
  return InvalidArgumentError("argument of type '" + container.TypeName() + "' is not iterable");
}

StatusOr<int64_t> Length(const Value& v) {
  switch (v.kind()) {
    case Kind::kUndefined: return 0;
    case Kind::kString: return static_cast<int64_t>(CodepointCount(v.string_value()));
    case Kind::kList: return static_cast<int64_t>(v.list().size());
    case Kind::kDict: return static_cast<int64_t>(v.items().size());
    default: return InvalidArgumentError("object of type '" + v.TypeName() + "' has no len()");
  }
}

}  // namespace kvfork::jinja
