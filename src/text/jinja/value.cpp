#include "text/jinja/value.h"

#include <algorithm>
#include <cmath>

#include "text/jinja/failure.h"
#include "text/jinja/pystr.h"

namespace keel::jinja {

const Value *Dict::find(const Value &key) const {
  for (const auto &kv : items)
    if (equals(kv.first, key)) return &kv.second;
  return nullptr;
}
Value *Dict::find(const Value &key) {
  for (auto &kv : items)
    if (equals(kv.first, key)) return &kv.second;
  return nullptr;
}
const Value *Dict::find(std::string_view key) const {
  for (const auto &kv : items)
    if (kv.first.is_string() && kv.first.str() == key) return &kv.second;
  return nullptr;
}
void Dict::set(const Value &key, Value v) {
  if (Value *slot = find(key)) {
    *slot = std::move(v);
    return;
  }
  items.emplace_back(key, std::move(v));
}

namespace {
int nesting_of(const std::vector<Value> &items) {
  int d = 0;
  for (const auto &x : items) d = std::max(d, x.nesting());
  if (d + 1 > Value::kMaxNesting)
    fail("value nested deeper than " + std::to_string(Value::kMaxNesting) + " levels");
  return d + 1;
}
}  // namespace

Value Value::list(std::vector<Value> items) {
  Value v;
  v.kind_ = Kind::kList;
  v.nesting_ = nesting_of(items);
  v.list_ = std::make_shared<std::vector<Value>>(std::move(items));
  return v;
}
Value Value::tuple(std::vector<Value> items) {
  Value v = list(std::move(items));
  v.tuple_ = true;
  return v;
}
Value Value::generator(std::vector<Value> items) {
  Value v = list(std::move(items));
  v.consumed_ = std::make_shared<bool>(false);
  return v;
}
Value Value::dict(Dict d) {
  Value v;
  v.kind_ = Kind::kDict;
  int depth = 0;
  for (const auto &kv : d.items) depth = std::max({depth, kv.first.nesting(), kv.second.nesting()});
  if (depth + 1 > kMaxNesting)
    fail("value nested deeper than " + std::to_string(kMaxNesting) + " levels");
  v.nesting_ = depth + 1;
  v.dict_ = std::make_shared<Dict>(std::move(d));
  return v;
}
Value Value::namespace_object(Dict d) {
  Value v = dict(std::move(d));
  v.namespace_ = true;
  return v;
}
Value Value::function(std::string name, NativeFunction fn) {
  Value v;
  v.kind_ = Kind::kFunction;
  v.fn_ = std::make_shared<Function>(Function{std::move(name), std::move(fn)});
  return v;
}

std::vector<Value> Value::take_generator() const {
  if (!consumed_) return *list_;
  if (*consumed_) return {};
  *consumed_ = true;
  return *list_;
}

const char *type_name(const Value &v) {
  switch (v.kind()) {
    case Value::Kind::kUndefined:
      return "Undefined";
    case Value::Kind::kNone:
      return "NoneType";
    case Value::Kind::kBool:
      return "bool";
    case Value::Kind::kInt:
      return "int";
    case Value::Kind::kFloat:
      return "float";
    case Value::Kind::kString:
      return "str";
    case Value::Kind::kList:
      return v.is_generator() ? "generator" : v.is_tuple() ? "tuple" : "list";
    case Value::Kind::kDict:
      return v.is_namespace() ? "Namespace" : "dict";
    case Value::Kind::kFunction:
      return "function";
  }
  return "object";
}

bool truthy(const Value &v) {
  switch (v.kind()) {
    case Value::Kind::kUndefined:
    case Value::Kind::kNone:
      return false;
    case Value::Kind::kBool:
      return v.as_bool();
    case Value::Kind::kInt:
      return v.as_int() != 0;
    case Value::Kind::kFloat:
      return v.as_float() != 0.0;
    case Value::Kind::kString:
      return !v.str().empty();
    case Value::Kind::kList:
      return v.is_generator() || !v.items().empty();
    case Value::Kind::kDict:
      return v.is_namespace() || !v.dict_ref().items.empty();
    case Value::Kind::kFunction:
      return true;
  }
  return false;
}

namespace {
void repr_into(std::string &out, const Value &v, int depth);

void str_into(std::string &out, const Value &v, int depth) {
  switch (v.kind()) {
    case Value::Kind::kUndefined:
      return;
    case Value::Kind::kString:
      out += v.str();
      return;
    default:
      repr_into(out, v, depth);
  }
}

void repr_into(std::string &out, const Value &v, int depth) {
  if (depth > 512) fail("maximum recursion depth exceeded while getting the repr of an object");
  switch (v.kind()) {
    case Value::Kind::kUndefined:
      return;  // str(Undefined) is ''
    case Value::Kind::kNone:
      out += "None";
      return;
    case Value::Kind::kBool:
      out += v.as_bool() ? "True" : "False";
      return;
    case Value::Kind::kInt:
      out += std::to_string(v.as_int());
      return;
    case Value::Kind::kFloat:
      out += py::repr_float(v.as_float());
      return;
    case Value::Kind::kString:
      out += py::repr_string(v.str());
      return;
    case Value::Kind::kList: {
      if (v.is_generator()) unsupported("printing a generator (add |list)");
      const auto &items = v.items();
      out += v.is_tuple() ? "(" : "[";
      for (size_t i = 0; i < items.size(); ++i) {
        if (i) out += ", ";
        repr_into(out, items[i], depth + 1);
      }
      if (v.is_tuple() && items.size() == 1) out += ",";
      out += v.is_tuple() ? ")" : "]";
      return;
    }
    case Value::Kind::kDict: {
      if (v.is_namespace()) unsupported("printing a namespace object");
      out += "{";
      bool first = true;
      for (const auto &kv : v.dict_ref().items) {
        if (!first) out += ", ";
        first = false;
        repr_into(out, kv.first, depth + 1);
        out += ": ";
        repr_into(out, kv.second, depth + 1);
      }
      out += "}";
      return;
    }
    case Value::Kind::kFunction:
      unsupported("printing a function (" + v.func().name + ")");
  }
}
}  // namespace

std::string to_str(const Value &v) {
  if (v.is_string()) return v.str();
  std::string out;
  str_into(out, v, 0);
  return out;
}

std::string to_repr(const Value &v) {
  std::string out;
  repr_into(out, v, 0);
  return out;
}

bool equals(const Value &a, const Value &b) {
  using K = Value::Kind;
  if (a.is_number() && b.is_number()) {
    if (a.is_float() || b.is_float()) return a.as_float() == b.as_float();
    return a.as_int() == b.as_int();
  }
  if (a.kind() != b.kind()) return false;
  switch (a.kind()) {
    case K::kUndefined:
    case K::kNone:
      return true;
    case K::kString:
      return a.str() == b.str();
    case K::kList: {
      if (a.is_tuple() != b.is_tuple() || a.is_generator() || b.is_generator())
        return a.list_ptr() == b.list_ptr();
      const auto &x = a.items(), &y = b.items();
      if (x.size() != y.size()) return false;
      for (size_t i = 0; i < x.size(); ++i)
        if (!equals(x[i], y[i])) return false;
      return true;
    }
    case K::kDict: {
      if (a.is_namespace() || b.is_namespace()) return &a.dict_ref() == &b.dict_ref();
      const auto &x = a.dict_ref().items, &y = b.dict_ref().items;
      if (x.size() != y.size()) return false;
      for (const auto &kv : x) {
        const Value *o = b.dict_ref().find(kv.first);
        if (!o || !equals(kv.second, *o)) return false;
      }
      return true;
    }
    case K::kFunction:
      return &a.func() == &b.func();
    default:
      return false;
  }
}

bool less(const Value &a, const Value &b) {
  if (a.is_number() && b.is_number()) {
    if (a.is_float() || b.is_float()) return a.as_float() < b.as_float();
    return a.as_int() < b.as_int();
  }
  if (a.is_string() && b.is_string()) return a.str() < b.str();  // UTF-8 keeps code point order
  if (a.is_list() && b.is_list() && a.is_tuple() == b.is_tuple() && !a.is_generator() &&
      !b.is_generator()) {
    const auto &x = a.items(), &y = b.items();
    for (size_t i = 0; i < x.size() && i < y.size(); ++i) {
      if (equals(x[i], y[i])) continue;
      return less(x[i], y[i]);
    }
    return x.size() < y.size();
  }
  fail(std::string("'<' not supported between instances of '") + type_name(a) + "' and '" +
       type_name(b) + "'");
}

namespace {
void json_into(std::string &out, const Value &v, const JsonStyle &st, int level) {
  if (level > 512) fail("maximum recursion depth exceeded while encoding a JSON object");
  const std::string item_sep = !st.item_sep.empty() ? st.item_sep : st.indent >= 0 ? "," : ", ";
  const std::string key_sep = !st.key_sep.empty() ? st.key_sep : ": ";
  auto newline = [&](int lvl) {
    if (st.indent < 0) return;
    out.push_back('\n');
    out.append(static_cast<size_t>(st.indent) * static_cast<size_t>(lvl), ' ');
  };
  switch (v.kind()) {
    case Value::Kind::kNone:
      out += "null";
      return;
    case Value::Kind::kBool:
      out += v.as_bool() ? "true" : "false";
      return;
    case Value::Kind::kInt:
      out += std::to_string(v.as_int());
      return;
    case Value::Kind::kFloat:
      out += py::json_float(v.as_float());
      return;
    case Value::Kind::kString:
      out += py::json_string(v.str());
      return;
    case Value::Kind::kList: {
      if (v.is_generator()) fail("Object of type generator is not JSON serializable");
      const auto &items = v.items();
      if (items.empty()) {
        out += "[]";
        return;
      }
      out += "[";
      for (size_t i = 0; i < items.size(); ++i) {
        if (i) out += item_sep;
        newline(level + 1);
        json_into(out, items[i], st, level + 1);
      }
      newline(level);
      out += "]";
      return;
    }
    case Value::Kind::kDict: {
      if (v.is_namespace()) fail("Object of type Namespace is not JSON serializable");
      std::vector<const std::pair<Value, Value> *> items;
      for (const auto &kv : v.dict_ref().items) items.push_back(&kv);
      if (items.empty()) {
        out += "{}";
        return;
      }
      if (st.sort_keys)
        std::stable_sort(items.begin(), items.end(),
                         [](auto *a, auto *b) { return less(a->first, b->first); });
      out += "{";
      bool first = true;
      for (const auto *kv : items) {
        if (!first) out += item_sep;
        first = false;
        newline(level + 1);
        const Value &k = kv->first;
        if (k.is_string()) {
          out += py::json_string(k.str());
        } else if (k.is_bool() || k.is_int() || k.is_float() || k.is_none()) {
          std::string ks;
          json_into(ks, k, st, level + 1);
          out += py::json_string(ks);
        } else {
          fail(std::string("keys must be str, int, float, bool or None, not ") + type_name(k));
        }
        out += key_sep;
        json_into(out, kv->second, st, level + 1);
      }
      newline(level);
      out += "}";
      return;
    }
    default:
      fail(std::string("Object of type ") + type_name(v) + " is not JSON serializable");
  }
}
}  // namespace

std::string to_json(const Value &v, const JsonStyle &style) {
  std::string out;
  json_into(out, v, style, 0);
  return out;
}

}  // namespace keel::jinja
