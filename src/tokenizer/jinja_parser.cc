#include "tokenizer/jinja_parser.h"

// GCC 12 at -O3 reports a false -Wrestrict inside std::string concatenation
// (GCC bug 105651); nothing here copies overlapping memory.
#pragma GCC diagnostic ignored "-Wrestrict"

#include <cstdlib>
#include <set>

#include "tokenizer/jinja_lexer.h"

namespace kvfork::jinja {
namespace {

class Parser {
 public:
  explicit Parser(std::vector<Token> tokens) : t_(std::move(tokens)) {}

  StatusOr<Template> Run() {
    Template tmpl;
    std::string end;
    KVFORK_ASSIGN_OR_RETURN(tmpl.body, ParseBody({}, &end));
    return tmpl;
  }

 private:
  const Token& Cur() const { return t_[pos_]; }
  const Token& Peek(size_t k = 1) const { return t_[std::min(pos_ + k, t_.size() - 1)]; }
  void Next() {
    if (pos_ + 1 < t_.size()) ++pos_;
  }
  bool IsOp(const char* op) const { return Cur().type == TokenType::kOperator && Cur().value == op; }
  bool IsName(const char* name) const { return Cur().type == TokenType::kName && Cur().value == name; }
  bool SkipOp(const char* op) {
    if (!IsOp(op)) return false;
    Next();
    return true;
  }
  bool SkipName(const char* name) {
    if (!IsName(name)) return false;
    Next();
    return true;
  }

  Status Error(const std::string& what) const {
    return InvalidArgumentError("chat template line " + std::to_string(Cur().line) + ": " + what);
  }
  Status Unsupported(const std::string& what) const {
    return UnimplementedError("chat template line " + std::to_string(Cur().line) +
                              ": unsupported construct " + what);
  }
  static std::string Describe(const Token& t) {
    switch (t.type) {
      case TokenType::kEof: return "end of template";
      case TokenType::kVarEnd: return "'}}'";
      case TokenType::kBlockEnd: return "'%}'";
      case TokenType::kString: return "string literal";
      default: return "'" + t.value + "'";
    }
  }
  Status ExpectOp(const char* op) {
    if (SkipOp(op)) return OkStatus();
    return Error(std::string("expected '") + op + "', got " + Describe(Cur()));
  }
  Status ExpectBlockEnd() {
    if (Cur().type == TokenType::kBlockEnd) {
      Next();
      return OkStatus();
    }
    return Error("expected '%}', got " + Describe(Cur()));
  }
  StatusOr<std::string> ExpectName() {
    if (Cur().type != TokenType::kName) return Error("expected a name, got " + Describe(Cur()));
    std::string name = Cur().value;
    Next();
    return name;
  }

  ExprPtr Make(ExprType type, int line) {
    auto e = std::make_unique<Expr>();
    e->type = type;
    e->line = line;
    return e;
  }

  // Parses nodes until a {% name %} with name in `ends` (left after the
  // name, in *end) or the end of the template (only allowed when ends is empty).
  StatusOr<Body> ParseBody(const std::set<std::string>& ends, std::string* end) {
    Body body;
    while (true) {
      const Token& tok = Cur();
      if (tok.type == TokenType::kEof) {
        if (!ends.empty()) {
          return Error("unexpected end of template, expected '{% " + *ends.begin() + " %}'");
        }
        return body;
      }
      if (tok.type == TokenType::kData) {
        auto n = std::make_unique<Node>();
        n->type = NodeType::kText;
        n->line = tok.line;
        n->text = tok.value;
        body.push_back(std::move(n));
        Next();
      } else if (tok.type == TokenType::kVarBegin) {
        auto n = std::make_unique<Node>();
        n->type = NodeType::kOutput;
        n->line = tok.line;
        Next();
        KVFORK_ASSIGN_OR_RETURN(n->expr, ParseTuple(false));
        if (Cur().type != TokenType::kVarEnd) return Error("expected '}}', got " + Describe(Cur()));
        Next();
        body.push_back(std::move(n));
      } else if (tok.type == TokenType::kBlockBegin) {
        Next();
        if (Cur().type == TokenType::kName && ends.count(Cur().value)) {
          *end = Cur().value;
          Next();
          return body;
        }
        KVFORK_ASSIGN_OR_RETURN(NodePtr n, ParseStatement());
        body.push_back(std::move(n));
      } else {
        return Error("unexpected " + Describe(tok));
      }
    }
  }

