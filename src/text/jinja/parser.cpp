#include "text/jinja/parser.h"

#include <algorithm>
#include <initializer_list>

#include "core/error.h"

namespace keel::jinja {
namespace {

// Deeper nesting than this is no real template, and would exhaust the stack.
constexpr int kMaxDepth = 200;
// Expression trees built by loops (a + b + c ..., x.a.b.c ...) are bounded separately.
constexpr int kMaxTreeDepth = 400;

class Parser {
 public:
  explicit Parser(std::vector<Token> t) : t_(std::move(t)) {}

  Body parse_template() {
    Body body = parse_body({});
    return body;
  }

 private:
  const Token &cur() const { return t_[pos_]; }
  const Token &peek(size_t k = 1) const { return t_[std::min(pos_ + k, t_.size() - 1)]; }
  void next() {
    if (pos_ + 1 < t_.size()) ++pos_;
  }
  bool is_op(const char *op) const { return cur().kind == TokenKind::kOp && cur().text == op; }
  bool is_name(const char *name) const {
    return cur().kind == TokenKind::kName && cur().text == name;
  }
  bool skip_op(const char *op) {
    if (!is_op(op)) return false;
    next();
    return true;
  }
  bool skip_name(const char *name) {
    if (!is_name(name)) return false;
    next();
    return true;
  }

  [[noreturn]] void error(const Token &at, const std::string &msg,
                          ErrorCode code = ErrorCode::kInvalidArgument) const {
    throw Error(code, "template line " + std::to_string(at.line) + ", column " +
                          std::to_string(at.column) + ": " + msg);
  }

  std::string describe(const Token &t) const {
    switch (t.kind) {
      case TokenKind::kEof:
        return "end of template";
      case TokenKind::kVarEnd:
        return "'}}'";
      case TokenKind::kBlockEnd:
        return "'%}'";
      case TokenKind::kText:
        return "text";
      default:
        return "'" + t.text + "'";
    }
  }

  void expect_op(const char *op) {
    if (!skip_op(op)) error(cur(), std::string("expected '") + op + "', got " + describe(cur()));
  }
  std::string expect_name() {
    if (cur().kind != TokenKind::kName) error(cur(), "expected a name, got " + describe(cur()));
    std::string n = cur().text;
    next();
    return n;
  }
  void expect_block_end() {
    if (cur().kind != TokenKind::kBlockEnd) error(cur(), "expected '%}', got " + describe(cur()));
    next();
  }

  struct DepthGuard {
    Parser &p;
    explicit DepthGuard(Parser &parser) : p(parser) {
      if (++p.depth_ > kMaxDepth) p.error(p.cur(), "template nested too deeply");
    }
    ~DepthGuard() { --p.depth_; }
  };

  // Records the height of e's subtree; refuses trees too deep to walk recursively.
  ExprPtr sized(ExprPtr e) {
    int d = 0;
    for (const auto &a : e->args)
      if (a) d = std::max(d, a->depth);
    for (const auto &kv : e->kwargs) d = std::max(d, kv.second->depth);
    e->depth = d + 1;
    if (e->depth > kMaxTreeDepth) {
      Token at;
      at.line = e->line;
      at.column = e->column;
      error(at, "expression nested too deeply");
    }
    return e;
  }

  ExprPtr make(Expr::Kind k, const Token &at) {
    auto e = std::make_unique<Expr>();
    e->kind = k;
    e->line = at.line;
    e->column = at.column;
    return e;
  }
  StmtPtr make_stmt(Stmt::Kind k, const Token &at) {
    auto s = std::make_unique<Stmt>();
    s->kind = k;
    s->line = at.line;
    s->column = at.column;
    return s;
  }

  // ---- statements ----

