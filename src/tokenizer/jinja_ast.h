// The parsed form of a Jinja template: expression and statement trees.
// Built once by the parser, then only read (by any number of renders at
// once). Every node keeps its template line for error messages.
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "tokenizer/jinja_value.h"

namespace kvfork::jinja {

struct Expr;
using ExprPtr = std::unique_ptr<Expr>;

enum class ExprType {
  kConst,     // value
  kName,      // name
  kList,      // args
  kTuple,     // args
  kDict,      // args: key, value, key, value, ...
  kGetAttr,   // args[0] . name
  kGetItem,   // args[0] [ args[1] ]
  kSlice,     // args[0] [ args[1] : args[2] : args[3] ] (null parts omitted)
  kCall,      // args[0] ( args[1..], kwargs )
  kFilter,    // args[0] | name ( args[1..], kwargs ); args[0] null inside {% filter %}
  kTest,      // args[0] is [not] name ( args[1..], kwargs )
  kNot,       // not args[0]
  kNeg,       // -args[0]
  kPos,       // +args[0]
  kBinary,    // args[0] op args[1]: + - * / // % **
  kConcat,    // args[0] ~ args[1] ~ ...
  kAnd,       // args[0] and args[1]
  kOr,        // args[0] or args[1]
  kCompare,   // args[0] ops[0] args[1] ops[1] args[2] ... (==, !=, <, <=, >, >=, in, notin)
  kCondExpr,  // args[1] if args[0] else args[2] (args[2] may be null)
};

struct Expr {
  ExprType type;
  int line = 0;
  Value value;
  std::string name;
  bool negated = false;  // kTest: "is not"
  std::vector<ExprPtr> args;
  std::vector<std::pair<std::string, ExprPtr>> kwargs;
  std::vector<std::string> ops;
};

struct Node;
using NodePtr = std::unique_ptr<Node>;
using Body = std::vector<NodePtr>;

enum class NodeType {
  kText,       // text
  kOutput,     // {{ expr }}
  kIf,         // conditions[i] -> bodies[i]; else_body
  kFor,        // for targets in expr [if cond] : body; else_body
  kSet,        // set targets = expr, or set ns.attr = expr (attr non-empty)
  kSetBlock,   // {% set target %}body{% endset %}
  kMacro,      // {% macro name(params) %}body{% endmacro %}
  kBreak,
  kContinue,
  kScope,      // body rendered in place: {% generation %} (transformers), {% with %}
  kFilterBlock,  // {% filter f %}body{% endfilter %}: expr is the filter with a null input
};

struct Node {
  NodeType type;
  int line = 0;
  std::string text;
  ExprPtr expr;
  ExprPtr cond;                                   // kFor: loop filter
  std::vector<std::string> targets;               // kFor / kSet names
  std::string attr;                               // kSet: namespace attribute
  std::vector<ExprPtr> conditions;                // kIf
  std::vector<Body> bodies;                       // kIf
  Body body;
  Body else_body;
  std::vector<std::pair<std::string, ExprPtr>> params;  // kMacro (default may be null); kScope: with-assignments
};

struct Template {
  Body body;
};

}  // namespace kvfork::jinja
