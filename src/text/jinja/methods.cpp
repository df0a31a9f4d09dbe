// Methods of Python's str, dict and list that templates call (`s.strip()`,
// `d.get(k)`, ...). Mutating methods are refused, as jinja2's immutable sandbox does.
#include <algorithm>
#include <string_view>

#include "text/jinja/failure.h"
#include "text/jinja/interpreter.h"
#include "text/jinja/pystr.h"

namespace keel::jinja {

// str.splitlines(): splits at every Python line boundary, dropping the boundaries.
std::vector<std::string> py_splitlines(const std::string &s) {
  std::vector<std::string> lines;
  auto cps = py::decode(s);
  std::vector<char32_t> cur;
  for (size_t i = 0; i < cps.size(); ++i) {
    char32_t c = cps[i];
    bool brk = c == '\n' || c == '\r' || c == 0x0B || c == 0x0C || c == 0x1C || c == 0x1D ||
               c == 0x1E || c == 0x85 || c == 0x2028 || c == 0x2029;
    if (!brk) {
      cur.push_back(c);
      continue;
    }
    if (c == '\r' && i + 1 < cps.size() && cps[i + 1] == '\n') ++i;
    lines.push_back(py::encode(cur));
    cur.clear();
  }
  if (!cur.empty()) lines.push_back(py::encode(cur));
  return lines;
}

namespace {

const std::string_view kStrMethods[] = {
    "strip",      "lstrip",    "rstrip",       "split",        "rsplit",       "splitlines",
    "startswith", "endswith",  "upper",        "lower",        "title",        "capitalize",
    "swapcase",   "replace",   "find",         "rfind",        "index",        "rindex",
    "count",      "join",      "format",       "isdigit",      "isalpha",      "isalnum",
    "isspace",    "isupper",   "islower",      "isnumeric",    "isdecimal",    "center",
    "ljust",      "rjust",     "zfill",        "removeprefix", "removesuffix", "partition",
    "rpartition", "casefold",  "encode",       "expandtabs",   "istitle",      "format_map",
    "translate",  "maketrans", "isidentifier", "isprintable",  "isascii"};
const std::string_view kDictMethods[] = {"get",   "items",   "keys",       "values",
                                         "pop",   "popitem", "setdefault", "update",
                                         "clear", "copy",    "fromkeys"};
const std::string_view kListMethods[] = {"index",  "count",   "append", "extend", "insert", "pop",
                                         "remove", "reverse", "sort",   "clear",  "copy"};

template <size_t N>
bool listed(const std::string_view (&names)[N], const std::string &n) {
  return std::find(std::begin(names), std::end(names), n) != std::end(names);
}

std::string arg_str(const Value &v, const char *method) {
  if (!v.is_string()) fail(std::string(method) + "() argument must be str, not " + type_name(v));
  return v.str();
}

// str.split(sep=None, maxsplit=-1) and rsplit.
Value split(const std::string &s, const Value &sep, int64_t maxsplit, bool right) {
  std::vector<std::string> parts;
  if (sep.is_none()) {
    auto cps = py::decode(s);
    std::vector<std::vector<char32_t>> words;
    if (!right) {
      size_t i = 0;
      while (i < cps.size()) {
        while (i < cps.size() && py::is_space(cps[i])) ++i;
        if (i >= cps.size()) break;
        if (maxsplit >= 0 && static_cast<int64_t>(words.size()) == maxsplit) {
          size_t e = cps.size();
          while (e > i && py::is_space(cps[e - 1])) --e;
          words.emplace_back(cps.begin() + static_cast<long>(i),
                             cps.begin() + static_cast<long>(e));
          break;
        }
        size_t j = i;
        while (j < cps.size() && !py::is_space(cps[j])) ++j;
        words.emplace_back(cps.begin() + static_cast<long>(i), cps.begin() + static_cast<long>(j));
        i = j;
      }
    } else {
      size_t i = cps.size();
      while (i > 0) {
        while (i > 0 && py::is_space(cps[i - 1])) --i;
        if (i == 0) break;
        if (maxsplit >= 0 && static_cast<int64_t>(words.size()) == maxsplit) {
          size_t b = 0;
          while (b < i && py::is_space(cps[b])) ++b;
          words.emplace_back(cps.begin() + static_cast<long>(b),
                             cps.begin() + static_cast<long>(i));
          break;
        }
        size_t j = i;
        while (j > 0 && !py::is_space(cps[j - 1])) --j;
        words.emplace_back(cps.begin() + static_cast<long>(j), cps.begin() + static_cast<long>(i));
        i = j;
      }
      std::reverse(words.begin(), words.end());
    }
    for (auto &w : words) parts.push_back(py::encode(w));
  } else {
    std::string d = arg_str(sep, "split");
    if (d.empty()) fail("empty separator");
    if (!right) {
      size_t pos = 0;
      while (true) {
        size_t f = s.find(d, pos);
        if (f == std::string::npos ||
            (maxsplit >= 0 && static_cast<int64_t>(parts.size()) == maxsplit)) {
          parts.push_back(s.substr(pos));
          break;
        }
        parts.push_back(s.substr(pos, f - pos));
        pos = f + d.size();
      }
    } else {
      size_t end = s.size();
      while (true) {
        size_t f = end >= d.size() ? s.rfind(d, end - d.size()) : std::string::npos;
        if (f == std::string::npos ||
            (maxsplit >= 0 && static_cast<int64_t>(parts.size()) == maxsplit)) {
          parts.push_back(s.substr(0, end));
          break;
        }
        parts.push_back(s.substr(f + d.size(), end - f - d.size()));
        end = f;
      }
      std::reverse(parts.begin(), parts.end());
    }
  }
  std::vector<Value> out;
  for (auto &p : parts) out.emplace_back(std::move(p));
  return Value::list(std::move(out));
}

bool affix(const std::string &s, const Value &what, bool start, const char *method) {
  auto one = [&](const Value &v) {
    std::string a = arg_str(v, method);
    if (a.size() > s.size()) return false;
    return start ? s.compare(0, a.size(), a) == 0
                 : s.compare(s.size() - a.size(), a.size(), a) == 0;
  };
  if (what.is_list() && what.is_tuple()) {
    for (const auto &v : what.items())
      if (one(v)) return true;
    return false;
  }
  return one(what);
}

// str.format with {} / {0} / {name} fields and {{ }} escapes; no format specs.
std::string format(Interpreter &in, const std::string &fmt, CallArgs &a) {
  std::string out;
  size_t auto_idx = 0;
  for (size_t i = 0; i < fmt.size(); ++i) {
    char c = fmt[i];
    if (c == '{' && i + 1 < fmt.size() && fmt[i + 1] == '{') {
      out.push_back('{');
      ++i;
    } else if (c == '}' && i + 1 < fmt.size() && fmt[i + 1] == '}') {
      out.push_back('}');
      ++i;
    } else if (c == '{') {
      size_t e = fmt.find('}', i);
      if (e == std::string::npos) fail("Single '{' encountered in format string");
      std::string field = fmt.substr(i + 1, e - i - 1);
      if (field.find_first_of(":!.[") != std::string::npos)
        unsupported("str.format specs and conversions");
      Value v;
      if (field.empty()) {
        if (auto_idx >= a.args.size())
          fail("Replacement index out of range for positional args tuple");
        v = a.args[auto_idx++];
      } else if (std::all_of(field.begin(), field.end(),
                             [](char ch) { return ch >= '0' && ch <= '9'; })) {
        size_t k = std::stoul(field);
        if (k >= a.args.size()) fail("Replacement index out of range for positional args tuple");
        v = a.args[k];
      } else {
        bool found = false;
        for (auto &kv : a.kwargs)
          if (kv.first == field) {
            v = kv.second;
            found = true;
          }
        if (!found) fail("KeyError: '" + field + "'");
      }
      out += to_str(v);
      in.check_size(out.size());
      i = e;
    } else if (c == '}') {
      fail("Single '}' encountered in format string");
    } else {
      out.push_back(c);
    }
  }
  return out;
}

Value str_method(Interpreter &in, const std::string &s, const std::string &m, CallArgs &a) {
  ArgReader r(a, m.c_str());
  if (m == "strip" || m == "lstrip" || m == "rstrip") {
    Value chars = r.get(0, "chars", Value::none());
    r.done(1);
    std::string cs = chars.is_none() ? "" : arg_str(chars, m.c_str());
    return Value(py::strip(s, m != "rstrip", m != "lstrip", chars.is_none() ? nullptr : &cs));
  }
  if (m == "split" || m == "rsplit") {
    Value sep = r.get(0, "sep", Value::none());
    Value maxsplit = r.get(1, "maxsplit", Value(-1));
    r.done(2);
    if (!maxsplit.is_int()) fail("maxsplit must be an integer");
    return split(s, sep, maxsplit.as_int(), m == "rsplit");
  }
  if (m == "splitlines") {
    r.done(0);
    std::vector<Value> out;
    for (auto &l : py_splitlines(s)) out.emplace_back(std::move(l));
    return Value::list(std::move(out));
  }
  if (m == "startswith" || m == "endswith") {
    Value what = r.get(0, m == "startswith" ? "prefix" : "suffix");
    r.done(1);
    return Value(affix(s, what, m == "startswith", m.c_str()));
  }
  if (m == "upper") return r.done(0), Value(py::upper(s));
  if (m == "lower" || m == "casefold") return r.done(0), Value(py::lower(s));
  if (m == "title") return r.done(0), Value(py::title(s));
  if (m == "capitalize") return r.done(0), Value(py::capitalize(s));
  if (m == "replace") {
    std::string old = arg_str(r.get(0, "old"), "replace");
    std::string neu = arg_str(r.get(1, "new"), "replace");
    Value count = r.get(2, "count", Value(-1));
    r.done(3);
    int64_t n = count.is_int() ? count.as_int() : -1;
    std::string out;
    if (old.empty()) {
      // Python inserts `new` between every character and at both ends.
      auto cps = py::decode(s);
      int64_t done = 0;
      for (size_t i = 0; i <= cps.size(); ++i) {
        if (n < 0 || done < n) {
          out += neu;
          ++done;
        }
        if (i < cps.size()) utf8_append(out, cps[i]);
        in.check_size(out.size());
      }
      return Value(std::move(out));
    }
    size_t pos = 0;
    int64_t done = 0;
    while (true) {
      size_t f = (n >= 0 && done >= n) ? std::string::npos : s.find(old, pos);
      if (f == std::string::npos) {
        out.append(s, pos, std::string::npos);
        break;
      }
      out.append(s, pos, f - pos);
      out += neu;
      in.check_size(out.size());
      pos = f + old.size();
      ++done;
    }
    return Value(std::move(out));
  }
  if (m == "find" || m == "rfind" || m == "index" || m == "rindex" || m == "count") {
    std::string sub = arg_str(r.get(0, "sub"), m.c_str());
    r.done(1);
    if (m == "count") {
      if (sub.empty()) return Value(static_cast<int64_t>(py::length(s) + 1));
      int64_t n = 0;
      for (size_t p = s.find(sub); p != std::string::npos; p = s.find(sub, p + sub.size())) ++n;
      return Value(n);
    }
    size_t f = (m == "find" || m == "index") ? s.find(sub) : s.rfind(sub);
    if (f == std::string::npos) {
      if (m == "index" || m == "rindex") fail("substring not found");
      return Value(-1);
    }
    return Value(static_cast<int64_t>(py::length(s.substr(0, f))));
  }
  if (m == "join") {
    Value items = r.get(0, "iterable");
    r.done(1);
    std::string out;
    bool first = true;
    for (const auto &v : in.iterate(items)) {
      if (!v.is_string())
        fail(std::string("sequence item: expected str instance, ") + type_name(v) + " found");
      if (!first) out += s;
      first = false;
      out += v.str();
      in.check_size(out.size());
    }
    return Value(std::move(out));
  }
  if (m == "format") return Value(format(in, s, a));
  auto all_cps = [&](auto pred) {
    auto cps = py::decode(s);
    return Value(!cps.empty() && std::all_of(cps.begin(), cps.end(), pred));
  };
  if (m == "isdigit" || m == "isnumeric" || m == "isdecimal")
    return r.done(0), all_cps(py::is_digit);
  if (m == "isalpha") return r.done(0), all_cps(py::is_alpha);
  if (m == "isalnum")
    return r.done(0), all_cps([](char32_t c) { return py::is_alpha(c) || py::is_digit(c); });
  if (m == "isspace") return r.done(0), all_cps(py::is_space);
  if (m == "isupper" || m == "islower") {
    r.done(0);
    bool cased = false;
    for (char32_t c : py::decode(s)) {
      if (m == "isupper" ? py::is_lower_cp(c) : py::is_upper_cp(c)) return Value(false);
      cased = cased || (m == "isupper" ? py::is_upper_cp(c) : py::is_lower_cp(c));
    }
    return Value(cased);
  }
  if (m == "center" || m == "ljust" || m == "rjust" || m == "zfill") {
    Value w = r.get(0, "width");
    Value fill = m == "zfill" ? Value("0") : r.get(1, "fillchar", Value(" "));
    r.done(m == "zfill" ? 1 : 2);
    if (!w.is_int()) fail("width must be an integer");
    int64_t len = static_cast<int64_t>(py::length(s));
    int64_t width = w.as_int();
    if (width > (1 << 20)) throw Failure(ErrorCode::kResourceExhausted, "width too large");
    if (width <= len) return Value(s);
    std::string f = arg_str(fill, m.c_str());
    if (py::length(f) != 1) fail("The fill character must be exactly one character long");
    int64_t pad = width - len;
    int64_t left = m == "ljust" ? 0 : m == "center" ? pad / 2 + (pad & width & 1) : pad;
    std::string out;
    std::string body = s;
    if (m == "zfill" && !s.empty() && (s[0] == '-' || s[0] == '+')) {
      out.push_back(s[0]);
      body = s.substr(1);
    }
    for (int64_t i = 0; i < left; ++i) out += f;
    out += body;
    for (int64_t i = left; i < pad; ++i) out += f;
    return Value(std::move(out));
  }
  if (m == "removeprefix" || m == "removesuffix") {
    std::string x = arg_str(r.get(0, m == "removeprefix" ? "prefix" : "suffix"), m.c_str());
    r.done(1);
    if (m == "removeprefix" && s.compare(0, x.size(), x) == 0 && x.size() <= s.size())
      return Value(s.substr(x.size()));
    if (m == "removesuffix" && x.size() <= s.size() &&
        s.compare(s.size() - x.size(), x.size(), x) == 0 && !x.empty())
      return Value(s.substr(0, s.size() - x.size()));
    return Value(s);
  }
  if (m == "partition" || m == "rpartition") {
    std::string sep = arg_str(r.get(0, "sep"), m.c_str());
    r.done(1);
    if (sep.empty()) fail("empty separator");
    size_t f = m == "partition" ? s.find(sep) : s.rfind(sep);
    if (f == std::string::npos)
      return m == "partition" ? Value::tuple({Value(s), Value(""), Value("")})
                              : Value::tuple({Value(""), Value(""), Value(s)});
    return Value::tuple({Value(s.substr(0, f)), Value(sep), Value(s.substr(f + sep.size()))});
  }
  unsupported("str." + m + "()");
}

Value dict_method(Interpreter &, const Value &d, const std::string &m, CallArgs &a) {
  ArgReader r(a, m.c_str());
  if (m == "get") {
    Value key = r.get(0, "key");
    Value def = r.get(1, "default", Value::none());
    r.done(2);
    if (key.is_dict() || (key.is_list() && !key.is_tuple()))
      fail(std::string("unhashable type: '") + type_name(key) + "'");
    const Value *v = d.dict_ref().find(key);
    return v ? *v : def;
  }
  std::vector<Value> out;
  if (m == "items") {
    r.done(0);
    for (const auto &kv : d.dict_ref().items) out.push_back(Value::tuple({kv.first, kv.second}));
    return Value::list(std::move(out));
  }
  if (m == "keys" || m == "values") {
    r.done(0);
    for (const auto &kv : d.dict_ref().items) out.push_back(m == "keys" ? kv.first : kv.second);
    return Value::list(std::move(out));
  }
  if (m == "copy") return r.done(0), Value::dict(d.dict_ref());
  fail("access to attribute '" + m + "' of 'dict' object is unsafe.");
}

Value list_method(Interpreter &, const Value &l, const std::string &m, CallArgs &a) {
  ArgReader r(a, m.c_str());
  if (m == "index" || m == "count") {
    Value x = r.get(0, "value");
    r.done(1);
    int64_t n = 0;
    for (size_t i = 0; i < l.items().size(); ++i) {
      if (!equals(l.items()[i], x)) continue;
      if (m == "index") return Value(static_cast<int64_t>(i));
      ++n;
    }
    if (m == "index") fail("value is not in list");
    return Value(n);
  }
  if (m == "copy") return r.done(0), Value::list(l.items());
  fail("access to attribute '" + m + "' of '" + type_name(l) + "' object is unsafe.");
}

}  // namespace

bool has_method(const Value &obj, const std::string &name) {
  if (obj.is_string()) return listed(kStrMethods, name);
  if (obj.is_dict() && !obj.is_namespace()) return listed(kDictMethods, name);
  if (obj.is_list() && !obj.is_generator())
    return listed(kListMethods, name) && (!obj.is_tuple() || name == "index" || name == "count");
  return false;
}

Value call_method(Interpreter &in, const Value &obj, const std::string &name, CallArgs &args) {
  if (obj.is_string()) {
    Value r = str_method(in, obj.str(), name, args);
    static const std::string_view kKeep[] = {"strip",  "lstrip", "rstrip",     "upper",
                                             "lower",  "title",  "capitalize", "replace",
                                             "center", "ljust",  "rjust",      "zfill"};
    if (obj.is_markup() && r.is_string() && listed(kKeep, name)) return Value::markup(r.str());
    return r;
  }
  if (obj.is_dict()) return dict_method(in, obj, name, args);
  if (obj.is_list()) return list_method(in, obj, name, args);
  fail(std::string("'") + type_name(obj) + "' object has no attribute '" + name + "'");
}

}  // namespace keel::jinja