  // Parses until a block tag named in `ends` (left unconsumed, pointing at its name).
  Body parse_body(std::initializer_list<const char *> ends) {
    DepthGuard guard(*this);
    Body body;
    while (true) {
      const Token &t = cur();
      switch (t.kind) {
        case TokenKind::kText: {
          auto s = make_stmt(Stmt::Kind::kText, t);
          s->text = t.text;
          body.push_back(std::move(s));
          next();
          break;
        }
        case TokenKind::kVarBegin: {
          next();
          auto s = make_stmt(Stmt::Kind::kEmit, t);
          s->expr = parse_tuple(true);
          if (cur().kind != TokenKind::kVarEnd)
            error(cur(), "expected '}}', got " + describe(cur()));
          next();
          body.push_back(std::move(s));
          break;
        }
        case TokenKind::kBlockBegin: {
          const Token &name = peek();
          if (name.kind == TokenKind::kName)
            for (const char *e : ends)
              if (name.text == e) {
                next();
                return body;
              }
          next();
          body.push_back(parse_statement());
          break;
        }
        case TokenKind::kEof: {
          if (ends.size() != 0) {
            std::string want;
            for (const char *e : ends)
              want += std::string(want.empty() ? "" : " or ") + "'" + e + "'";
            error(t, "unexpected end of template, expected " + want);
          }
          return body;
        }
        default:
          error(t, "unexpected " + describe(t));
      }
    }
  }

  StmtPtr parse_statement() {
    const Token &t = cur();
    if (t.kind != TokenKind::kName) error(t, "expected a statement name, got " + describe(t));
    const std::string &n = t.text;
    if (n == "if") return parse_if();
    if (n == "for") return parse_for();
    if (n == "set") return parse_set();
    if (n == "macro") return parse_macro();
    if (n == "call") return parse_call_block();
    if (n == "filter") return parse_filter_block();
    if (n == "with") return parse_with();
    if (n == "generation") {
      auto s = make_stmt(Stmt::Kind::kScope, t);
      next();
      expect_block_end();
      s->body = parse_body({"endgeneration"});
      next();
      expect_block_end();
      return s;
    }
    if (n == "break" || n == "continue") {
      if (loop_depth_ == 0) error(t, "'" + n + "' outside of a for loop");
      auto s = make_stmt(n == "break" ? Stmt::Kind::kBreak : Stmt::Kind::kContinue, t);
      next();
      expect_block_end();
      return s;
    }
    static const char *kKnown[] = {"include",    "import", "from",  "extends",   "block",
                                   "autoescape", "do",     "trans", "pluralize", "raw"};
    for (const char *k : kKnown)
      if (n == k) error(t, "the '" + n + "' statement is not supported", ErrorCode::kUnsupported);
    error(t, "unknown tag '" + n + "'");
  }

  StmtPtr parse_if() {
    auto s = make_stmt(Stmt::Kind::kIf, cur());
    next();
    while (true) {
      ExprPtr cond = parse_tuple(true);
      expect_block_end();
      Body body = parse_body({"elif", "else", "endif"});
      s->branches.emplace_back(std::move(cond), std::move(body));
      if (skip_name("elif")) continue;
      if (skip_name("else")) {
        expect_block_end();
        s->else_body = parse_body({"endif"});
        next();
      } else {
        next();  // endif
      }
      expect_block_end();
      return s;
    }
  }

  StmtPtr parse_for() {
    auto s = make_stmt(Stmt::Kind::kFor, cur());
    next();
    s->target = parse_assign_target(true, false);
    if (!skip_name("in")) error(cur(), "expected 'in', got " + describe(cur()));
    s->expr = parse_tuple(false);
    if (skip_name("if")) s->cond = parse_expression(true);
    if (is_name("recursive"))
      error(cur(), "recursive for loops are not supported", ErrorCode::kUnsupported);
    expect_block_end();
    ++loop_depth_;
    s->body = parse_body({"endfor", "else"});
    --loop_depth_;
    if (skip_name("else")) {
      expect_block_end();
      s->else_body = parse_body({"endfor"});
    }
    next();  // endfor
    expect_block_end();
    return s;
  }

