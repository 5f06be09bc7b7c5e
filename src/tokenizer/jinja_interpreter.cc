#include "tokenizer/jinja_interpreter.h"

// GCC 12 at -O3 reports a false -Wrestrict inside std::string concatenation
// (GCC bug 105651); nothing here copies overlapping memory.
#pragma GCC diagnostic ignored "-Wrestrict"

#include <cmath>
#include <map>
#include <memory>

#include "tokenizer/jinja_access.h"
#include "tokenizer/jinja_builtins.h"

namespace kvfork::jinja {
namespace {

Status AtLine(int line, const Status& s) {
  if (s.ok() || s.message().rfind("chat template line ", 0) == 0) return s;
  return Status(s.code(), "chat template line " + std::to_string(line) + ": " + s.message());
}

struct Scope {
  std::map<std::string, Value> vars;
  std::shared_ptr<Scope> parent;

  const Value* Find(const std::string& name) const {
    for (const Scope* s = this; s != nullptr; s = s->parent.get()) {
      auto it = s->vars.find(name);
      if (it != s->vars.end()) return &it->second;
    }
    return nullptr;
  }
};
using ScopePtr = std::shared_ptr<Scope>;

enum class Flow { kNormal, kBreak, kContinue };

StatusOr<Value> Arith(const std::string& op, const Value& a, const Value& b) {
  if (a.is_undefined()) return UndefinedError(a);
  if (b.is_undefined()) return UndefinedError(b);
  auto type_error = [&]() {
    return InvalidArgumentError("unsupported operand type(s) for " + op + ": '" + a.TypeName() +
                                "' and '" + b.TypeName() + "'");
  };
  if (op == "+") {
    if (a.is_string() && b.is_string()) return Value::String(a.string_value() + b.string_value());
    if (a.is_list() && b.is_list() && a.is_tuple() == b.is_tuple()) {
      ValueList items = a.list();
      items.insert(items.end(), b.list().begin(), b.list().end());
      return Value::List(std::move(items), a.is_tuple());
    }
    if (a.is_string() || b.is_string()) {
      if (a.is_string()) {
        return InvalidArgumentError("can only concatenate str (not \"" + b.TypeName() +
                                    "\") to str");
      }
      return type_error();
    }
  }
  if (op == "*" && ((a.is_string() || a.is_list()) != (b.is_string() || b.is_list()))) {
    const Value& seq = a.is_string() || a.is_list() ? a : b;
    const Value& n = a.is_string() || a.is_list() ? b : a;
    if (n.kind() != Kind::kInt && n.kind() != Kind::kBool) return type_error();
    const int64_t times = n.int_value();
    if (times > 0 && (seq.is_string() ? seq.string_value().size() : seq.list().size()) * times >
                         (size_t{1} << 26)) {
      return InvalidArgumentError("repeated sequence too large");
    }
    if (seq.is_string()) {
      std::string out;
      for (int64_t i = 0; i < times; ++i) out += seq.string_value();
      return Value::String(out);
    }
    ValueList out;
    for (int64_t i = 0; i < times; ++i) out.insert(out.end(), seq.list().begin(), seq.list().end());
    return Value::List(std::move(out), seq.is_tuple());
  }
  if (op == "%" && a.is_string()) {
    return UnimplementedError("unsupported construct: printf-style '%' string formatting");
  }
  if (!a.is_number() || !b.is_number()) return type_error();
  const bool floats = a.kind() == Kind::kFloat || b.kind() == Kind::kFloat;
  if (op == "/") {
    if (b.float_value() == 0) return InvalidArgumentError("ZeroDivisionError: division by zero");
    return Value::Float(a.float_value() / b.float_value());
  }
  if (op == "**") {
    if (!floats && b.int_value() >= 0) {
      int64_t r = 1;
      for (int64_t i = 0; i < b.int_value(); ++i) {
        if (__builtin_mul_overflow(r, a.int_value(), &r)) {
          return UnimplementedError("integer result beyond 64 bits");
        }
      }
      return Value::Int(r);
    }
    return Value::Float(std::pow(a.float_value(), b.float_value()));
  }
  if (floats) {
    const double x = a.float_value();
    const double y = b.float_value();
    if (op == "+") return Value::Float(x + y);
    if (op == "-") return Value::Float(x - y);
    if (op == "*") return Value::Float(x * y);
    if (y == 0) return InvalidArgumentError("ZeroDivisionError: float modulo");
    if (op == "//") return Value::Float(std::floor(x / y));
    double m = std::fmod(x, y);
    if (m != 0 && ((m < 0) != (y < 0))) m += y;  // Python's sign follows the divisor
    return Value::Float(m);
  }
  const int64_t x = a.int_value();
  const int64_t y = b.int_value();
  int64_t r = 0;
  if (op == "+" || op == "-" || op == "*") {
    const bool overflow = op == "+"   ? __builtin_add_overflow(x, y, &r)
                          : op == "-" ? __builtin_sub_overflow(x, y, &r)
                                      : __builtin_mul_overflow(x, y, &r);
    if (overflow) return UnimplementedError("integer result beyond 64 bits");
    return Value::Int(r);
  }
  if (y == 0) return InvalidArgumentError("ZeroDivisionError: integer division or modulo by zero");
  int64_t q = x / y;
  int64_t m = x % y;
  if (m != 0 && ((m < 0) != (y < 0))) {
    --q;
    m += y;
  }
  return Value::Int(op == "//" ? q : m);
}

class Renderer {
 public:
  Renderer(const RenderOptions& options) : options_(options) {}

