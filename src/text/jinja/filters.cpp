// jinja2's builtin filters (and HF's tojson override), with their Python semantics:
// map/select/reject/unique/reverse give single-use generators, as in jinja2.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <string_view>
#include <unordered_map>

#include "text/jinja/failure.h"
#include "text/jinja/interpreter.h"
#include "text/jinja/pystr.h"

namespace keel::jinja {

std::vector<std::string> py_splitlines(const std::string &s);  // methods.cpp

namespace {

// Python's str() as soft_str does it (Undefined prints as '').
std::string sstr(const Value &v) {
  if (v.is_generator()) unsupported("printing a generator (add |list)");
  return to_str(v);
}

int64_t as_int_arg(const Value &v, const char *what) {
  if (v.is_int() || v.is_bool()) return v.as_int();
  fail(std::string(what) + " must be an integer, not " + type_name(v));
}

// jinja2's make_attrgetter: "a.b.0" looks up each part with getitem.
Value get_path(const Value &item, const Value &attribute) {
  if (attribute.is_int()) return Interpreter::get_item(item, attribute);
  std::string path = to_str(attribute);
  Value cur = item;
  size_t start = 0;
  while (true) {
    size_t dot = path.find('.', start);
    std::string part =
        path.substr(start, dot == std::string::npos ? std::string::npos : dot - start);
    bool digits = !part.empty() && std::all_of(part.begin(), part.end(),
                                               [](char c) { return c >= '0' && c <= '9'; });
    cur = Interpreter::get_item(
        cur, digits ? Value(static_cast<int64_t>(std::strtoll(part.c_str(), nullptr, 10)))
                    : Value(part));
    if (dot == std::string::npos) return cur;
    start = dot + 1;
  }
}

Value sort_key(const Value &v, bool case_sensitive) {
  if (!case_sensitive && v.is_string()) return Value(py::lower(v.str()));
  return v;
}

Value f_abs(Interpreter &, Value &v, CallArgs &) {
  if (v.is_float()) return Value(std::fabs(v.as_float()));
  if (v.is_int() || v.is_bool()) {
    if (v.as_int() == INT64_MIN) unsupported("integer overflow");
    return Value(v.as_int() < 0 ? -v.as_int() : v.as_int());
  }
  fail(std::string("bad operand type for abs(): '") + type_name(v) + "'");
}

Value f_attr(Interpreter &, Value &v, CallArgs &a) {
  ArgReader r(a, "attr");
  Value name = r.get(0, "name");
  r.done(1);
  return Interpreter::get_attr(v, to_str(name));
}

// Markup stays Markup through the str methods these filters call.
Value same_kind(const Value &in, std::string s) {
  return in.is_markup() ? Value::markup(std::move(s)) : Value(std::move(s));
}
Value f_capitalize(Interpreter &, Value &v, CallArgs &) {
  return same_kind(v, py::capitalize(sstr(v)));
}
Value f_lower(Interpreter &, Value &v, CallArgs &) { return same_kind(v, py::lower(sstr(v))); }
Value f_upper(Interpreter &, Value &v, CallArgs &) { return same_kind(v, py::upper(sstr(v))); }
Value f_safe(Interpreter &, Value &v, CallArgs &) {
  return v.is_markup() ? v : Value::markup(sstr(v));
}
Value f_string(Interpreter &, Value &v, CallArgs &) { return same_kind(v, sstr(v)); }

Value f_center(Interpreter &, Value &v, CallArgs &a) {
  ArgReader r(a, "center");
  int64_t width = as_int_arg(r.get(0, "width", Value(80)), "width");
  r.done(1);
  std::string s = sstr(v);
  int64_t len = static_cast<int64_t>(py::length(s));
  if (width <= len) return Value(s);
  if (width > 1 << 20) throw Failure(ErrorCode::kResourceExhausted, "center width too large");
  int64_t pad = width - len;
  int64_t left = pad / 2 + (pad & width & 1);
  return Value(std::string(static_cast<size_t>(left), ' ') + s +
               std::string(static_cast<size_t>(pad - left), ' '));
}

Value f_length(Interpreter &, Value &v, CallArgs &) {
  switch (v.kind()) {
    case Value::Kind::kUndefined:
      return Value(0);
    case Value::Kind::kString:
      return Value(static_cast<int64_t>(py::length(v.str())));
    case Value::Kind::kList:
      if (v.is_generator()) fail("object of type 'generator' has no len()");
      return Value(static_cast<int64_t>(v.items().size()));
    case Value::Kind::kDict:
      if (v.is_namespace()) fail("object of type 'Namespace' has no len()");
      return Value(static_cast<int64_t>(v.dict_ref().items.size()));
    default:
      fail(std::string("object of type '") + type_name(v) + "' has no len()");
  }
}

Value f_default(Interpreter &, Value &v, CallArgs &a) {
  ArgReader r(a, "default");
  Value def = r.get(0, "default_value", Value(""));
  bool boolean = truthy(r.get(1, "boolean", Value(false)));
  r.done(2);
  if (v.is_undefined() || (boolean && !truthy(v))) return def;
  return v;
}

Value f_dictsort(Interpreter &, Value &v, CallArgs &a) {
  ArgReader r(a, "dictsort");
  bool cs = truthy(r.get(0, "case_sensitive", Value(false)));
  std::string by = to_str(r.get(1, "by", Value("key")));
  bool reverse = truthy(r.get(2, "reverse", Value(false)));
  r.done(3);
  if (!v.is_dict() || v.is_namespace()) fail("dictsort: expected a mapping");
  if (by != "key" && by != "value") fail("You can only sort by either \"key\" or \"value\"");
  std::vector<Value> items;
  for (const auto &kv : v.dict_ref().items) items.push_back(Value::tuple({kv.first, kv.second}));
  size_t pos = by == "key" ? 0 : 1;
  std::stable_sort(items.begin(), items.end(), [&](const Value &x, const Value &y) {
    Value kx = sort_key(x.items()[pos], cs), ky = sort_key(y.items()[pos], cs);
    return reverse ? less(ky, kx) : less(kx, ky);
  });
  return Value::list(std::move(items));
}

Value f_escape(Interpreter &, Value &v, CallArgs &) {
  if (v.is_markup()) return v;
  return Value::markup(py::html_escape(sstr(v)));
}

// jinja2's format filter: `value % args` (printf style).
Value f_format(Interpreter &, Value &v, CallArgs &a) {
  if (!a.kwargs.empty()) unsupported("format() with keyword arguments");
  return Value(percent_format(sstr(v), a.args));
}

Value f_first(Interpreter &in, Value &v, CallArgs &) {
  std::vector<Value> items = in.iterate(v);
  return items.empty() ? Value::undefined("first") : items.front();
}

Value f_last(Interpreter &in, Value &v, CallArgs &) {
  if (v.is_generator()) fail("'generator' object is not reversible");
  std::vector<Value> items = in.iterate(v);
  return items.empty() ? Value::undefined("last") : items.back();
}

bool parse_py_float(const std::string &text, double &out) {
  std::string s = py::strip(text, true, true);
  std::string t;
  for (char c : s)
    if (c != '_') t.push_back(c);
  if (t.empty()) return false;
  std::string low = py::lower(t);
  if (low == "inf" || low == "+inf" || low == "infinity" || low == "+infinity") {
    out = INFINITY;
    return true;
  }
  if (low == "-inf" || low == "-infinity") {
    out = -INFINITY;
    return true;
  }
  if (low == "nan" || low == "+nan" || low == "-nan") {
    out = NAN;
    return true;
  }
  for (char c : t)
    if (!(std::isdigit(static_cast<unsigned char>(c)) || c == '.' || c == 'e' || c == 'E' ||
          c == '+' || c == '-'))
      return false;
  char *end = nullptr;
  out = std::strtod(t.c_str(), &end);
  return end && *end == '\0';
}

Value f_float(Interpreter &, Value &v, CallArgs &a) {
  ArgReader r(a, "float");
  Value def = r.get(0, "default", Value(0.0));
  r.done(1);
  if (v.is_number()) return Value(v.as_float());
  double d;
  if (v.is_string() && parse_py_float(v.str(), d)) return Value(d);
  return def;
}

Value f_int(Interpreter &, Value &v, CallArgs &a) {
  ArgReader r(a, "int");
  Value def = r.get(0, "default", Value(0));
  int64_t base = as_int_arg(r.get(1, "base", Value(10)), "base");
  r.done(2);
  if (v.is_int() || v.is_bool()) return Value(v.as_int());
  if (v.is_float()) {
    double d = v.as_float();
    if (!std::isfinite(d)) return def;
    if (std::fabs(d) >= 9.2e18) unsupported("integer overflow");
    return Value(static_cast<int64_t>(d));
  }
  if (v.is_string()) {
    std::string s = py::strip(v.str(), true, true);
    std::string t;
    for (char c : s)
      if (c != '_') t.push_back(c);
    if (base >= 2 && base <= 36 && !t.empty()) {
      errno = 0;
      char *end = nullptr;
      long long x = std::strtoll(t.c_str(), &end, static_cast<int>(base));
      if (end && *end == '\0' && errno == 0 && (std::isalnum(static_cast<unsigned char>(t.back()))))
        return Value(static_cast<int64_t>(x));
    }
    double d;
    if (parse_py_float(v.str(), d) && std::isfinite(d) && std::fabs(d) < 9.2e18)
      return Value(static_cast<int64_t>(d));
  }
  return def;
}

Value f_indent(Interpreter &, Value &v, CallArgs &a) {
  ArgReader r(a, "indent");
  Value w = r.get(0, "width", Value(4));
  bool first = truthy(r.get(1, "first", Value(false)));
  bool blank = truthy(r.get(2, "blank", Value(false)));
  r.done(3);
  std::string ind;
  if (w.is_string()) {
    ind = w.str();
  } else {
    int64_t n = as_int_arg(w, "width");
    if (n > 1 << 16) throw Failure(ErrorCode::kResourceExhausted, "indent width too large");
    if (n > 0) ind.assign(static_cast<size_t>(n), ' ');
  }
  std::string s = sstr(v) + "\n";
  std::vector<std::string> lines = py_splitlines(s);
  std::string out;
  if (blank) {
    for (size_t i = 0; i < lines.size(); ++i) out += (i ? "\n" + ind : "") + lines[i];
  } else {
    out = lines.empty() ? "" : lines[0];
    for (size_t i = 1; i < lines.size(); ++i)
      out += "\n" + (lines[i].empty() ? "" : ind + lines[i]);
  }
  if (first) out = ind + out;
  return same_kind(v, std::move(out));
}

Value f_items(Interpreter &, Value &v, CallArgs &) {
  if (v.is_undefined()) return Value::list({});
  if (!v.is_dict() || v.is_namespace()) fail("Can only get item pairs from a mapping.");
  std::vector<Value> out;
  for (const auto &kv : v.dict_ref().items) out.push_back(Value::tuple({kv.first, kv.second}));
  return Value::list(std::move(out));
}

Value f_join(Interpreter &in, Value &v, CallArgs &a) {
  ArgReader r(a, "join");
  std::string sep = sstr(r.get(0, "d", Value("")));
  Value attribute = r.get(1, "attribute", Value::none());
  r.done(2);
  std::string out;
  bool firstp = true;
  for (const auto &item : in.iterate(v)) {
    if (!firstp) out += sep;
    firstp = false;
    out += sstr(attribute.is_none() ? item : get_path(item, attribute));
    in.check_size(out.size());
  }
  return Value(std::move(out));
}

Value f_list(Interpreter &in, Value &v, CallArgs &) { return Value::list(in.iterate(v)); }

Value f_map(Interpreter &in, Value &v, CallArgs &a) {
  std::vector<Value> items =
      truthy(v) ? in.iterate(v) : std::vector<Value>{};  // jinja2: `if value:`
  std::vector<Value> out;
  bool by_attr = false;
  Value attribute, def;
  for (auto &kv : a.kwargs) {
    if (kv.first == "attribute") {
      by_attr = true;
      attribute = kv.second;
    } else if (kv.first == "default")
      def = kv.second;
  }
  if (by_attr) {
    for (const auto &item : items) {
      Value x = get_path(item, attribute);
      out.push_back(x.is_undefined() && !def.is_undefined() ? def : x);
    }
    return Value::generator(std::move(out));
  }
  if (a.args.empty()) fail("map requires a filter argument");
  std::string name = to_str(a.args[0]);
  CallArgs rest;
  rest.args.assign(a.args.begin() + 1, a.args.end());
  rest.kwargs = a.kwargs;
  for (const auto &item : items) {
    CallArgs copy = rest;
    out.push_back(in.apply_filter(name, item, copy));
  }
  return Value::generator(std::move(out));
}

Value select_impl(Interpreter &in, Value &v, CallArgs &a, bool by_attr, bool keep) {
  std::vector<Value> items =
      truthy(v) ? in.iterate(v) : std::vector<Value>{};  // jinja2: `if value:`
  size_t off = 0;
  Value attribute;
  if (by_attr) {
    if (a.args.empty()) fail("selectattr/rejectattr need an attribute name");
    attribute = a.args[0];
    off = 1;
  }
  std::string test;
  CallArgs test_args;
  if (a.args.size() > off) {
    test = to_str(a.args[off]);
    test_args.args.assign(a.args.begin() + static_cast<long>(off) + 1, a.args.end());
    test_args.kwargs = a.kwargs;
    if (!in.has_test(test)) unsupported("no test named '" + test + "'");
  }
  std::vector<Value> out;
  for (const auto &item : items) {
    Value x = by_attr ? get_path(item, attribute) : item;
    bool ok;
    if (test.empty()) {
      ok = truthy(x);
    } else {
      CallArgs copy = test_args;
      ok = in.apply_test(test, x, copy);
    }
    if (ok == keep) out.push_back(item);
  }
  return Value::generator(std::move(out));
}
Value f_select(Interpreter &in, Value &v, CallArgs &a) {
  return select_impl(in, v, a, false, true);
}
Value f_reject(Interpreter &in, Value &v, CallArgs &a) {
  return select_impl(in, v, a, false, false);
}
Value f_selectattr(Interpreter &in, Value &v, CallArgs &a) {
  return select_impl(in, v, a, true, true);
}
Value f_rejectattr(Interpreter &in, Value &v, CallArgs &a) {
  return select_impl(in, v, a, true, false);
}

Value minmax(Interpreter &in, Value &v, CallArgs &a, bool want_max) {
  ArgReader r(a, want_max ? "max" : "min");
  bool cs = truthy(r.get(0, "case_sensitive", Value(false)));
  Value attribute = r.get(1, "attribute", Value::none());
  r.done(2);
  std::vector<Value> items = in.iterate(v);
  if (items.empty()) return Value::undefined(want_max ? "max" : "min");
  size_t best = 0;
  auto key = [&](const Value &x) {
    return sort_key(attribute.is_none() ? x : get_path(x, attribute), cs);
  };
  for (size_t i = 1; i < items.size(); ++i) {
    bool better =
        want_max ? less(key(items[best]), key(items[i])) : less(key(items[i]), key(items[best]));
    if (better) best = i;
  }
  return items[best];
}
Value f_max(Interpreter &in, Value &v, CallArgs &a) { return minmax(in, v, a, true); }
Value f_min(Interpreter &in, Value &v, CallArgs &a) { return minmax(in, v, a, false); }

Value f_replace(Interpreter &in, Value &v, CallArgs &a) {
  ArgReader r(a, "replace");
  std::string old = sstr(r.get(0, "old"));
  std::string neu = sstr(r.get(1, "new"));
  Value count = r.get(2, "count", Value::none());
  r.done(3);
  CallArgs m;
  m.args = {Value(old), Value(neu)};
  if (!count.is_none()) m.args.push_back(count);
  return call_method(in, Value(sstr(v)), "replace", m);
}

Value f_reverse(Interpreter &in, Value &v, CallArgs &) {
  if (v.is_string()) {
    auto cps = py::decode(v.str());
    std::reverse(cps.begin(), cps.end());
    return Value(py::encode(cps));
  }
  if (v.is_generator()) fail("'generator' object is not reversible");
  std::vector<Value> items = in.iterate(v);
  std::reverse(items.begin(), items.end());
  return Value::generator(std::move(items));
}

Value f_round(Interpreter &, Value &v, CallArgs &a) {
  ArgReader r(a, "round");
  int64_t precision = as_int_arg(r.get(0, "precision", Value(0)), "precision");
  std::string method = to_str(r.get(1, "method", Value("common")));
  r.done(2);
  if (!v.is_number())
    fail(std::string("type ") + type_name(v) + " doesn't define __round__ method");
  if (method != "common" && method != "ceil" && method != "floor")
    fail("method must be 'common', 'ceil' or 'floor'");
  if (method == "common") {
    if (!v.is_float()) return Value(v.as_int());  // round(int, n) stays an int
    double x = v.as_float();
    if (!std::isfinite(x) || precision > 300 || precision < -300) return Value(x);
    if (precision >= 0) {
      // printf rounds the exact binary value half-to-even, as CPython's round() does.
      char buf[512];
      std::snprintf(buf, sizeof buf, "%.*f", static_cast<int>(precision), x);
      return Value(std::strtod(buf, nullptr));
    }
    double p = std::pow(10.0, static_cast<double>(-precision));
    return Value(std::nearbyint(x / p) * p);
  }
  double p = std::pow(10.0, static_cast<double>(precision));
  double x = v.as_float() * p;
  return Value((method == "ceil" ? std::ceil(x) : std::floor(x)) / p);
}

Value f_sort(Interpreter &in, Value &v, CallArgs &a) {
  ArgReader r(a, "sort");
  bool reverse = truthy(r.get(0, "reverse", Value(false)));
  bool cs = truthy(r.get(1, "case_sensitive", Value(false)));
  Value attribute = r.get(2, "attribute", Value::none());
  r.done(3);
  std::vector<Value> items = in.iterate(v);
  auto key = [&](const Value &x) {
    return sort_key(attribute.is_none() ? x : get_path(x, attribute), cs);
  };
  std::stable_sort(items.begin(), items.end(), [&](const Value &x, const Value &y) {
    return reverse ? less(key(y), key(x)) : less(key(x), key(y));
  });
  return Value::list(std::move(items));
}

Value f_sum(Interpreter &in, Value &v, CallArgs &a) {
  ArgReader r(a, "sum");
  Value attribute = r.get(0, "attribute", Value::none());
  Value total = r.get(1, "start", Value(0));
  r.done(2);
  for (const auto &item : in.iterate(v))
    total =
        binary_op("+", total, attribute.is_none() ? item : get_path(item, attribute), in.limits());
  return total;
}

// jinja2's title filter: capitalise each word split at [-\s({\[<]+.
Value f_title(Interpreter &, Value &v, CallArgs &) {
  auto cps = py::decode(sstr(v));
  std::string out;
  bool at_start = true;
  auto is_sep = [](char32_t c) {
    return py::is_space(c) || c == '-' || c == '(' || c == '{' || c == '[' || c == '<';
  };
  for (char32_t c : cps) {
    if (is_sep(c)) {
      utf8_append(out, c);
      at_start = true;
      continue;
    }
    std::string one;
    utf8_append(one, c);
    out += at_start ? py::upper(one) : py::lower(one);
    at_start = false;
  }
  return Value(std::move(out));
}

Value f_tojson(Interpreter &, Value &v, CallArgs &a) {
  ArgReader r(a, "tojson");
  bool ensure_ascii = truthy(r.get(0, "ensure_ascii", Value(false)));
  Value indent = r.get(1, "indent", Value::none());
  Value seps = r.get(2, "separators", Value::none());
  bool sort_keys = truthy(r.get(3, "sort_keys", Value(false)));
  r.done(4);
  if (ensure_ascii) unsupported("tojson(ensure_ascii=true)");
  JsonStyle st;
  st.sort_keys = sort_keys;
  if (indent.is_string()) unsupported("tojson with a string indent");
  if (!indent.is_none()) {
    int64_t n = as_int_arg(indent, "indent");
    st.indent = n < 0 ? 0 : static_cast<int>(std::min<int64_t>(n, 1 << 10));
  }
  if (!seps.is_none()) {
    if (!seps.is_list() || seps.items().size() != 2 || !seps.items()[0].is_string() ||
        !seps.items()[1].is_string())
      fail("tojson: separators must be a pair of strings");
    st.item_sep = seps.items()[0].str();
    st.key_sep = seps.items()[1].str();
    if (st.item_sep.empty()) unsupported("tojson with an empty item separator");
    if (st.key_sep.empty()) unsupported("tojson with an empty key separator");
  }
  return Value(to_json(v, st));
}

Value f_trim(Interpreter &, Value &v, CallArgs &a) {
  ArgReader r(a, "trim");
  Value chars = r.get(0, "chars", Value::none());
  r.done(1);
  std::string cs = chars.is_none() ? "" : sstr(chars);
  return same_kind(v, py::strip(sstr(v), true, true, chars.is_none() ? nullptr : &cs));
}

Value f_unique(Interpreter &in, Value &v, CallArgs &a) {
  ArgReader r(a, "unique");
  bool cs = truthy(r.get(0, "case_sensitive", Value(false)));
  Value attribute = r.get(1, "attribute", Value::none());
  r.done(2);
  std::vector<Value> seen, out;
  for (const auto &item : in.iterate(v)) {
    Value key = sort_key(attribute.is_none() ? item : get_path(item, attribute), cs);
    if (key.is_dict() || (key.is_list() && !key.is_tuple()))
      fail(std::string("unhashable type: '") + type_name(key) + "'");
    bool dup = false;
    for (const auto &s : seen) dup = dup || equals(s, key);
    if (dup) continue;
    seen.push_back(key);
    out.push_back(item);
  }
  return Value::generator(std::move(out));
}

Value f_wordcount(Interpreter &, Value &v, CallArgs &) {
  int64_t n = 0;
  bool in_word = false;
  for (char32_t c : py::decode(sstr(v))) {
    bool w = c == '_' || py::is_alpha(c) || py::is_digit(c) ||
             (c < 0x80 && std::isalnum(static_cast<int>(c)));
    if (w && !in_word) ++n;
    in_word = w;
  }
  return Value(n);
}

const std::unordered_map<std::string_view, FilterFn> &table() {
  static const std::unordered_map<std::string_view, FilterFn> t = {
      {"abs", f_abs},
      {"attr", f_attr},
      {"capitalize", f_capitalize},
      {"center", f_center},
      {"count", f_length},
      {"d", f_default},
      {"default", f_default},
      {"dictsort", f_dictsort},
      {"e", f_escape},
      {"escape", f_escape},
      {"first", f_first},
      {"float", f_float},
      {"format", f_format},
      {"indent", f_indent},
      {"int", f_int},
      {"items", f_items},
      {"join", f_join},
      {"last", f_last},
      {"length", f_length},
      {"list", f_list},
      {"lower", f_lower},
      {"map", f_map},
      {"max", f_max},
      {"min", f_min},
      {"reject", f_reject},
      {"rejectattr", f_rejectattr},
      {"replace", f_replace},
      {"reverse", f_reverse},
      {"round", f_round},
      {"safe", f_safe},
      {"select", f_select},
      {"selectattr", f_selectattr},
      {"sort", f_sort},
      {"string", f_string},
      {"sum", f_sum},
      {"title", f_title},
      {"tojson", f_tojson},
      {"trim", f_trim},
      {"unique", f_unique},
      {"upper", f_upper},
      {"wordcount", f_wordcount},
  };
  return t;
}

}  // namespace

FilterFn find_filter(const std::string &name) {
  auto it = table().find(name);
  return it == table().end() ? nullptr : it->second;
}

}  // namespace keel::jinja