  StmtPtr parse_set() {
    const Token &at = cur();
    next();
    ExprPtr target = parse_assign_target(true, true);
    if (skip_op("=")) {
      auto s = make_stmt(Stmt::Kind::kSet, at);
      s->target = std::move(target);
      s->expr = parse_tuple(true);
      expect_block_end();
      return s;
    }
    auto s = make_stmt(Stmt::Kind::kSetBlock, at);
    s->target = std::move(target);
    while (skip_op("|")) s->filters.push_back(parse_filter(nullptr));
    expect_block_end();
    int saved = loop_depth_;
    loop_depth_ = 0;
    s->body = parse_body({"endset"});
    loop_depth_ = saved;
    next();
    expect_block_end();
    return s;
  }

  void parse_params(Stmt &s) {
    expect_op("(");
    while (!is_op(")")) {
      if (!s.params.empty()) expect_op(",");
      if (is_op(")")) break;
      std::string name = expect_name();
      ExprPtr def;
      if (skip_op("=")) def = parse_expression(true);
      s.params.emplace_back(std::move(name), std::move(def));
    }
    next();
  }

  StmtPtr parse_macro() {
    auto s = make_stmt(Stmt::Kind::kMacro, cur());
    next();
    s->name = expect_name();
    parse_params(*s);
    expect_block_end();
    int saved = loop_depth_;
    loop_depth_ = 0;
    s->body = parse_body({"endmacro"});
    loop_depth_ = saved;
    next();
    expect_block_end();
    return s;
  }

  StmtPtr parse_call_block() {
    auto s = make_stmt(Stmt::Kind::kCallBlock, cur());
    next();
    if (is_op("(")) parse_params(*s);
    s->expr = parse_expression(true);
    if (s->expr->kind != Expr::Kind::kCall) error(cur(), "expected a call after 'call'");
    expect_block_end();
    int saved = loop_depth_;
    loop_depth_ = 0;
    s->body = parse_body({"endcall"});
    loop_depth_ = saved;
    next();
    expect_block_end();
    return s;
  }

  StmtPtr parse_filter_block() {
    auto s = make_stmt(Stmt::Kind::kFilterBlock, cur());
    next();
    do {
      s->filters.push_back(parse_filter(nullptr));
    } while (skip_op("|"));
    expect_block_end();
    s->body = parse_body({"endfilter"});
    next();
    expect_block_end();
    return s;
  }

  StmtPtr parse_with() {
    auto s = make_stmt(Stmt::Kind::kWith, cur());
    next();
    while (cur().kind != TokenKind::kBlockEnd) {
      if (!s->assigns.empty()) expect_op(",");
      ExprPtr target = parse_assign_target(true, false);
      expect_op("=");
      s->assigns.emplace_back(std::move(target), parse_expression(true));
    }
    expect_block_end();
    s->body = parse_body({"endwith"});
    next();
    expect_block_end();
    return s;
  }

  ExprPtr parse_assign_target(bool with_tuple, bool with_namespace) {
    const Token &at = cur();
    if (with_namespace && at.kind == TokenKind::kName && peek().kind == TokenKind::kOp &&
        peek().text == ".") {
      auto ns = make(Expr::Kind::kName, at);
      ns->name = expect_name();
      next();  // .
      auto e = make(Expr::Kind::kAttr, at);
      e->args.push_back(std::move(ns));
      e->name = expect_name();
      return e;
    }
    auto one = [&]() {
      if (skip_op("(")) {
        ExprPtr inner = parse_assign_target(true, false);
        expect_op(")");
        return inner;
      }
      auto e = make(Expr::Kind::kName, cur());
      e->name = expect_name();
      return e;
    };
    ExprPtr first = one();
    if (!with_tuple || !is_op(",")) return first;
    auto tup = make(Expr::Kind::kTuple, at);
    tup->args.push_back(std::move(first));
    while (skip_op(",")) {
      if (cur().kind != TokenKind::kName && !is_op("(")) break;
      tup->args.push_back(one());
    }
    return sized(std::move(tup));
  }

  // ---- expressions ----

  bool tuple_end() const {
    return cur().kind == TokenKind::kVarEnd || cur().kind == TokenKind::kBlockEnd || is_op(")") ||
           cur().kind == TokenKind::kEof;
  }

