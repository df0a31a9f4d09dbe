// jinja2's builtin tests (`x is defined`, `x is string`, ...), with Python's notion of
// each type: bool is a number, strings and dicts are iterable sequences.
#include <string_view>
#include <unordered_map>

#include "text/jinja/failure.h"
#include "text/jinja/interpreter.h"
#include "text/jinja/pystr.h"

namespace keel::jinja {
namespace {

Value arg0(CallArgs &a, const char *test) {
  if (!a.args.empty()) return a.args[0];
  if (!a.kwargs.empty()) return a.kwargs[0].second;
  fail(std::string("test '") + test + "' needs an argument");
}

bool t_defined(Interpreter &, const Value &v, CallArgs &) { return !v.is_undefined(); }
bool t_undefined(Interpreter &, const Value &v, CallArgs &) { return v.is_undefined(); }
bool t_none(Interpreter &, const Value &v, CallArgs &) { return v.is_none(); }
bool t_boolean(Interpreter &, const Value &v, CallArgs &) { return v.is_bool(); }
bool t_true(Interpreter &, const Value &v, CallArgs &) { return v.is_bool() && v.as_bool(); }
bool t_false(Interpreter &, const Value &v, CallArgs &) { return v.is_bool() && !v.as_bool(); }
bool t_integer(Interpreter &, const Value &v, CallArgs &) { return v.is_int(); }
bool t_float(Interpreter &, const Value &v, CallArgs &) { return v.is_float(); }
bool t_number(Interpreter &, const Value &v, CallArgs &) { return v.is_number(); }
bool t_string(Interpreter &, const Value &v, CallArgs &) { return v.is_string(); }
bool t_mapping(Interpreter &, const Value &v, CallArgs &) {
  return v.is_dict() && !v.is_namespace();
}
bool t_callable(Interpreter &, const Value &v, CallArgs &) { return v.is_function(); }
bool t_escaped(Interpreter &, const Value &, CallArgs &) { return false; }
bool t_iterable(Interpreter &, const Value &v, CallArgs &) {
  return v.is_undefined() || v.is_string() || v.is_list() || (v.is_dict() && !v.is_namespace());
}
bool t_sequence(Interpreter &, const Value &v, CallArgs &) {
  return v.is_undefined() || v.is_string() || (v.is_list() && !v.is_generator()) ||
         (v.is_dict() && !v.is_namespace());
}
bool t_lower(Interpreter &, const Value &v, CallArgs &) {
  std::string s = to_str(v);
  bool cased = false;
  for (char32_t c : py::decode(s)) {
    if (py::is_upper_cp(c)) return false;
    cased = cased || py::is_lower_cp(c);
  }
  return cased;
}
bool t_upper(Interpreter &, const Value &v, CallArgs &) {
  std::string s = to_str(v);
  bool cased = false;
  for (char32_t c : py::decode(s)) {
    if (py::is_lower_cp(c)) return false;
    cased = cased || py::is_upper_cp(c);
  }
  return cased;
}

Value mod(Interpreter &in, const Value &v, const Value &n) {
  return binary_op("%", v, n, in.limits());
}
bool t_odd(Interpreter &in, const Value &v, CallArgs &) {
  return equals(mod(in, v, Value(2)), Value(1));
}
bool t_even(Interpreter &in, const Value &v, CallArgs &) {
  return equals(mod(in, v, Value(2)), Value(0));
}
bool t_divisibleby(Interpreter &in, const Value &v, CallArgs &a) {
  return equals(mod(in, v, arg0(a, "divisibleby")), Value(0));
}

bool t_eq(Interpreter &, const Value &v, CallArgs &a) { return equals(v, arg0(a, "eq")); }
bool t_ne(Interpreter &, const Value &v, CallArgs &a) { return !equals(v, arg0(a, "ne")); }
bool t_lt(Interpreter &, const Value &v, CallArgs &a) { return less(v, arg0(a, "lt")); }
bool t_gt(Interpreter &, const Value &v, CallArgs &a) { return less(arg0(a, "gt"), v); }
bool t_le(Interpreter &, const Value &v, CallArgs &a) { return !less(arg0(a, "le"), v); }
bool t_ge(Interpreter &, const Value &v, CallArgs &a) { return !less(v, arg0(a, "ge")); }
bool t_in(Interpreter &, const Value &v, CallArgs &a) { return contains(arg0(a, "in"), v); }
bool t_sameas(Interpreter &, const Value &v, CallArgs &a) {
  Value o = arg0(a, "sameas");
  if (v.kind() != o.kind()) return false;
  if (v.is_none() || v.is_undefined()) return true;
  if (v.is_bool()) return v.as_bool() == o.as_bool();
  if (v.is_list()) return v.list_ptr() == o.list_ptr();
  if (v.is_dict()) return &v.dict_ref() == &o.dict_ref();
  return equals(v, o) &&
         (v.is_int() && v.as_int() >= -5 && v.as_int() <= 256);  // CPython's small ints
}
bool t_filter(Interpreter &, const Value &v, CallArgs &) {
  return v.is_string() && find_filter(v.str()) != nullptr;
}
bool t_test(Interpreter &, const Value &v, CallArgs &) {
  return v.is_string() && find_test(v.str()) != nullptr;
}

const std::unordered_map<std::string_view, TestFn> &table() {
  static const std::unordered_map<std::string_view, TestFn> t = {
      {"defined", t_defined},
      {"undefined", t_undefined},
      {"none", t_none},
      {"boolean", t_boolean},
      {"true", t_true},
      {"false", t_false},
      {"integer", t_integer},
      {"float", t_float},
      {"number", t_number},
      {"string", t_string},
      {"mapping", t_mapping},
      {"callable", t_callable},
      {"escaped", t_escaped},
      {"iterable", t_iterable},
      {"sequence", t_sequence},
      {"lower", t_lower},
      {"upper", t_upper},
      {"odd", t_odd},
      {"even", t_even},
      {"divisibleby", t_divisibleby},
      {"eq", t_eq},
      {"equalto", t_eq},
      {"==", t_eq},
      {"ne", t_ne},
      {"!=", t_ne},
      {"lt", t_lt},
      {"lessthan", t_lt},
      {"<", t_lt},
      {"gt", t_gt},
      {"greaterthan", t_gt},
      {">", t_gt},
      {"le", t_le},
      {"<=", t_le},
      {"ge", t_ge},
      {">=", t_ge},
      {"in", t_in},
      {"sameas", t_sameas},
      {"filter", t_filter},
      {"test", t_test},
  };
  return t;
}

}  // namespace

TestFn find_test(const std::string &name) {
  auto it = table().find(name);
  return it == table().end() ? nullptr : it->second;
}

}  // namespace keel::jinja
