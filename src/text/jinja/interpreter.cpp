#include "text/jinja/interpreter.h"

#include <cmath>

#include "text/jinja/failure.h"
#include "text/jinja/pystr.h"

namespace keel::jinja {

const Value *Scope::lookup(const std::string &name) const {
  for (const Scope *s = this; s; s = s->parent.get()) {
    auto it = s->vars.find(name);
    if (it != s->vars.end()) return &it->second;
  }
  return nullptr;
}

namespace {
ScopePtr child(const ScopePtr &parent) {
  auto s = std::make_shared<Scope>();
  s->parent = parent;
  return s;
}

[[noreturn]] void undefined_error(const Value &u) {
  fail(u.str().empty() ? std::string("value is undefined") : "'" + u.str() + "' is undefined");
}
}  // namespace

// ---- ArgReader ----

Value ArgReader::get(size_t index, const char *name, Value def) {
  if (index < args_.args.size()) return args_.args[index];
  for (auto &kv : args_.kwargs)
    if (kv.first == name) {
      used_.push_back(name);
      return kv.second;
    }
  return def;
}

bool ArgReader::has(size_t index, const char *name) const {
  if (index < args_.args.size()) return true;
  for (auto &kv : args_.kwargs)
    if (kv.first == name) return true;
  return false;
}

void ArgReader::done(size_t max_positional) const {
  if (args_.args.size() > max_positional)
    fail(std::string(fn_) + "() takes at most " + std::to_string(max_positional) +
         " positional arguments");
  for (auto &kv : args_.kwargs) {
    bool ok = false;
    for (auto &u : used_) ok = ok || u == kv.first;
    if (!ok) fail(std::string(fn_) + "() got an unexpected keyword argument '" + kv.first + "'");
  }
}

// ---- rendering ----

void Interpreter::step() {
  if (++steps_ > limits_.max_steps)
    throw Failure(ErrorCode::kResourceExhausted,
                  "template ran more than " + std::to_string(limits_.max_steps) + " steps");
}

void Interpreter::check_size(size_t bytes) const {
  if (bytes > limits_.max_output_bytes)
    throw Failure(
        ErrorCode::kResourceExhausted,
        "template output would exceed " + std::to_string(limits_.max_output_bytes) + " bytes");
}

void Interpreter::emit(std::string &out, const std::string &s) const {
  check_size(out.size() + s.size());
  out += s;
}

std::string Interpreter::render(const Body &body, ScopePtr globals) {
  std::string out;
  exec(body, child(globals), out);
  return out;
}

Interpreter::Flow Interpreter::exec(const Body &body, const ScopePtr &scope, std::string &out) {
  for (const auto &s : body) {
    Flow f = exec_stmt(*s, scope, out);
    if (f != Flow::kNormal) return f;
  }
  return Flow::kNormal;
}

Interpreter::Flow Interpreter::exec_stmt(const Stmt &s, const ScopePtr &scope, std::string &out) {
  step();
  try {
    switch (s.kind) {
      case Stmt::Kind::kText:
        emit(out, s.text);
        break;
      case Stmt::Kind::kEmit: {
        Value v = eval(*s.expr, scope);
        if (v.is_generator()) unsupported("printing a generator (add |list)");
        if (v.is_string())
          emit(out, v.str());
        else
          emit(out, to_str(v));
        break;
      }
      case Stmt::Kind::kIf:
        for (const auto &br : s.branches)
          if (truthy(eval(*br.first, scope))) return exec(br.second, scope, out);
        return exec(s.else_body, scope, out);
      case Stmt::Kind::kFor:
        exec_for(s, scope, out);
        break;
      case Stmt::Kind::kSet:
        assign(*s.target, eval(*s.expr, scope), scope);
        break;
      case Stmt::Kind::kSetBlock: {
        std::string buf;
        exec(s.body, child(scope), buf);
        assign(*s.target, render_filters(s.filters, Value(std::move(buf)), scope), scope);
        break;
      }
      case Stmt::Kind::kMacro:
        scope->vars[s.name] = make_macro(s, scope, s.name);
        break;
      case Stmt::Kind::kCallBlock: {
        pending_caller_ = make_macro(s, scope, "caller");
        Value v = eval(*s.expr, scope);
        pending_caller_ = Value();
        emit(out, to_str(v));
        break;
      }
      case Stmt::Kind::kFilterBlock: {
        std::string buf;
        exec(s.body, child(scope), buf);
        emit(out, to_str(render_filters(s.filters, Value(std::move(buf)), scope)));
        break;
      }
      case Stmt::Kind::kWith: {
        auto inner = child(scope);
        for (const auto &a : s.assigns) assign(*a.first, eval(*a.second, scope), inner);
        return exec(s.body, inner, out);
      }
      case Stmt::Kind::kScope:
        return exec(s.body, child(scope), out);
      case Stmt::Kind::kBreak:
        return Flow::kBreak;
      case Stmt::Kind::kContinue:
        return Flow::kContinue;
    }
  } catch (Failure &f) {
    if (f.line == 0) {
      f.line = s.line;
      f.column = s.column;
    }
    throw;
  }
  return Flow::kNormal;
}

Value Interpreter::render_filters(const std::vector<ExprPtr> &filters, Value v,
                                  const ScopePtr &scope) {
  for (const auto &f : filters) {
    CallArgs args;
    collect_args(*f, 1, scope, args);
    v = apply_filter(f->name, std::move(v), args);
  }
  return v;
}

void Interpreter::exec_for(const Stmt &s, const ScopePtr &scope, std::string &out) {
  Value iterable = eval(*s.expr, scope);
  std::vector<Value> items = iterate(iterable);
  if (s.cond) {
    std::vector<Value> kept;
    for (auto &item : items) {
      step();
      auto probe = child(scope);
      assign(*s.target, item, probe);
      if (truthy(eval(*s.cond, probe))) kept.push_back(std::move(item));
    }
    items = std::move(kept);
  }
  if (items.empty()) {
    exec(s.else_body, child(scope), out);
    return;
  }
  auto shared_items = std::make_shared<std::vector<Value>>(std::move(items));
  const int64_t n = static_cast<int64_t>(shared_items->size());
  for (int64_t i = 0; i < n; ++i) {
    step();
    auto iter = child(scope);
    const auto &list = *shared_items;
    Dict loop;
    loop.items.reserve(12);
    loop.items.emplace_back(Value("index"), Value(i + 1));
    loop.items.emplace_back(Value("index0"), Value(i));
    loop.items.emplace_back(Value("revindex"), Value(n - i));
    loop.items.emplace_back(Value("revindex0"), Value(n - i - 1));
    loop.items.emplace_back(Value("first"), Value(i == 0));
    loop.items.emplace_back(Value("last"), Value(i == n - 1));
    loop.items.emplace_back(Value("length"), Value(n));
    loop.items.emplace_back(Value("depth"), Value(1));
    loop.items.emplace_back(Value("depth0"), Value(0));
    loop.items.emplace_back(
        Value("previtem"), i > 0 ? list[static_cast<size_t>(i - 1)] : Value::undefined("previtem"));
    loop.items.emplace_back(Value("nextitem"), i + 1 < n ? list[static_cast<size_t>(i + 1)]
                                                         : Value::undefined("nextitem"));
    loop.items.emplace_back(Value("cycle"),
                            Value::function("cycle", [i](Interpreter &, CallArgs &a) -> Value {
                              if (a.args.empty()) fail("no items for cycling given");
                              return a.args[static_cast<size_t>(i) % a.args.size()];
                            }));
    iter->vars["loop"] = Value::namespace_object(std::move(loop));
    assign(*s.target, list[static_cast<size_t>(i)], iter);
    if (exec(s.body, iter, out) == Flow::kBreak) break;
  }
}

void Interpreter::assign(const Expr &target, const Value &v, const ScopePtr &scope) {
  switch (target.kind) {
    case Expr::Kind::kName:
      scope->vars[target.name] = v;
      return;
    case Expr::Kind::kTuple: {
      std::vector<Value> parts = iterate(v);
      if (parts.size() != target.args.size())
        fail(parts.size() < target.args.size()
                 ? "not enough values to unpack (expected " + std::to_string(target.args.size()) +
                       ", got " + std::to_string(parts.size()) + ")"
                 : "too many values to unpack (expected " + std::to_string(target.args.size()) +
                       ")");
      for (size_t i = 0; i < parts.size(); ++i) assign(*target.args[i], parts[i], scope);
      return;
    }
    case Expr::Kind::kAttr: {
      const Value *ns = scope->lookup(target.args[0]->name);
      if (!ns || !ns->is_namespace()) fail("cannot assign attribute on non-namespace object");
      ns->dict_ref().set(Value(target.name), v);
      return;
    }
    default:
      fail("cannot assign to this expression");
  }
}

Value Interpreter::make_macro(const Stmt &s, const ScopePtr &scope, const std::string &name) {
  const Stmt *def = &s;
  std::weak_ptr<Scope> weak = scope;  // macros stored in their own scope must not keep it alive
  ScopePtr strong = name == "caller" ? scope : nullptr;
  return Value::function(name, [def, weak, strong, name](Interpreter &in, CallArgs &args) -> Value {
    ScopePtr closure = strong ? strong : weak.lock();
    if (!closure) fail("macro '" + name + "' called after its scope ended");
    if (++in.depth_ > in.limits_.max_call_depth) {
      --in.depth_;
      fail("maximum recursion depth exceeded");
    }
    struct Leave {
      int &d;
      ~Leave() { --d; }
    } leave{in.depth_};
    auto local = child(closure);
    Value caller = in.pending_caller_;
    in.pending_caller_ = Value();
    std::vector<Value> varargs;
    Dict kwargs;
    for (size_t i = 0; i < args.args.size(); ++i) {
      if (i < def->params.size())
        local->vars[def->params[i].first] = args.args[i];
      else
        varargs.push_back(args.args[i]);
    }
    for (auto &kv : args.kwargs) {
      bool matched = false;
      for (size_t i = 0; i < def->params.size(); ++i)
        if (def->params[i].first == kv.first) {
          if (i < args.args.size())
            fail("macro '" + name + "' got multiple values for argument '" + kv.first + "'");
          local->vars[kv.first] = kv.second;
          matched = true;
        }
      if (kv.first == "caller") {
        caller = kv.second;
        matched = true;
      }
      if (!matched) kwargs.set(Value(kv.first), kv.second);
    }
    for (const auto &p : def->params)
      if (!local->vars.count(p.first))
        local->vars[p.first] = p.second ? in.eval(*p.second, local) : Value::undefined(p.first);
    local->vars["varargs"] = Value::tuple(std::move(varargs));
    local->vars["kwargs"] = Value::dict(std::move(kwargs));
    if (!caller.is_undefined()) local->vars["caller"] = caller;
    std::string out;
    in.exec(def->body, local, out);
    return Value(std::move(out));
  });
}

// ---- expressions ----

Value Interpreter::eval(const Expr &e, const ScopePtr &scope) {
  try {
    return eval_inner(e, scope);
  } catch (Failure &f) {
    if (f.line == 0) {
      f.line = e.line;
      f.column = e.column;
    }
    throw;
  }
}

void Interpreter::collect_args(const Expr &e, size_t first, const ScopePtr &scope, CallArgs &args) {
  for (size_t i = first; i < e.args.size(); ++i) args.args.push_back(eval(*e.args[i], scope));
  for (const auto &kv : e.kwargs) args.kwargs.emplace_back(kv.first, eval(*kv.second, scope));
}

Value Interpreter::eval_inner(const Expr &e, const ScopePtr &scope) {
  switch (e.kind) {
    case Expr::Kind::kConst:
      return e.value;
    case Expr::Kind::kName: {
      const Value *v = scope->lookup(e.name);
      return v ? *v : Value::undefined(e.name);
    }
    case Expr::Kind::kAttr:
      return get_attr(eval(*e.args[0], scope), e.name);
    case Expr::Kind::kItem:
      return get_item(eval(*e.args[0], scope), eval(*e.args[1], scope));
    case Expr::Kind::kSlice: {
      Value obj = eval(*e.args[0], scope);
      Value parts[3];
      for (int i = 0; i < 3; ++i)
        parts[i] = e.args[1 + i] ? eval(*e.args[1 + i], scope) : Value::none();
      return slice(obj, parts[0], parts[1], parts[2]);
    }
    case Expr::Kind::kCall:
      return eval_call(e, scope);
    case Expr::Kind::kFilter: {
      Value subject = eval(*e.args[0], scope);
      CallArgs args;
      collect_args(e, 1, scope, args);
      return apply_filter(e.name, std::move(subject), args);
    }
    case Expr::Kind::kTest: {
      Value subject = eval(*e.args[0], scope);
      CallArgs args;
      collect_args(e, 1, scope, args);
      bool r = apply_test(e.name, subject, args);
      return Value(e.negated ? !r : r);
    }
    case Expr::Kind::kNeg:
    case Expr::Kind::kPos: {
      Value v = eval(*e.args[0], scope);
      if (v.is_undefined()) undefined_error(v);
      if (v.is_float()) return Value(e.kind == Expr::Kind::kNeg ? -v.as_float() : v.as_float());
      if (v.is_int() || v.is_bool()) {
        int64_t x = v.as_int();
        if (e.kind == Expr::Kind::kPos) return Value(x);
        if (x == INT64_MIN) unsupported("integer overflow");
        return Value(-x);
      }
      fail(std::string("bad operand type for unary ") + (e.kind == Expr::Kind::kNeg ? "-" : "+") +
           ": '" + type_name(v) + "'");
    }
    case Expr::Kind::kNot:
      return Value(!truthy(eval(*e.args[0], scope)));
    case Expr::Kind::kBinary:
      return binary_op(e.name, eval(*e.args[0], scope), eval(*e.args[1], scope), limits_);
    case Expr::Kind::kConcat: {
      std::string s;
      for (const auto &a : e.args) {
        Value v = eval(*a, scope);
        if (v.is_generator()) unsupported("printing a generator (add |list)");
        s += to_str(v);
        check_size(s.size());
      }
      return Value(std::move(s));
    }
    case Expr::Kind::kAnd: {
      Value l = eval(*e.args[0], scope);
      return truthy(l) ? eval(*e.args[1], scope) : l;
    }
    case Expr::Kind::kOr: {
      Value l = eval(*e.args[0], scope);
      return truthy(l) ? l : eval(*e.args[1], scope);
    }
    case Expr::Kind::kCompare: {
      Value left = eval(*e.args[0], scope);
      for (size_t i = 0; i < e.ops.size(); ++i) {
        Value right = eval(*e.args[i + 1], scope);
        const std::string &op = e.ops[i];
        bool r;
        if (op == "==") {
          r = equals(left, right);
        } else if (op == "!=") {
          r = !equals(left, right);
        } else if (op == "in") {
          r = contains(right, left);
        } else if (op == "notin") {
          r = !contains(right, left);
        } else {
          if (left.is_undefined()) undefined_error(left);
          if (right.is_undefined()) undefined_error(right);
          if (op == "<")
            r = less(left, right);
          else if (op == ">")
            r = less(right, left);
          else if (op == "<=")
            r = !less(right, left);
          else
            r = !less(left, right);
        }
        if (!r) return Value(false);
        left = std::move(right);
      }
      return Value(true);
    }
    case Expr::Kind::kCond:
      if (truthy(eval(*e.args[1], scope))) return eval(*e.args[0], scope);
      return e.args[2] ? eval(*e.args[2], scope) : Value::undefined("");
    case Expr::Kind::kList:
    case Expr::Kind::kTuple: {
      std::vector<Value> items;
      items.reserve(e.args.size());
      for (const auto &a : e.args) items.push_back(eval(*a, scope));
      return e.kind == Expr::Kind::kList ? Value::list(std::move(items))
                                         : Value::tuple(std::move(items));
    }
    case Expr::Kind::kDict: {
      Dict d;
      for (size_t i = 0; i + 1 < e.args.size(); i += 2) {
        Value k = eval(*e.args[i], scope);
        if (k.is_list() && !k.is_tuple()) fail("unhashable type: 'list'");
        if (k.is_dict()) fail("unhashable type: 'dict'");
        d.set(k, eval(*e.args[i + 1], scope));
      }
      return Value::dict(std::move(d));
    }
  }
  return Value();
}

Value Interpreter::eval_call(const Expr &e, const ScopePtr &scope) {
  const Expr &callee = *e.args[0];
  CallArgs args;
  if (callee.kind == Expr::Kind::kAttr) {
    Value obj = eval(*callee.args[0], scope);
    if (obj.is_undefined()) undefined_error(obj);
    if (has_method(obj, callee.name)) {
      collect_args(e, 1, scope, args);
      return call_method(*this, obj, callee.name, args);
    }
    Value fn = get_attr(obj, callee.name);
    collect_args(e, 1, scope, args);
    return call(fn, args);
  }
  Value fn = eval(callee, scope);
  collect_args(e, 1, scope, args);
  return call(fn, args);
}

Value Interpreter::call(const Value &fn, CallArgs &args) {
  if (fn.is_undefined()) undefined_error(fn);
  if (!fn.is_function()) fail(std::string("'") + type_name(fn) + "' object is not callable");
  step();
  return fn.func().fn(*this, args);
}

Value Interpreter::apply_filter(const std::string &name, Value subject, CallArgs &args) {
  FilterFn f = find_filter(name);
  if (!f) unsupported("no filter named '" + name + "'");
  return f(*this, subject, args);
}

bool Interpreter::has_test(const std::string &name) const { return find_test(name) != nullptr; }

bool Interpreter::apply_test(const std::string &name, const Value &subject, CallArgs &args) {
  TestFn t = find_test(name);
  if (!t) unsupported("no test named '" + name + "'");
  return t(*this, subject, args);
}

// ---- access ----

Value Interpreter::get_attr(const Value &obj, const std::string &name) {
  if (obj.is_undefined()) undefined_error(obj);
  if (has_method(obj, name)) {
    Value self = obj;
    return Value::function(name, [self, name](Interpreter &in, CallArgs &args) {
      return call_method(in, self, name, args);
    });
  }
  if (obj.is_dict()) {
    if (const Value *v = obj.dict_ref().find(std::string_view(name))) return *v;
    return Value::undefined(name);
  }
  return Value::undefined(name);
}

namespace {
bool normalize_index(int64_t &i, size_t size) {
  if (i < 0) i += static_cast<int64_t>(size);
  return i >= 0 && i < static_cast<int64_t>(size);
}
}  // namespace

Value Interpreter::get_item(const Value &obj, const Value &key) {
  if (obj.is_undefined()) undefined_error(obj);
  if (obj.is_dict()) {
    if (!obj.is_namespace())
      if (const Value *v = obj.dict_ref().find(key)) return *v;
  } else if (obj.is_list() && !obj.is_generator() && (key.is_int() || key.is_bool())) {
    int64_t i = key.as_int();
    if (normalize_index(i, obj.items().size())) return obj.items()[static_cast<size_t>(i)];
  } else if (obj.is_string() && (key.is_int() || key.is_bool())) {
    int64_t i = key.as_int();
    if (py::is_ascii(obj.str())) {
      if (normalize_index(i, obj.str().size()))
        return Value(std::string(1, obj.str()[static_cast<size_t>(i)]));
    } else {
      auto cps = py::decode(obj.str());
      if (normalize_index(i, cps.size())) {
        std::string s;
        utf8_append(s, cps[static_cast<size_t>(i)]);
        return Value(std::move(s));
      }
    }
  }
  if (key.is_string()) return get_attr(obj, key.str());
  return Value::undefined("");
}

std::vector<Value> Interpreter::iterate(const Value &v) const {
  switch (v.kind()) {
    case Value::Kind::kUndefined:
      return {};
    case Value::Kind::kList:
      return v.is_generator() ? v.take_generator() : v.items();
    case Value::Kind::kDict: {
      if (v.is_namespace()) fail("'Namespace' object is not iterable");
      std::vector<Value> keys;
      for (const auto &kv : v.dict_ref().items) keys.push_back(kv.first);
      return keys;
    }
    case Value::Kind::kString: {
      std::vector<Value> chars;
      for (char32_t c : py::decode(v.str())) {
        std::string s;
        utf8_append(s, c);
        chars.emplace_back(std::move(s));
      }
      return chars;
    }
    default:
      fail(std::string("'") + type_name(v) + "' object is not iterable");
  }
}

}  // namespace keel::jinja