  // expr or an unparenthesised tuple "a, b" (as after {{ and in for/set).
  ExprPtr parse_tuple(bool with_condexpr) {
    const Token &at = cur();
    ExprPtr first = parse_expression(with_condexpr);
    if (!is_op(",")) return first;
    auto tup = make(Expr::Kind::kTuple, at);
    tup->args.push_back(std::move(first));
    while (skip_op(",")) {
      if (tuple_end() || is_name("if")) break;
      tup->args.push_back(parse_expression(with_condexpr));
    }
    return sized(std::move(tup));
  }

  ExprPtr parse_expression(bool with_condexpr) {
    DepthGuard guard(*this);
    return with_condexpr ? parse_condexpr() : parse_or();
  }

  ExprPtr parse_condexpr() {
    const Token &at = cur();
    ExprPtr e = parse_or();
    while (skip_name("if")) {
      auto c = make(Expr::Kind::kCond, at);
      c->args.push_back(std::move(e));
      c->args.push_back(parse_or());
      c->args.push_back(skip_name("else") ? parse_condexpr() : nullptr);
      e = sized(std::move(c));
    }
    return e;
  }

  ExprPtr binary(Expr::Kind k, const Token &at, ExprPtr l, ExprPtr r, std::string op = {}) {
    auto e = make(k, at);
    e->name = std::move(op);
    e->args.push_back(std::move(l));
    e->args.push_back(std::move(r));
    return sized(std::move(e));
  }

  ExprPtr parse_or() {
    ExprPtr l = parse_and();
    while (is_name("or")) {
      const Token &at = cur();
      next();
      l = binary(Expr::Kind::kOr, at, std::move(l), parse_and());
    }
    return l;
  }
  ExprPtr parse_and() {
    ExprPtr l = parse_not();
    while (is_name("and")) {
      const Token &at = cur();
      next();
      l = binary(Expr::Kind::kAnd, at, std::move(l), parse_not());
    }
    return l;
  }
  ExprPtr parse_not() {
    if (is_name("not")) {
      DepthGuard guard(*this);
      auto e = make(Expr::Kind::kNot, cur());
      next();
      e->args.push_back(parse_not());
      return sized(std::move(e));
    }
    return parse_compare();
  }
  ExprPtr parse_compare() {
    const Token &at = cur();
    ExprPtr first = parse_math1();
    ExprPtr cmp;
    while (true) {
      std::string op;
      if (cur().kind == TokenKind::kOp &&
          (cur().text == "==" || cur().text == "!=" || cur().text == "<" || cur().text == ">" ||
           cur().text == "<=" || cur().text == ">=")) {
        op = cur().text;
        next();
      } else if (is_name("in")) {
        op = "in";
        next();
      } else if (is_name("not") && peek().kind == TokenKind::kName && peek().text == "in") {
        op = "notin";
        next();
        next();
      } else {
        break;
      }
      if (!cmp) {
        cmp = make(Expr::Kind::kCompare, at);
        cmp->args.push_back(std::move(first));
      }
      cmp->ops.push_back(op);
      cmp->args.push_back(parse_math1());
    }
    return cmp ? sized(std::move(cmp)) : std::move(first);
  }
  ExprPtr parse_math1() {
    ExprPtr l = parse_concat();
    while (is_op("+") || is_op("-")) {
      const Token &at = cur();
      std::string op = at.text;
      next();
      l = binary(Expr::Kind::kBinary, at, std::move(l), parse_concat(), op);
    }
    return l;
  }
  ExprPtr parse_concat() {
    const Token &at = cur();
    ExprPtr first = parse_math2();
    if (!is_op("~")) return first;
    auto e = make(Expr::Kind::kConcat, at);
    e->args.push_back(std::move(first));
    while (skip_op("~")) e->args.push_back(parse_math2());
    return sized(std::move(e));
  }
  ExprPtr parse_math2() {
    ExprPtr l = parse_pow();
    while (is_op("*") || is_op("/") || is_op("//") || is_op("%")) {
      const Token &at = cur();
      std::string op = at.text;
      next();
      l = binary(Expr::Kind::kBinary, at, std::move(l), parse_pow(), op);
    }
    return l;
  }
  ExprPtr parse_pow() {
    ExprPtr l = parse_unary(true);
    while (is_op("**")) {
      const Token &at = cur();
      next();
      l = binary(Expr::Kind::kBinary, at, std::move(l), parse_unary(true), "**");
    }
    return l;
  }
  ExprPtr parse_unary(bool with_filter) {
    DepthGuard guard(*this);
    const Token &at = cur();
    ExprPtr e;
    if (skip_op("-")) {
      e = make(Expr::Kind::kNeg, at);
      e->args.push_back(parse_unary(false));
      e = sized(std::move(e));
    } else if (skip_op("+")) {
      e = make(Expr::Kind::kPos, at);
      e->args.push_back(parse_unary(false));
      e = sized(std::move(e));
    } else {
      e = parse_postfix(parse_primary());
    }
    if (with_filter) e = parse_filter_expr(std::move(e));
    return e;
  }