  Status Exec(const Body& body, const ScopePtr& scope, std::string* out) {
    for (const NodePtr& node : body) {
      KVFORK_RETURN_IF_ERROR(AtLine(node->line, ExecNode(*node, scope, out)));
      if (flow_ != Flow::kNormal) return OkStatus();
    }
    return OkStatus();
  }

 private:
  Status Assign(const std::vector<std::string>& targets, const Value& value, Scope* scope) {
    if (targets.size() == 1) {
      scope->vars[targets[0]] = value;
      return OkStatus();
    }
    KVFORK_ASSIGN_OR_RETURN(ValueList items, Iterate(value));
    if (items.size() != targets.size()) {
      return InvalidArgumentError("cannot unpack " + std::to_string(items.size()) +
                                  " values into " + std::to_string(targets.size()) + " names");
    }
    for (size_t i = 0; i < targets.size(); ++i) scope->vars[targets[i]] = items[i];
    return OkStatus();
  }

  Status ExecNode(const Node& n, const ScopePtr& scope, std::string* out) {
    switch (n.type) {
      case NodeType::kText:
        *out += n.text;
        return OkStatus();
      case NodeType::kOutput: {
        KVFORK_ASSIGN_OR_RETURN(Value v, Eval(*n.expr, scope));
        *out += PyStr(v);
        return OkStatus();
      }
      case NodeType::kIf:
        for (size_t i = 0; i < n.conditions.size(); ++i) {
          KVFORK_ASSIGN_OR_RETURN(Value c, Eval(*n.conditions[i], scope));
          if (c.Truthy()) return Exec(n.bodies[i], scope, out);
        }
        return Exec(n.else_body, scope, out);
      case NodeType::kFor:
        return ExecFor(n, scope, out);
      case NodeType::kSet: {
        KVFORK_ASSIGN_OR_RETURN(Value v, Eval(*n.expr, scope));
        if (n.attr.empty()) return Assign(n.targets, v, scope.get());
        const Value* ns = scope->Find(n.targets[0]);
        if (ns == nullptr) ns = &(globals_[n.targets[0]] = Global(n.targets[0], options_.now));
        if (ns->kind() != Kind::kNamespace) {
          return InvalidArgumentError("cannot assign attribute on non-namespace object '" +
                                      n.targets[0] + "'");
        }
        for (auto& [k, old] : ns->namespace_items()) {
          if (k == n.attr) {
            old = v;
            return OkStatus();
          }
        }
        ns->namespace_items().emplace_back(n.attr, v);
        return OkStatus();
      }
      case NodeType::kSetBlock: {
        std::string captured;
        KVFORK_RETURN_IF_ERROR(Exec(n.body, scope, &captured));
        scope->vars[n.targets[0]] = Value::String(captured);
        return OkStatus();
      }
      case NodeType::kMacro:
        scope->vars[n.text] = MakeMacro(n, scope);
        return OkStatus();
      case NodeType::kBreak:
      case NodeType::kContinue:
        if (loop_depth_ == 0) {
          return InvalidArgumentError("'" + std::string(n.type == NodeType::kBreak ? "break" : "continue") +
                                      "' outside of a loop");
        }
        flow_ = n.type == NodeType::kBreak ? Flow::kBreak : Flow::kContinue;
        return OkStatus();
      case NodeType::kScope: {
        auto inner = std::make_shared<Scope>();
        inner->parent = scope;
        for (const auto& [name, expr] : n.params) {
          KVFORK_ASSIGN_OR_RETURN(Value v, Eval(*expr, scope));
          inner->vars[name] = v;
        }
        return Exec(n.body, n.params.empty() ? scope : inner, out);
      }
      case NodeType::kFilterBlock: {
        std::string captured;
        KVFORK_RETURN_IF_ERROR(Exec(n.body, scope, &captured));
        KVFORK_ASSIGN_OR_RETURN(Value v, EvalFilterChain(*n.expr, Value::String(captured), scope));
        *out += PyStr(v);
        return OkStatus();
      }
    }
    return InternalError("unknown node");
  }