  StatusOr<NodePtr> ParseStatement() {
    if (Cur().type != TokenType::kName) return Error("expected a tag name, got " + Describe(Cur()));
    const std::string tag = Cur().value;
    const int line = Cur().line;
    auto n = std::make_unique<Node>();
    n->line = line;
    Next();
    std::string end;
    if (tag == "if") {
      n->type = NodeType::kIf;
      while (true) {
        KVFORK_ASSIGN_OR_RETURN(ExprPtr cond, ParseTuple(false));
        KVFORK_RETURN_IF_ERROR(ExpectBlockEnd());
        KVFORK_ASSIGN_OR_RETURN(Body body, ParseBody({"elif", "else", "endif"}, &end));
        n->conditions.push_back(std::move(cond));
        n->bodies.push_back(std::move(body));
        if (end == "elif") continue;
        if (end == "else") {
          KVFORK_RETURN_IF_ERROR(ExpectBlockEnd());
          KVFORK_ASSIGN_OR_RETURN(n->else_body, ParseBody({"endif"}, &end));
        }
        break;
      }
    } else if (tag == "for") {
      n->type = NodeType::kFor;
      do {
        KVFORK_ASSIGN_OR_RETURN(std::string name, ExpectName());
        n->targets.push_back(name);
      } while (SkipOp(","));
      if (!SkipName("in")) return Error("expected 'in' in for loop, got " + Describe(Cur()));
      KVFORK_ASSIGN_OR_RETURN(n->expr, ParseTuple(true));
      if (SkipName("if")) {
        KVFORK_ASSIGN_OR_RETURN(n->cond, ParseExpression(true));
      }
      if (IsName("recursive")) return Unsupported("'recursive' for loop");
      KVFORK_RETURN_IF_ERROR(ExpectBlockEnd());
      KVFORK_ASSIGN_OR_RETURN(n->body, ParseBody({"else", "endfor"}, &end));
      if (end == "else") {
        KVFORK_RETURN_IF_ERROR(ExpectBlockEnd());
        KVFORK_ASSIGN_OR_RETURN(n->else_body, ParseBody({"endfor"}, &end));
      }
    } else if (tag == "set") {
      KVFORK_ASSIGN_OR_RETURN(std::string name, ExpectName());
      if (SkipOp(".")) {
        KVFORK_ASSIGN_OR_RETURN(n->attr, ExpectName());
      }
      n->targets.push_back(name);
      while (n->attr.empty() && SkipOp(",")) {
        KVFORK_ASSIGN_OR_RETURN(std::string more, ExpectName());
        n->targets.push_back(more);
      }
      if (SkipOp("=")) {
        n->type = NodeType::kSet;
        KVFORK_ASSIGN_OR_RETURN(n->expr, ParseTuple(false));
      } else {
        if (!n->attr.empty() || n->targets.size() != 1) {
          return Error("expected '=' in set");
        }
        n->type = NodeType::kSetBlock;
        if (Cur().type != TokenType::kBlockEnd) return Unsupported("'{% set %}' with a filter");
        KVFORK_RETURN_IF_ERROR(ExpectBlockEnd());
        KVFORK_ASSIGN_OR_RETURN(n->body, ParseBody({"endset"}, &end));
      }
    } else if (tag == "macro") {
      n->type = NodeType::kMacro;
      KVFORK_ASSIGN_OR_RETURN(n->text, ExpectName());
      KVFORK_RETURN_IF_ERROR(ExpectOp("("));
      while (!IsOp(")")) {
        if (!n->params.empty()) KVFORK_RETURN_IF_ERROR(ExpectOp(","));
        KVFORK_ASSIGN_OR_RETURN(std::string param, ExpectName());
        ExprPtr def;
        if (SkipOp("=")) {
          KVFORK_ASSIGN_OR_RETURN(def, ParseExpression(true));
        }
        n->params.emplace_back(param, std::move(def));
      }
      Next();
      KVFORK_RETURN_IF_ERROR(ExpectBlockEnd());
      KVFORK_ASSIGN_OR_RETURN(n->body, ParseBody({"endmacro"}, &end));
    } else if (tag == "break" || tag == "continue") {
      n->type = tag == "break" ? NodeType::kBreak : NodeType::kContinue;
      KVFORK_RETURN_IF_ERROR(ExpectBlockEnd());
      return n;
    } else if (tag == "generation") {
      // transformers' AssistantTracker tag: renders its body unchanged.
      n->type = NodeType::kScope;
      KVFORK_RETURN_IF_ERROR(ExpectBlockEnd());
      KVFORK_ASSIGN_OR_RETURN(n->body, ParseBody({"endgeneration"}, &end));
    } else if (tag == "with") {
      n->type = NodeType::kScope;
      while (Cur().type != TokenType::kBlockEnd) {
        if (!n->params.empty()) KVFORK_RETURN_IF_ERROR(ExpectOp(","));
        KVFORK_ASSIGN_OR_RETURN(std::string name, ExpectName());
        KVFORK_RETURN_IF_ERROR(ExpectOp("="));
        KVFORK_ASSIGN_OR_RETURN(ExprPtr value, ParseExpression(true));
        n->params.emplace_back(name, std::move(value));
      }
      KVFORK_RETURN_IF_ERROR(ExpectBlockEnd());
      KVFORK_ASSIGN_OR_RETURN(n->body, ParseBody({"endwith"}, &end));
    } else if (tag == "filter") {
      n->type = NodeType::kFilterBlock;
      KVFORK_ASSIGN_OR_RETURN(n->expr, ParseFilter(nullptr));
      while (IsOp("|")) {
        Next();
        KVFORK_ASSIGN_OR_RETURN(n->expr, ParseFilter(std::move(n->expr)));
      }
      KVFORK_RETURN_IF_ERROR(ExpectBlockEnd());
      KVFORK_ASSIGN_OR_RETURN(n->body, ParseBody({"endfilter"}, &end));
    } else {
      return UnimplementedError("chat template line " + std::to_string(line) +
                                ": unsupported construct '{% " + tag + " %}'");
    }
    KVFORK_RETURN_IF_ERROR(ExpectBlockEnd());
    return n;
  }