  ExprPtr parse_primary() {
    const Token &t = cur();
    switch (t.kind) {
      case TokenKind::kName: {
        const std::string &n = t.text;
        if (n == "true" || n == "True" || n == "false" || n == "False") {
          auto e = make(Expr::Kind::kConst, t);
          e->value = Value(n == "true" || n == "True");
          next();
          return e;
        }
        if (n == "none" || n == "None") {
          auto e = make(Expr::Kind::kConst, t);
          e->value = Value::none();
          next();
          return e;
        }
        auto e = make(Expr::Kind::kName, t);
        e->name = n;
        next();
        return e;
      }
      case TokenKind::kString: {
        auto e = make(Expr::Kind::kConst, t);
        std::string s;
        while (cur().kind == TokenKind::kString) {
          s += cur().text;
          next();
        }
        e->value = Value(std::move(s));
        return e;
      }
      case TokenKind::kInt: {
        auto e = make(Expr::Kind::kConst, t);
        e->value = Value(t.ival);
        next();
        return e;
      }
      case TokenKind::kFloat: {
        auto e = make(Expr::Kind::kConst, t);
        e->value = Value(t.fval);
        next();
        return e;
      }
      case TokenKind::kOp:
        if (t.text == "(") {
          next();
          if (skip_op(")")) return make(Expr::Kind::kTuple, t);
          ExprPtr first = parse_expression(true);
          if (skip_op(")")) return first;
          auto tup = make(Expr::Kind::kTuple, t);
          tup->args.push_back(std::move(first));
          while (skip_op(",")) {
            if (is_op(")")) break;
            tup->args.push_back(parse_expression(true));
          }
          expect_op(")");
          return sized(std::move(tup));
        }
        if (t.text == "[") {
          next();
          auto e = make(Expr::Kind::kList, t);
          while (!is_op("]")) {
            if (!e->args.empty()) expect_op(",");
            if (is_op("]")) break;
            e->args.push_back(parse_expression(true));
          }
          next();
          return sized(std::move(e));
        }
        if (t.text == "{") {
          next();
          auto e = make(Expr::Kind::kDict, t);
          while (!is_op("}")) {
            if (!e->args.empty()) expect_op(",");
            if (is_op("}")) break;
            e->args.push_back(parse_expression(true));
            expect_op(":");
            e->args.push_back(parse_expression(true));
          }
          next();
          return sized(std::move(e));
        }
        break;
      default:
        break;
    }
    error(t, "unexpected " + describe(t));
  }

  ExprPtr parse_postfix(ExprPtr e) {
    while (true) {
      const Token &t = cur();
      if (is_op(".")) {
        next();
        if (cur().kind == TokenKind::kName) {
          auto a = make(Expr::Kind::kAttr, t);
          a->args.push_back(std::move(e));
          a->name = cur().text;
          next();
          e = sized(std::move(a));
        } else if (cur().kind == TokenKind::kInt) {
          auto a = make(Expr::Kind::kItem, t);
          a->args.push_back(std::move(e));
          auto idx = make(Expr::Kind::kConst, cur());
          idx->value = Value(cur().ival);
          a->args.push_back(std::move(idx));
          next();
          e = sized(std::move(a));
        } else {
          error(cur(), "expected an attribute name after '.'");
        }
      } else if (is_op("[")) {
        next();
        e = parse_subscript(std::move(e), t);
      } else if (is_op("(")) {
        e = parse_call(std::move(e));
      } else {
        return e;
      }
    }
  }