  Status ExecFor(const Node& n, const ScopePtr& scope, std::string* out) {
    KVFORK_ASSIGN_OR_RETURN(Value iterable, Eval(*n.expr, scope));
    KVFORK_ASSIGN_OR_RETURN(ValueList all, Iterate(iterable));
    ValueList items;
    if (n.cond) {
      for (const Value& item : all) {
        auto probe = std::make_shared<Scope>();
        probe->parent = scope;
        KVFORK_RETURN_IF_ERROR(Assign(n.targets, item, probe.get()));
        KVFORK_ASSIGN_OR_RETURN(Value keep, Eval(*n.cond, probe));
        if (keep.Truthy()) items.push_back(item);
      }
    } else {
      items = std::move(all);
    }
    if (items.empty()) return Exec(n.else_body, scope, out);
    const int64_t length = static_cast<int64_t>(items.size());
    ++loop_depth_;
    for (int64_t i = 0; i < length; ++i) {
      auto iter = std::make_shared<Scope>();
      iter->parent = scope;
      KVFORK_RETURN_IF_ERROR(Assign(n.targets, items[i], iter.get()));
      ValueList cycle_items;
      ValueItems loop = {
          {"index0", Value::Int(i)},
          {"index", Value::Int(i + 1)},
          {"revindex0", Value::Int(length - i - 1)},
          {"revindex", Value::Int(length - i)},
          {"first", Value::Bool(i == 0)},
          {"last", Value::Bool(i == length - 1)},
          {"length", Value::Int(length)},
          {"depth", Value::Int(1)},
          {"depth0", Value::Int(0)},
          {"previtem", i > 0 ? items[i - 1] : Value::Undefined("there is no previous item")},
          {"nextitem", i + 1 < length ? items[i + 1] : Value::Undefined("there is no next item")},
          {"cycle", Value::Function("loop.cycle", [i](const CallArgs& args) -> StatusOr<Value> {
             if (args.positional.empty()) return InvalidArgumentError("no items for cycling given");
             return args.positional[i % args.positional.size()];
           })},
      };
      iter->vars["loop"] = Value::Dict(std::move(loop));
      Status s = Exec(n.body, iter, out);
      if (!s.ok()) {
        --loop_depth_;
        return s;
      }
      const Flow flow = flow_;
      flow_ = Flow::kNormal;
      if (flow == Flow::kBreak) break;
    }
    --loop_depth_;
    return OkStatus();
  }