  // A comma-separated list becomes a tuple (as in "{{ a, b }}" or
  // "for x in a, b"); a single expression stays itself.
  StatusOr<ExprPtr> ParseTuple(bool no_condexpr) {
    const int line = Cur().line;
    KVFORK_ASSIGN_OR_RETURN(ExprPtr first, ParseExpression(!no_condexpr));
    if (!IsOp(",")) return first;
    auto tuple = Make(ExprType::kTuple, line);
    tuple->args.push_back(std::move(first));
    while (SkipOp(",")) {
      if (Cur().type == TokenType::kVarEnd || Cur().type == TokenType::kBlockEnd || IsOp(")")) break;
      KVFORK_ASSIGN_OR_RETURN(ExprPtr e, ParseExpression(!no_condexpr));
      tuple->args.push_back(std::move(e));
    }
    return tuple;
  }

  StatusOr<ExprPtr> ParseExpression(bool with_condexpr) {
    if (!with_condexpr) return ParseOr();
    KVFORK_ASSIGN_OR_RETURN(ExprPtr expr, ParseOr());
    while (IsName("if")) {
      const int line = Cur().line;
      Next();
      auto cond = Make(ExprType::kCondExpr, line);
      KVFORK_ASSIGN_OR_RETURN(ExprPtr test, ParseOr());
      ExprPtr otherwise;
      if (SkipName("else")) {
        KVFORK_ASSIGN_OR_RETURN(otherwise, ParseExpression(true));
      }
      cond->args.push_back(std::move(test));
      cond->args.push_back(std::move(expr));
      cond->args.push_back(std::move(otherwise));
      expr = std::move(cond);
    }
    return expr;
  }

  StatusOr<ExprPtr> ParseOr() {
    KVFORK_ASSIGN_OR_RETURN(ExprPtr left, ParseAnd());
    while (IsName("or")) {
      auto e = Make(ExprType::kOr, Cur().line);
      Next();
      KVFORK_ASSIGN_OR_RETURN(ExprPtr right, ParseAnd());
      e->args.push_back(std::move(left));
      e->args.push_back(std::move(right));
      left = std::move(e);
    }
    return left;
  }

  StatusOr<ExprPtr> ParseAnd() {
    KVFORK_ASSIGN_OR_RETURN(ExprPtr left, ParseNot());
    while (IsName("and")) {
      auto e = Make(ExprType::kAnd, Cur().line);
      Next();
      KVFORK_ASSIGN_OR_RETURN(ExprPtr right, ParseNot());
      e->args.push_back(std::move(left));
      e->args.push_back(std::move(right));
      left = std::move(e);
    }
    return left;
  }

