// Walks the syntax tree of a template and renders it, with jinja2's semantics for
// scoping (a fresh scope per loop iteration and macro call, namespace() for state
// that outlives them), undefined values, and Python's operators. Every step, output
// byte and call level is counted against limits, so no template can hang or exhaust
// memory.
#pragma once

#include <cstdint>
#include <ctime>
#include <functional>
#include <memory>
#include <string>
#include <unordered_map>

#include "text/jinja/ast.h"
#include "text/jinja/value.h"

namespace keel::jinja {

struct RenderLimits {
  size_t max_output_bytes = 64u << 20;
  uint64_t max_steps = 20'000'000;
  int max_call_depth = 256;  // jinja2 under CPython fails near 200 nested macro calls
};

struct Scope {
  std::unordered_map<std::string, Value> vars;
  std::shared_ptr<Scope> parent;
  const Value *lookup(const std::string &name) const;
};
using ScopePtr = std::shared_ptr<Scope>;

class Interpreter {
 public:
  explicit Interpreter(const RenderLimits &limits) : limits_(limits) {}

  std::string render(const Body &body, ScopePtr globals);

  // Used by builtins (map, select, macros' caller...).
  Value call(const Value &fn, CallArgs &args);
  Value apply_filter(const std::string &name, Value subject, CallArgs &args);
  bool apply_test(const std::string &name, const Value &subject, CallArgs &args);
  bool has_test(const std::string &name) const;
  void step();
  void check_size(size_t bytes) const;
  const RenderLimits &limits() const { return limits_; }

  static Value get_attr(const Value &obj, const std::string &name);
  static Value get_item(const Value &obj, const Value &key);
  // Items of an iterable as Python's iter() would give them (dict: keys).
  std::vector<Value> iterate(const Value &v) const;

 private:
  enum class Flow { kNormal, kBreak, kContinue };

  Flow exec(const Body &body, const ScopePtr &scope, std::string &out);
  Flow exec_stmt(const Stmt &s, const ScopePtr &scope, std::string &out);
  void exec_for(const Stmt &s, const ScopePtr &scope, std::string &out);
  Value eval(const Expr &e, const ScopePtr &scope);
  Value eval_inner(const Expr &e, const ScopePtr &scope);
  Value eval_call(const Expr &e, const ScopePtr &scope);
  void collect_args(const Expr &e, size_t first, const ScopePtr &scope, CallArgs &args);
  void assign(const Expr &target, const Value &v, const ScopePtr &scope);
  Value make_macro(const Stmt &s, const ScopePtr &scope, const std::string &name);
  Value render_filters(const std::vector<ExprPtr> &filters, Value v, const ScopePtr &scope);
  void emit(std::string &out, const std::string &s) const;

  RenderLimits limits_;
  uint64_t steps_ = 0;
  int depth_ = 0;
  Value pending_caller_;  // set by {% call %} for the macro it invokes
};

// Binary operators of Python as jinja2 applies them.
Value binary_op(const std::string &op, const Value &a, const Value &b, const RenderLimits &limits);
bool contains(const Value &container, const Value &item);
std::string percent_format(const std::string &fmt, const std::vector<Value> &args);
Value slice(const Value &obj, const Value &start, const Value &stop, const Value &step);

// Builtins, in filters.cpp / tests.cpp / methods.cpp.
using FilterFn = Value (*)(Interpreter &, Value &, CallArgs &);
using TestFn = bool (*)(Interpreter &, const Value &, CallArgs &);
FilterFn find_filter(const std::string &name);
TestFn find_test(const std::string &name);
// A method of a str, dict or list (bound when looked up as an attribute); null if none.
bool has_method(const Value &obj, const std::string &name);
Value call_method(Interpreter &in, const Value &obj, const std::string &name, CallArgs &args);

// Reads call arguments by position or keyword, as Python binds them.
class ArgReader {
 public:
  ArgReader(CallArgs &args, const char *fn) : args_(args), fn_(fn) {}
  Value get(size_t index, const char *name, Value def = Value());
  bool has(size_t index, const char *name) const;
  void done(size_t max_positional) const;  // fails on surplus arguments

 private:
  CallArgs &args_;
  const char *fn_;
  std::vector<std::string> used_;
};

}  // namespace keel::jinja