  // The macro lives in a variable of its closure scope, so it holds that
  // scope weakly (a strong capture is a cycle: every render that defines a
  // macro would leak both); the renderer keeps the scope alive instead, and
  // macros, which capture the renderer, never outlive it.
  Value MakeMacro(const Node& n, const ScopePtr& closure) {
    const Node* node = &n;
    macro_closures_.push_back(closure);
    std::weak_ptr<Scope> weak_closure = closure;
    return Value::Function(n.text, [this, node, weak_closure](const CallArgs& args) -> StatusOr<Value> {
      if (args.positional.size() > node->params.size()) {
        return InvalidArgumentError("macro '" + node->text + "' takes not more than " +
                                    std::to_string(node->params.size()) + " argument(s)");
      }
      auto scope = std::make_shared<Scope>();
      scope->parent = weak_closure.lock();
      KVFORK_CHECK(scope->parent != nullptr);  // kept by macro_closures_
      for (const auto& [key, value] : args.keyword) {
        bool known = false;
        for (const auto& p : node->params) known = known || p.first == key;
        if (!known) {
          return InvalidArgumentError("macro '" + node->text + "' takes no keyword argument '" +
                                      key + "'");
        }
      }
      for (size_t i = 0; i < node->params.size(); ++i) {
        const auto& [name, def] = node->params[i];
        if (i < args.positional.size()) {
          scope->vars[name] = args.positional[i];
        } else if (const Value* kw = args.Keyword(name)) {
          scope->vars[name] = *kw;
        } else if (def) {
          KVFORK_ASSIGN_OR_RETURN(Value v, Eval(*def, scope));
          scope->vars[name] = v;
        } else {
          scope->vars[name] = Value::Undefined("parameter '" + name + "' was not provided");
        }
      }
      std::string out;
      const Flow saved_flow = flow_;
      const int saved_depth = loop_depth_;
      loop_depth_ = 0;
      Status s = Exec(node->body, scope, &out);
      flow_ = saved_flow;
      loop_depth_ = saved_depth;
      KVFORK_RETURN_IF_ERROR(s);
      return Value::String(out);
    });
  }

  StatusOr<CallArgs> EvalArgs(const Expr& e, size_t first, const ScopePtr& scope) {
    CallArgs args;
    for (size_t i = first; i < e.args.size(); ++i) {
      KVFORK_ASSIGN_OR_RETURN(Value v, Eval(*e.args[i], scope));
      args.positional.push_back(v);
    }
    for (const auto& [k, expr] : e.kwargs) {
      KVFORK_ASSIGN_OR_RETURN(Value v, Eval(*expr, scope));
      args.keyword.emplace_back(k, v);
    }
    return args;
  }

  // A {% filter %} chain: the innermost filter has a null input slot.
  StatusOr<Value> EvalFilterChain(const Expr& e, const Value& input, const ScopePtr& scope) {
    Value in = input;
    if (e.args[0]) {
      KVFORK_ASSIGN_OR_RETURN(in, EvalFilterChain(*e.args[0], input, scope));
    }
    KVFORK_ASSIGN_OR_RETURN(CallArgs args, EvalArgs(e, 1, scope));
    return ApplyFilter(e.name, in, args);
  }

  StatusOr<Value> Eval(const Expr& e, const ScopePtr& scope) {
    StatusOr<Value> v = EvalInner(e, scope);
    if (!v.ok()) return AtLine(e.line, v.status());
    return v;
  }