  StatusOr<ExprPtr> ParseNot() {
    if (IsName("not")) {
      auto e = Make(ExprType::kNot, Cur().line);
      Next();
      KVFORK_ASSIGN_OR_RETURN(ExprPtr inner, ParseNot());
      e->args.push_back(std::move(inner));
      return e;
    }
    return ParseCompare();
  }

  StatusOr<ExprPtr> ParseCompare() {
    const int line = Cur().line;
    KVFORK_ASSIGN_OR_RETURN(ExprPtr expr, ParseMath1());
    ExprPtr cmp;
    while (true) {
      std::string op;
      if (Cur().type == TokenType::kOperator &&
          (Cur().value == "==" || Cur().value == "!=" || Cur().value == "<" ||
           Cur().value == "<=" || Cur().value == ">" || Cur().value == ">=")) {
        op = Cur().value;
        Next();
      } else if (IsName("in")) {
        op = "in";
        Next();
      } else if (IsName("not") && Peek().type == TokenType::kName && Peek().value == "in") {
        op = "notin";
        Next();
        Next();
      } else {
        break;
      }
      if (!cmp) {
        cmp = Make(ExprType::kCompare, line);
        cmp->args.push_back(std::move(expr));
      }
      KVFORK_ASSIGN_OR_RETURN(ExprPtr right, ParseMath1());
      cmp->ops.push_back(op);
      cmp->args.push_back(std::move(right));
    }
    return cmp ? std::move(cmp) : std::move(expr);
  }

  StatusOr<ExprPtr> Binary(StatusOr<ExprPtr> (Parser::*next)(), std::set<std::string> ops) {
    KVFORK_ASSIGN_OR_RETURN(ExprPtr left, (this->*next)());
    while (Cur().type == TokenType::kOperator && ops.count(Cur().value)) {
      auto e = Make(ExprType::kBinary, Cur().line);
      e->name = Cur().value;
      Next();
      KVFORK_ASSIGN_OR_RETURN(ExprPtr right, (this->*next)());
      e->args.push_back(std::move(left));
      e->args.push_back(std::move(right));
      left = std::move(e);
    }
    return left;
  }

  StatusOr<ExprPtr> ParseMath1() { return Binary(&Parser::ParseConcat, {"+", "-"}); }

  StatusOr<ExprPtr> ParseConcat() {
    const int line = Cur().line;
    KVFORK_ASSIGN_OR_RETURN(ExprPtr first, ParseMath2());
    if (!IsOp("~")) return first;
    auto e = Make(ExprType::kConcat, line);
    e->args.push_back(std::move(first));
    while (SkipOp("~")) {
      KVFORK_ASSIGN_OR_RETURN(ExprPtr next, ParseMath2());
      e->args.push_back(std::move(next));
    }
    return e;
  }

  StatusOr<ExprPtr> ParseMath2() { return Binary(&Parser::ParsePow, {"*", "/", "//", "%"}); }
  StatusOr<ExprPtr> ParsePow() { return Binary(&Parser::ParseUnaryWithFilter, {"**"}); }
  StatusOr<ExprPtr> ParseUnaryWithFilter() { return ParseUnary(true); }

  StatusOr<ExprPtr> ParseUnary(bool with_filter) {
    ExprPtr node;
    if (IsOp("-") || IsOp("+")) {
      node = Make(IsOp("-") ? ExprType::kNeg : ExprType::kPos, Cur().line);
      Next();
      KVFORK_ASSIGN_OR_RETURN(ExprPtr inner, ParseUnary(false));
      node->args.push_back(std::move(inner));
    } else {
      KVFORK_ASSIGN_OR_RETURN(node, ParsePrimary());
    }
    KVFORK_ASSIGN_OR_RETURN(node, ParsePostfix(std::move(node)));
    if (with_filter) {
      KVFORK_ASSIGN_OR_RETURN(node, ParseFilterExpr(std::move(node)));
    }
    return node;
  }

