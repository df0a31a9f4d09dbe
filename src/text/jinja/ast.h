// The syntax tree of a parsed template: expressions and statements, each with the
// line and column where it starts (for errors that name the template line).
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "text/jinja/value.h"

namespace keel::jinja {

struct Expr;
struct Stmt;
using ExprPtr = std::unique_ptr<Expr>;
using StmtPtr = std::unique_ptr<Stmt>;
using Body = std::vector<StmtPtr>;

struct Expr {
  enum class Kind {
    kConst,   // value
    kName,    // name
    kAttr,    // args[0].name
    kItem,    // args[0][args[1]]
    kSlice,   // args[0][args[1]:args[2]:args[3]] (null parts allowed)
    kCall,    // args[0](args[1..], kwargs)
    kFilter,  // args[0] | name(args[1..], kwargs); args[0] null inside {% filter %}
    kTest,    // args[0] is [not] name(args[1..], kwargs)
    kNeg,     // -args[0]
    kPos,     // +args[0]
    kNot,     // not args[0]
    kBinary,  // args[0] name args[1], name in + - * / // % **
    kConcat,  // args joined with ~
    kAnd,
    kOr,
    kCompare,  // args[0] ops[0] args[1] ops[1] args[2] ...
    kCond,     // args[0] if args[1] else args[2] (args[2] may be null)
    kList,
    kTuple,
    kDict,  // args: key, value, key, value...
  };
  Kind kind;
  int line = 0;
  int column = 0;
  int depth = 1;  // height of this subtree: evaluation and destruction recurse this deep
  Value value;
  std::string name;
  bool negated = false;  // kTest: "is not"
  std::vector<ExprPtr> args;
  std::vector<std::pair<std::string, ExprPtr>> kwargs;
  std::vector<std::string> ops;
};

struct Stmt {
  enum class Kind {
    kText,         // text
    kEmit,         // {{ expr }}
    kIf,           // branches, else_body
    kFor,          // for target in expr [if cond]: body, else_body
    kSet,          // set target = expr
    kSetBlock,     // set target [| filters]: body
    kMacro,        // macro name(params): body
    kCallBlock,    // call(params) expr: body
    kFilterBlock,  // filter filters: body
    kWith,         // with targets: body
    kScope,        // body rendered as is ({% generation %})
    kBreak,
    kContinue,
  };
  Kind kind;
  int line = 0;
  int column = 0;
  std::string text;
  ExprPtr expr;
  ExprPtr target;
  ExprPtr cond;
  std::vector<std::pair<ExprPtr, Body>> branches;
  Body body;
  Body else_body;
  std::string name;
  std::vector<std::pair<std::string, ExprPtr>> params;  // macro parameters with defaults
  std::vector<ExprPtr> filters;                         // kFilter chain, subject null
  std::vector<std::pair<ExprPtr, ExprPtr>> assigns;     // kWith
};

}  // namespace keel::jinja