  StatusOr<Value> EvalInner(const Expr& e, const ScopePtr& scope) {
    switch (e.type) {
      case ExprType::kConst:
        return e.value;
      case ExprType::kName: {
        if (const Value* v = scope->Find(e.name)) return *v;
        auto it = globals_.find(e.name);
        if (it == globals_.end()) it = globals_.emplace(e.name, Global(e.name, options_.now)).first;
        return it->second;
      }
      case ExprType::kList:
      case ExprType::kTuple: {
        ValueList items;
        for (const auto& a : e.args) {
          KVFORK_ASSIGN_OR_RETURN(Value v, Eval(*a, scope));
          items.push_back(v);
        }
        return Value::List(std::move(items), e.type == ExprType::kTuple);
      }
      case ExprType::kDict: {
        ValueItems items;
        for (size_t i = 0; i + 1 < e.args.size(); i += 2) {
          KVFORK_ASSIGN_OR_RETURN(Value k, Eval(*e.args[i], scope));
          KVFORK_ASSIGN_OR_RETURN(Value v, Eval(*e.args[i + 1], scope));
          if (!k.is_string()) return UnimplementedError("unsupported construct: non-string dict key");
          bool replaced = false;
          for (auto& kv : items) {
            if (kv.first == k.string_value()) {
              kv.second = v;
              replaced = true;
            }
          }
          if (!replaced) items.emplace_back(k.string_value(), v);
        }
        return Value::Dict(std::move(items));
      }
      case ExprType::kGetAttr: {
        KVFORK_ASSIGN_OR_RETURN(Value obj, Eval(*e.args[0], scope));
        return GetAttr(obj, e.name);
      }
      case ExprType::kGetItem: {
        KVFORK_ASSIGN_OR_RETURN(Value obj, Eval(*e.args[0], scope));
        KVFORK_ASSIGN_OR_RETURN(Value key, Eval(*e.args[1], scope));
        return GetItem(obj, key);
      }
      case ExprType::kSlice: {
        KVFORK_ASSIGN_OR_RETURN(Value obj, Eval(*e.args[0], scope));
        Value parts[3];
        for (int i = 0; i < 3; ++i) {
          if (e.args[i + 1]) {
            KVFORK_ASSIGN_OR_RETURN(parts[i], Eval(*e.args[i + 1], scope));
          }
        }
        return GetSlice(obj, parts[0], parts[1], parts[2]);
      }
      case ExprType::kCall: {
        KVFORK_ASSIGN_OR_RETURN(Value callee, Eval(*e.args[0], scope));
        KVFORK_ASSIGN_OR_RETURN(CallArgs args, EvalArgs(e, 1, scope));
        if (callee.is_undefined()) return UndefinedError(callee);
        if (callee.kind() != Kind::kCallable) {
          return InvalidArgumentError("'" + callee.TypeName() + "' object is not callable");
        }
        return callee.function()(args);
      }
      case ExprType::kFilter: {
        KVFORK_ASSIGN_OR_RETURN(Value in, Eval(*e.args[0], scope));
        KVFORK_ASSIGN_OR_RETURN(CallArgs args, EvalArgs(e, 1, scope));
        return ApplyFilter(e.name, in, args);
      }
      case ExprType::kTest: {
        KVFORK_ASSIGN_OR_RETURN(Value in, Eval(*e.args[0], scope));
        KVFORK_ASSIGN_OR_RETURN(CallArgs args, EvalArgs(e, 1, scope));
        KVFORK_ASSIGN_OR_RETURN(bool r, ApplyTest(e.name, in, args));
        return Value::Bool(r != e.negated);
      }
      case ExprType::kNot: {
        KVFORK_ASSIGN_OR_RETURN(Value v, Eval(*e.args[0], scope));
        return Value::Bool(!v.Truthy());
      }
      case ExprType::kNeg:
      case ExprType::kPos: {
        KVFORK_ASSIGN_OR_RETURN(Value v, Eval(*e.args[0], scope));
        if (v.is_undefined()) return UndefinedError(v);
        if (!v.is_number()) {
          return InvalidArgumentError("bad operand type for unary " +
                                      std::string(e.type == ExprType::kNeg ? "-" : "+") + ": '" +
                                      v.TypeName() + "'");
        }
        if (e.type == ExprType::kPos) return v.kind() == Kind::kBool ? Value::Int(v.int_value()) : v;
        if (v.kind() == Kind::kFloat) return Value::Float(-v.float_value());
        return Value::Int(-v.int_value());
      }
      case ExprType::kBinary: {
        KVFORK_ASSIGN_OR_RETURN(Value a, Eval(*e.args[0], scope));
        KVFORK_ASSIGN_OR_RETURN(Value b, Eval(*e.args[1], scope));
        return Arith(e.name, a, b);
      }
      case ExprType::kConcat: {
        std::string s;
        for (const auto& a : e.args) {
          KVFORK_ASSIGN_OR_RETURN(Value v, Eval(*a, scope));
          s += PyStr(v);
        }
        return Value::String(s);
      }
      case ExprType::kAnd:
      case ExprType::kOr: {
        KVFORK_ASSIGN_OR_RETURN(Value a, Eval(*e.args[0], scope));
        if (a.Truthy() == (e.type == ExprType::kOr)) return a;
        return Eval(*e.args[1], scope);
      }
      case ExprType::kCompare: {
        KVFORK_ASSIGN_OR_RETURN(Value left, Eval(*e.args[0], scope));
        for (size_t i = 0; i < e.ops.size(); ++i) {
          KVFORK_ASSIGN_OR_RETURN(Value right, Eval(*e.args[i + 1], scope));
          const std::string& op = e.ops[i];
          bool r = false;
          if (op == "in" || op == "notin") {
            KVFORK_ASSIGN_OR_RETURN(bool in, Contains(right, left));
            r = in == (op == "in");
          } else {
            KVFORK_ASSIGN_OR_RETURN(r, ApplyTest(op, left, CallArgs{{right}, {}}));
          }
          if (!r) return Value::Bool(false);
          left = right;
        }
        return Value::Bool(true);
      }
      case ExprType::kCondExpr: {
        KVFORK_ASSIGN_OR_RETURN(Value c, Eval(*e.args[0], scope));
        if (c.Truthy()) return Eval(*e.args[1], scope);
        if (e.args[2]) return Eval(*e.args[2], scope);
        return Value::Undefined("the inline if-expression on line " + std::to_string(e.line) +
                                " evaluated to false and no else section was defined.");
      }
    }
    return InternalError("unknown expression");
  }