  StatusOr<ExprPtr> ParsePrimary() {
    const Token tok = Cur();
    if (tok.type == TokenType::kName) {
      Next();
      if (tok.value == "true" || tok.value == "True") return Const(Value::Bool(true), tok.line);
      if (tok.value == "false" || tok.value == "False") return Const(Value::Bool(false), tok.line);
      if (tok.value == "none" || tok.value == "None") return Const(Value::None(), tok.line);
      auto e = Make(ExprType::kName, tok.line);
      e->name = tok.value;
      return e;
    }
    if (tok.type == TokenType::kString) {
      std::string s;
      while (Cur().type == TokenType::kString) {
        s += Cur().value;
        Next();
      }
      return Const(Value::String(std::move(s)), tok.line);
    }
    if (tok.type == TokenType::kInteger) {
      Next();
      errno = 0;
      long long v = std::strtoll(tok.value.c_str(), nullptr, 10);
      if (errno == ERANGE) return Unsupported("integer literal beyond 64 bits");
      return Const(Value::Int(v), tok.line);
    }
    if (tok.type == TokenType::kFloat) {
      Next();
      return Const(Value::Float(std::strtod(tok.value.c_str(), nullptr)), tok.line);
    }
    if (IsOp("(")) {
      Next();
      if (SkipOp(")")) return Make(ExprType::kTuple, tok.line);
      KVFORK_ASSIGN_OR_RETURN(ExprPtr first, ParseExpression(true));
      if (SkipOp(")")) return first;
      auto tuple = Make(ExprType::kTuple, tok.line);
      tuple->args.push_back(std::move(first));
      while (SkipOp(",")) {
        if (IsOp(")")) break;
        KVFORK_ASSIGN_OR_RETURN(ExprPtr e, ParseExpression(true));
        tuple->args.push_back(std::move(e));
      }
      KVFORK_RETURN_IF_ERROR(ExpectOp(")"));
      return tuple;
    }
    if (IsOp("[")) {
      Next();
      auto list = Make(ExprType::kList, tok.line);
      while (!IsOp("]")) {
        if (!list->args.empty()) KVFORK_RETURN_IF_ERROR(ExpectOp(","));
        if (IsOp("]")) break;
        KVFORK_ASSIGN_OR_RETURN(ExprPtr e, ParseExpression(true));
        list->args.push_back(std::move(e));
      }
      Next();
      return list;
    }
    if (IsOp("{")) {
      Next();
      auto dict = Make(ExprType::kDict, tok.line);
      while (!IsOp("}")) {
        if (!dict->args.empty()) KVFORK_RETURN_IF_ERROR(ExpectOp(","));
        if (IsOp("}")) break;
        KVFORK_ASSIGN_OR_RETURN(ExprPtr key, ParseExpression(true));
        KVFORK_RETURN_IF_ERROR(ExpectOp(":"));
        KVFORK_ASSIGN_OR_RETURN(ExprPtr value, ParseExpression(true));
        dict->args.push_back(std::move(key));
        dict->args.push_back(std::move(value));
      }
      Next();
      return dict;
    }
    return Error("unexpected " + Describe(tok) + " in expression");
  }

  ExprPtr Const(Value v, int line) {
    auto e = Make(ExprType::kConst, line);
    e->value = std::move(v);
    return e;
  }

  StatusOr<ExprPtr> ParsePostfix(ExprPtr node) {
    while (true) {
      const int line = Cur().line;
      if (IsOp(".")) {
        Next();
        if (Cur().type == TokenType::kName) {
          auto e = Make(ExprType::kGetAttr, line);
          e->name = Cur().value;
          Next();
          e->args.push_back(std::move(node));
          node = std::move(e);
        } else if (Cur().type == TokenType::kInteger) {
          auto e = Make(ExprType::kGetItem, line);
          e->args.push_back(std::move(node));
          e->args.push_back(Const(Value::Int(std::strtoll(Cur().value.c_str(), nullptr, 10)), line));
          Next();
          node = std::move(e);
        } else {
          return Error("expected a name after '.', got " + Describe(Cur()));
        }
      } else if (IsOp("[")) {
        Next();
        KVFORK_ASSIGN_OR_RETURN(node, ParseSubscript(std::move(node), line));
      } else if (IsOp("(")) {
        KVFORK_ASSIGN_OR_RETURN(node, ParseCall(std::move(node), ExprType::kCall, line));
      } else {
        return node;
      }
    }
  }

  StatusOr<ExprPtr> ParseSubscript(ExprPtr node, int line) {
    ExprPtr parts[3];
    int part = 0;
    bool is_slice = false;
    while (!IsOp("]")) {
      if (IsOp(":")) {
        if (++part > 2) return Error("too many ':' in subscript");
        is_slice = true;
        Next();
        continue;
      }
      if (IsOp(",")) return Unsupported("tuple subscript");
      if (parts[part]) return Error("expected ']' or ':' in subscript, got " + Describe(Cur()));
      KVFORK_ASSIGN_OR_RETURN(parts[part], ParseExpression(true));
    }
    Next();
    auto e = Make(is_slice ? ExprType::kSlice : ExprType::kGetItem, line);
    e->args.push_back(std::move(node));
    if (!is_slice) {
      if (!parts[0]) return Error("empty subscript");
      e->args.push_back(std::move(parts[0]));
    } else {
      for (auto& p : parts) e->args.push_back(std::move(p));
    }
    return e;
  }