  ExprPtr parse_subscript(ExprPtr obj, const Token &at) {
    ExprPtr parts[3];
    bool slice = false;
    if (!is_op(":")) parts[0] = parse_expression(true);
    if (skip_op(":")) {
      slice = true;
      if (!is_op("]") && !is_op(":")) parts[1] = parse_expression(true);
      if (skip_op(":"))
        if (!is_op("]")) parts[2] = parse_expression(true);
    }
    if (is_op(",")) error(cur(), "tuple subscripts are not supported", ErrorCode::kUnsupported);
    expect_op("]");
    if (!slice) {
      auto e = make(Expr::Kind::kItem, at);
      e->args.push_back(std::move(obj));
      e->args.push_back(std::move(parts[0]));
      return sized(std::move(e));
    }
    auto e = make(Expr::Kind::kSlice, at);
    e->args.push_back(std::move(obj));
    for (auto &p : parts) e->args.push_back(std::move(p));
    return sized(std::move(e));
  }

  void parse_call_args(Expr &e) {
    expect_op("(");
    bool first = true;
    while (!is_op(")")) {
      if (!first) expect_op(",");
      first = false;
      if (is_op(")")) break;
      if (is_op("*") || is_op("**"))
        error(cur(), "*args and **kwargs in calls are not supported", ErrorCode::kUnsupported);
      if (cur().kind == TokenKind::kName && peek().kind == TokenKind::kOp && peek().text == "=") {
        std::string key = cur().text;
        next();
        next();
        e.kwargs.emplace_back(std::move(key), parse_expression(true));
      } else {
        if (!e.kwargs.empty()) error(cur(), "positional argument follows keyword argument");
        e.args.push_back(parse_expression(true));
      }
    }
    next();
  }

  ExprPtr parse_call(ExprPtr callee) {
    auto e = make(Expr::Kind::kCall, cur());
    e->args.push_back(std::move(callee));
    parse_call_args(*e);
    return sized(std::move(e));
  }

  std::string parse_dotted_name() {
    std::string n = expect_name();
    while (is_op(".") && peek().kind == TokenKind::kName) {
      next();
      n += "." + expect_name();
    }
    return n;
  }

  ExprPtr parse_filter(ExprPtr subject) {
    auto e = make(Expr::Kind::kFilter, cur());
    e->name = parse_dotted_name();
    e->args.push_back(std::move(subject));
    if (is_op("(")) parse_call_args(*e);
    return sized(std::move(e));
  }

  ExprPtr parse_filter_expr(ExprPtr e) {
    while (true) {
      if (skip_op("|")) {
        e = parse_filter(std::move(e));
      } else if (is_name("is")) {
        const Token &at = cur();
        next();
        auto t = make(Expr::Kind::kTest, at);
        t->negated = skip_name("not");
        t->name = parse_dotted_name();
        t->args.push_back(std::move(e));
        const Token &c = cur();
        if (is_op("(")) {
          parse_call_args(*t);
        } else if ((c.kind == TokenKind::kName || c.kind == TokenKind::kString ||
                    c.kind == TokenKind::kInt || c.kind == TokenKind::kFloat || is_op("(") ||
                    is_op("[") || is_op("{")) &&
                   !(c.kind == TokenKind::kName &&
                     (c.text == "else" || c.text == "or" || c.text == "and"))) {
          if (is_name("is")) error(c, "you cannot chain multiple tests with is");
          t->args.push_back(parse_postfix(parse_primary()));
        }
        e = sized(std::move(t));
      } else if (is_op("(")) {
        e = parse_call(std::move(e));
      } else {
        return e;
      }
    }
  }

  std::vector<Token> t_;
  size_t pos_ = 0;
  int depth_ = 0;
  int loop_depth_ = 0;
};

}  // namespace

Body parse(std::vector<Token> tokens) { return Parser(std::move(tokens)).parse_template(); }

}  // namespace keel::jinja