  const RenderOptions& options_;
  // Globals looked up so far (namespace, range, ...), made once per render.
  std::map<std::string, Value> globals_;
  Flow flow_ = Flow::kNormal;
  int loop_depth_ = 0;
  std::vector<ScopePtr> macro_closures_;  // the scopes macros were defined in
};

Status CheckExpr(const Expr* e) {
  if (e == nullptr) return OkStatus();
  const std::string where = "chat template line " + std::to_string(e->line) + ": ";
  if (e->type == ExprType::kFilter && !HasFilter(e->name)) {
    return UnimplementedError(where + "unsupported construct: filter '" + e->name + "'");
  }
  if (e->type == ExprType::kTest && !HasTest(e->name)) {
    return UnimplementedError(where + "unsupported construct: test '" + e->name + "'");
  }
  for (const auto& a : e->args) KVFORK_RETURN_IF_ERROR(CheckExpr(a.get()));
  for (const auto& [k, a] : e->kwargs) KVFORK_RETURN_IF_ERROR(CheckExpr(a.get()));
  return OkStatus();
}

Status CheckBody(const Body& body) {
  for (const NodePtr& n : body) {
    KVFORK_RETURN_IF_ERROR(CheckExpr(n->expr.get()));
    KVFORK_RETURN_IF_ERROR(CheckExpr(n->cond.get()));
    for (const auto& c : n->conditions) KVFORK_RETURN_IF_ERROR(CheckExpr(c.get()));
    for (const auto& b : n->bodies) KVFORK_RETURN_IF_ERROR(CheckBody(b));
    for (const auto& [k, p] : n->params) KVFORK_RETURN_IF_ERROR(CheckExpr(p.get()));
    KVFORK_RETURN_IF_ERROR(CheckBody(n->body));
    KVFORK_RETURN_IF_ERROR(CheckBody(n->else_body));
  }
  return OkStatus();
}

}  // namespace

StatusOr<std::string> Render(const Template& tmpl, const Value& context,
                             const RenderOptions& options) {
  if (!context.is_dict()) return InvalidArgumentError("chat template context must be an object");
  auto root = std::make_shared<Scope>();
  for (const auto& [k, v] : context.items()) root->vars[k] = v;
  Renderer renderer(options);
  std::string out;
  KVFORK_RETURN_IF_ERROR(renderer.Exec(tmpl.body, root, &out));
  return out;
}

Status CheckNames(const Template& tmpl) { return CheckBody(tmpl.body); }

}  // namespace kvfork::jinja