  // Call arguments, from the '(' on: positional first, then name=value.
  Status ParseArgs(Expr* e) {
    KVFORK_RETURN_IF_ERROR(ExpectOp("("));
    bool first = true;
    while (!IsOp(")")) {
      if (!first) KVFORK_RETURN_IF_ERROR(ExpectOp(","));
      first = false;
      if (IsOp(")")) break;
      if (IsOp("*") || IsOp("**")) return Unsupported("'*args' / '**kwargs' in a call");
      if (Cur().type == TokenType::kName && Peek().type == TokenType::kOperator &&
          Peek().value == "=") {
        std::string key = Cur().value;
        Next();
        Next();
        KVFORK_ASSIGN_OR_RETURN(ExprPtr value, ParseExpression(true));
        e->kwargs.emplace_back(key, std::move(value));
      } else {
        if (!e->kwargs.empty()) return Error("positional argument after keyword argument");
        KVFORK_ASSIGN_OR_RETURN(ExprPtr value, ParseExpression(true));
        e->args.push_back(std::move(value));
      }
    }
    Next();
    return OkStatus();
  }

  StatusOr<ExprPtr> ParseCall(ExprPtr callee, ExprType type, int line) {
    auto e = Make(type, line);
    e->args.push_back(std::move(callee));
    KVFORK_RETURN_IF_ERROR(ParseArgs(e.get()));
    return e;
  }

  StatusOr<ExprPtr> ParseFilterExpr(ExprPtr node) {
    while (true) {
      if (IsOp("|")) {
        Next();
        KVFORK_ASSIGN_OR_RETURN(node, ParseFilter(std::move(node)));
      } else if (IsName("is")) {
        KVFORK_ASSIGN_OR_RETURN(node, ParseTest(std::move(node)));
      } else if (IsOp("(")) {
        KVFORK_ASSIGN_OR_RETURN(node, ParseCall(std::move(node), ExprType::kCall, Cur().line));
      } else {
        return node;
      }
    }
  }

  StatusOr<std::string> DottedName() {
    KVFORK_ASSIGN_OR_RETURN(std::string name, ExpectName());
    while (IsOp(".")) {
      Next();
      KVFORK_ASSIGN_OR_RETURN(std::string more, ExpectName());
      name += "." + more;
    }
    return name;
  }

  StatusOr<ExprPtr> ParseFilter(ExprPtr node) {
    auto e = Make(ExprType::kFilter, Cur().line);
    KVFORK_ASSIGN_OR_RETURN(e->name, DottedName());
    e->args.push_back(std::move(node));
    if (IsOp("(")) KVFORK_RETURN_IF_ERROR(ParseArgs(e.get()));
    return e;
  }

  StatusOr<ExprPtr> ParseTest(ExprPtr node) {
    auto e = Make(ExprType::kTest, Cur().line);
    Next();  // "is"
    e->negated = SkipName("not");
    KVFORK_ASSIGN_OR_RETURN(e->name, DottedName());
    e->args.push_back(std::move(node));
    const Token& c = Cur();
    if (IsOp("(")) {
      KVFORK_RETURN_IF_ERROR(ParseArgs(e.get()));
    } else if ((c.type == TokenType::kName || c.type == TokenType::kString ||
                c.type == TokenType::kInteger || c.type == TokenType::kFloat || IsOp("(") ||
                IsOp("[") || IsOp("{")) &&
               !IsName("else") && !IsName("or") && !IsName("and")) {
      if (IsName("is")) return Error("You cannot chain multiple tests with is");
      KVFORK_ASSIGN_OR_RETURN(ExprPtr arg, ParsePrimary());
      KVFORK_ASSIGN_OR_RETURN(arg, ParsePostfix(std::move(arg)));
      e->args.push_back(std::move(arg));
    }
    return e;
  }

  std::vector<Token> t_;
  size_t pos_ = 0;
};

}  // namespace

StatusOr<Template> ParseTemplate(const std::string& source) {
  KVFORK_ASSIGN_OR_RETURN(std::vector<Token> tokens, Tokenize(source));
  return Parser(std::move(tokens)).Run();
}

}  // namespace kvfork::jinja
