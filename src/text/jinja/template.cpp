#include "text/jinja/template.h"

#include <chrono>

#include "core/error.h"
#include "text/jinja/failure.h"
#include "text/jinja/lexer.h"
#include "text/jinja/parser.h"

namespace keel::jinja {
namespace {

constexpr int64_t kMaxRange = 100000;  // jinja2's sandbox refuses larger ranges

Value g_range(Interpreter &in, CallArgs &a) {
  if (!a.kwargs.empty()) fail("range() takes no keyword arguments");
  std::vector<int64_t> n;
  for (const auto &v : a.args) {
    if (!(v.is_int() || v.is_bool()))
      fail(std::string("'") + type_name(v) + "' object cannot be interpreted as an integer");
    n.push_back(v.as_int());
  }
  int64_t start = 0, stop = 0, step = 1;
  if (n.size() == 1)
    stop = n[0];
  else if (n.size() == 2)
    start = n[0], stop = n[1];
  else if (n.size() == 3)
    start = n[0], stop = n[1], step = n[2];
  else
    fail("range expected 1 to 3 arguments");
  if (step == 0) fail("range() arg 3 must not be zero");
  std::vector<Value> out;
  for (int64_t i = start; step > 0 ? i < stop : i > stop; i += step) {
    if (static_cast<int64_t>(out.size()) >= kMaxRange)
      fail("Range too big. The sandbox blocks ranges larger than MAX_RANGE (100000).");
    out.emplace_back(i);
    in.step();
  }
  return Value::list(std::move(out));
}

Value g_namespace(Interpreter &, CallArgs &a) {
  Dict d;
  for (const auto &v : a.args) {
    if (!v.is_dict()) fail("namespace() positional arguments must be mappings");
    for (const auto &kv : v.dict_ref().items) d.set(kv.first, kv.second);
  }
  for (const auto &kv : a.kwargs) d.set(Value(kv.first), kv.second);
  return Value::namespace_object(std::move(d));
}

Value g_dict(Interpreter &, CallArgs &a) {
  Dict d;
  for (const auto &v : a.args) {
    if (!v.is_dict()) unsupported("dict() from a non-mapping");
    for (const auto &kv : v.dict_ref().items) d.set(kv.first, kv.second);
  }
  for (const auto &kv : a.kwargs) d.set(Value(kv.first), kv.second);
  return Value::dict(std::move(d));
}

Value g_raise(Interpreter &, CallArgs &a) {
  Failure f(ErrorCode::kInvalidArgument, a.args.empty() ? std::string() : to_str(a.args[0]));
  f.raised = true;
  throw f;
}

}  // namespace

Template::Template(std::string_view source) : body_(parse(lex(source))) {}

std::string Template::render(const Value &context, const RenderOptions &options) const {
  auto globals = std::make_shared<Scope>();
  globals->vars["range"] = Value::function("range", g_range);
  globals->vars["namespace"] = Value::function("namespace", g_namespace);
  globals->vars["dict"] = Value::function("dict", g_dict);
  globals->vars["raise_exception"] = Value::function("raise_exception", g_raise);
  std::optional<std::tm> now = options.now;
  globals->vars["strftime_now"] =
      Value::function("strftime_now", [now](Interpreter &, CallArgs &a) -> Value {
        if (a.args.size() != 1 || !a.args[0].is_string())
          fail("strftime_now() takes one format string");
        std::tm tm{};
        if (now) {
          tm = *now;
        } else {
          std::time_t t = std::time(nullptr);
          localtime_r(&t, &tm);
        }
        char buf[512];
        size_t n = std::strftime(buf, sizeof buf, a.args[0].str().c_str(), &tm);
        if (n == 0 && !a.args[0].str().empty()) unsupported("strftime_now format too long");
        return Value(std::string(buf, n));
      });
  if (context.is_dict())
    for (const auto &kv : context.dict_ref().items)
      if (kv.first.is_string()) globals->vars[kv.first.str()] = kv.second;

  Interpreter in(options.limits);
  try {
    return in.render(body_, globals);
  } catch (const Failure &f) {
    std::string where = f.line ? "template line " + std::to_string(f.line) + ", column " +
                                     std::to_string(f.column) + ": "
                               : "template: ";
    throw Error(f.code, where + (f.raised ? "raise_exception: " : "") + f.what());
  }
}

}  // namespace keel::jinja
