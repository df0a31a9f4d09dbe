// Python's binary operators, `in`, and slicing, as jinja2 evaluates them.
#include <cmath>
#include <cstdio>
#include <string_view>

#include "text/jinja/failure.h"
#include "text/jinja/interpreter.h"
#include "text/jinja/pystr.h"

namespace keel::jinja {
namespace {

[[noreturn]] void bad_operands(const std::string &op, const Value &a, const Value &b) {
  if (a.is_undefined())
    fail(a.str().empty() ? "value is undefined" : "'" + a.str() + "' is undefined");
  if (b.is_undefined())
    fail(b.str().empty() ? "value is undefined" : "'" + b.str() + "' is undefined");
  if (op == "+" && a.is_string())
    fail(std::string("can only concatenate str (not \"") + type_name(b) + "\") to str");
  if (op == "+" && a.is_list() && !a.is_tuple())
    fail(std::string("can only concatenate list (not \"") + type_name(b) + "\") to list");
  fail("unsupported operand type(s) for " + op + ": '" + type_name(a) + "' and '" + type_name(b) +
       "'");
}

bool is_intlike(const Value &v) { return v.is_int() || v.is_bool(); }

Value repeat(const Value &seq, int64_t n, const RenderLimits &limits) {
  if (n < 0) n = 0;
  if (seq.is_string()) {
    if (seq.str().size() * static_cast<uint64_t>(n) > limits.max_output_bytes)
      throw Failure(ErrorCode::kResourceExhausted, "string repetition too large");
    std::string out;
    for (int64_t i = 0; i < n; ++i) out += seq.str();
    return seq.is_markup() ? Value::markup(std::move(out)) : Value(std::move(out));
  }
  if (seq.items().size() * static_cast<uint64_t>(n) > limits.max_output_bytes)
    throw Failure(ErrorCode::kResourceExhausted, "list repetition too large");
  std::vector<Value> out;
  for (int64_t i = 0; i < n; ++i) out.insert(out.end(), seq.items().begin(), seq.items().end());
  return seq.is_tuple() ? Value::tuple(std::move(out)) : Value::list(std::move(out));
}

int64_t floordiv(int64_t a, int64_t b) {
  int64_t q = a / b;
  if ((a % b != 0) && ((a < 0) != (b < 0))) --q;
  return q;
}

}  // namespace

// printf-style `fmt % args` for %s %r %d %i %f %x %% with flags, width and precision.
std::string percent_format(const std::string &fmt, const std::vector<Value> &args) {
  std::string out;
  size_t next = 0;
  for (size_t i = 0; i < fmt.size(); ++i) {
    if (fmt[i] != '%') {
      out.push_back(fmt[i]);
      continue;
    }
    if (++i >= fmt.size()) fail("incomplete format");
    if (fmt[i] == '%') {
      out.push_back('%');
      continue;
    }
    if (fmt[i] == '(') unsupported("%(name)s formatting");
    std::string spec = "%";
    while (i < fmt.size() && std::string_view("-+ #0").find(fmt[i]) != std::string_view::npos)
      spec += fmt[i++];
    while (i < fmt.size() && std::isdigit(static_cast<unsigned char>(fmt[i])) && spec.size() < 8)
      spec += fmt[i++];
    if (i < fmt.size() && fmt[i] == '.') {
      spec += fmt[i++];
      while (i < fmt.size() && std::isdigit(static_cast<unsigned char>(fmt[i])) && spec.size() < 12)
        spec += fmt[i++];
    }
    if (i >= fmt.size()) fail("incomplete format");
    char conv = fmt[i];
    if (next >= args.size()) fail("not enough arguments for format string");
    const Value &v = args[next++];
    char buf[512];
    if (conv == 's' || conv == 'r') {
      std::string text = conv == 's' ? to_str(v) : to_repr(v);
      if (spec == "%") {
        out += text;
        continue;
      }
      std::snprintf(buf, sizeof buf, (spec + "s").c_str(), text.c_str());
    } else if (conv == 'd' || conv == 'i' || conv == 'x' || conv == 'X' || conv == 'o') {
      if (!v.is_number())
        fail(std::string("%") + conv + " format: a real number is required, not " + type_name(v));
      long long n =
          v.is_float() ? static_cast<long long>(v.as_float()) : static_cast<long long>(v.as_int());
      std::snprintf(buf, sizeof buf, (spec + "ll" + (conv == 'i' ? 'd' : conv)).c_str(), n);
    } else if (conv == 'f' || conv == 'F' || conv == 'e' || conv == 'E' || conv == 'g' ||
               conv == 'G') {
      if (!v.is_number()) fail(std::string("must be real number, not ") + type_name(v));
      std::snprintf(buf, sizeof buf, (spec + conv).c_str(), v.as_float());
    } else {
      fail(std::string("unsupported format character '") + conv + "'");
    }
    out += buf;
  }
  if (next < args.size()) fail("not all arguments converted during string formatting");
  return out;
}

Value binary_op(const std::string &op, const Value &a, const Value &b, const RenderLimits &limits) {
  const bool nums = a.is_number() && b.is_number();
  const bool ints = is_intlike(a) && is_intlike(b);
  if (op == "+") {
    if (ints) {
      int64_t r;
      if (__builtin_add_overflow(a.as_int(), b.as_int(), &r)) unsupported("integer overflow");
      return Value(r);
    }
    if (nums) return Value(a.as_float() + b.as_float());
    if (a.is_string() && b.is_string()) {
      if (a.str().size() + b.str().size() > limits.max_output_bytes)
        throw Failure(ErrorCode::kResourceExhausted, "string too large");
      if (a.is_markup() || b.is_markup())  // Markup escapes the plain operand
        return Value::markup((a.is_markup() ? a.str() : py::html_escape(a.str())) +
                             (b.is_markup() ? b.str() : py::html_escape(b.str())));
      return Value(a.str() + b.str());
    }
    if (a.is_list() && b.is_list() && !a.is_generator() && !b.is_generator() &&
        a.is_tuple() == b.is_tuple()) {
      std::vector<Value> out = a.items();
      out.insert(out.end(), b.items().begin(), b.items().end());
      return a.is_tuple() ? Value::tuple(std::move(out)) : Value::list(std::move(out));
    }
    bad_operands(op, a, b);
  }
  if (op == "-") {
    if (ints) {
      int64_t r;
      if (__builtin_sub_overflow(a.as_int(), b.as_int(), &r)) unsupported("integer overflow");
      return Value(r);
    }
    if (nums) return Value(a.as_float() - b.as_float());
    bad_operands(op, a, b);
  }
  if (op == "*") {
    if (ints) {
      int64_t r;
      if (__builtin_mul_overflow(a.as_int(), b.as_int(), &r)) unsupported("integer overflow");
      return Value(r);
    }
    if (nums) return Value(a.as_float() * b.as_float());
    if ((a.is_string() || (a.is_list() && !a.is_generator())) && is_intlike(b))
      return repeat(a, b.as_int(), limits);
    if ((b.is_string() || (b.is_list() && !b.is_generator())) && is_intlike(a))
      return repeat(b, a.as_int(), limits);
    bad_operands(op, a, b);
  }
  if (op == "/") {
    if (!nums) bad_operands(op, a, b);
    if (b.as_float() == 0.0) fail("division by zero");
    return Value(a.as_float() / b.as_float());
  }
  if (op == "//" || op == "%") {
    if (!nums) {
      if (op == "%" && a.is_string())
        return Value(percent_format(a.str(), b.is_tuple() ? b.items() : std::vector<Value>{b}));
      bad_operands(op, a, b);
    }
    if (ints) {
      if (b.as_int() == 0) fail("integer division or modulo by zero");
      if (a.as_int() == INT64_MIN && b.as_int() == -1) unsupported("integer overflow");
      int64_t q = floordiv(a.as_int(), b.as_int());
      return op == "//" ? Value(q) : Value(a.as_int() - q * b.as_int());
    }
    double x = a.as_float(), y = b.as_float();
    if (y == 0.0) fail("float divmod()");
    if (op == "//") return Value(std::floor(x / y));
    double m = std::fmod(x, y);
    if (m != 0 && ((y < 0) != (m < 0))) m += y;
    if (m == 0) m = std::copysign(0.0, y);
    return Value(m);
  }
  if (op == "**") {
    if (ints && b.as_int() >= 0) {
      int64_t base = a.as_int(), e = b.as_int(), r = 1;
      while (e > 0) {
        if (e & 1)
          if (__builtin_mul_overflow(r, base, &r)) unsupported("integer overflow");
        e >>= 1;
        if (e > 0 && __builtin_mul_overflow(base, base, &base)) unsupported("integer overflow");
      }
      return Value(r);
    }
    if (nums) {
      if (a.as_float() == 0.0 && b.as_float() < 0) fail("0.0 cannot be raised to a negative power");
      return Value(std::pow(a.as_float(), b.as_float()));
    }
    bad_operands(op, a, b);
  }
  unsupported("operator " + op);
}

bool contains(const Value &container, const Value &item) {
  switch (container.kind()) {
    case Value::Kind::kUndefined:
      return false;
    case Value::Kind::kString:
      if (!item.is_string())
        fail(std::string("'in <string>' requires string as left operand, not ") + type_name(item));
      return container.str().find(item.str()) != std::string::npos;
    case Value::Kind::kList: {
      std::vector<Value> items =
          container.is_generator() ? container.take_generator() : container.items();
      for (const auto &v : items)
        if (equals(v, item)) return true;
      return false;
    }
    case Value::Kind::kDict:
      if (container.is_namespace()) fail("argument of type 'Namespace' is not iterable");
      if (item.is_list() && !item.is_tuple()) fail("unhashable type: 'list'");
      if (item.is_dict()) fail("unhashable type: 'dict'");
      return container.dict_ref().find(item) != nullptr;
    default:
      fail(std::string("argument of type '") + type_name(container) + "' is not iterable");
  }
}

namespace {
// Python's slice.indices(): clamps start/stop for the given step.
void slice_indices(size_t len, const Value &start, const Value &stop, const Value &step, int64_t &b,
                   int64_t &e, int64_t &s) {
  auto as_index = [](const Value &v) {
    if (!(v.is_int() || v.is_bool())) fail("slice indices must be integers or None");
    return v.as_int();
  };
  const int64_t n = static_cast<int64_t>(len);
  s = step.is_none() ? 1 : as_index(step);
  if (s == 0) fail("slice step cannot be zero");
  auto clamp = [&](const Value &v, int64_t def) {
    if (v.is_none()) return def;
    int64_t i = as_index(v);
    if (i < 0) {
      i += n;
      if (i < 0) i = s < 0 ? -1 : 0;
    } else if (i >= n) {
      i = s < 0 ? n - 1 : n;
    }
    return i;
  };
  b = clamp(start, s < 0 ? n - 1 : 0);
  e = clamp(stop, s < 0 ? -1 : n);
}

template <typename T>
std::vector<T> take(const std::vector<T> &src, int64_t b, int64_t e, int64_t s) {
  std::vector<T> out;
  if (s > 0)
    for (int64_t i = b; i < e; i += s) out.push_back(src[static_cast<size_t>(i)]);
  else
    for (int64_t i = b; i > e; i += s) out.push_back(src[static_cast<size_t>(i)]);
  return out;
}
}  // namespace

Value slice(const Value &obj, const Value &start, const Value &stop, const Value &step) {
  if (obj.is_undefined())
    fail(obj.str().empty() ? "value is undefined" : "'" + obj.str() + "' is undefined");
  int64_t b, e, s;
  if (obj.is_string()) {
    auto cps = py::decode(obj.str());
    slice_indices(cps.size(), start, stop, step, b, e, s);
    return Value(py::encode(take(cps, b, e, s)));
  }
  if (obj.is_list() && !obj.is_generator()) {
    slice_indices(obj.items().size(), start, stop, step, b, e, s);
    auto out = take(obj.items(), b, e, s);
    return obj.is_tuple() ? Value::tuple(std::move(out)) : Value::list(std::move(out));
  }
  return Value::undefined("");
}

}  // namespace keel::jinja
