// The values a Jinja2 template computes with, modelled on the Python objects jinja2
// sees: Undefined, None, bool, int, float, str, list/tuple, dict (insertion-ordered, as
// Python's), namespace, generator (what map/select return) and callables (macros,
// globals, bound methods). Lists and dicts are shared by reference, as in Python.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace keel::jinja {

class Value;
class Interpreter;

// Arguments of a call: positional, then keyword, in call order.
struct CallArgs {
  std::vector<Value> args;
  std::vector<std::pair<std::string, Value>> kwargs;
};

using NativeFunction = std::function<Value(Interpreter &, CallArgs &)>;

struct Function {
  std::string name;
  NativeFunction fn;
};

// An insertion-ordered mapping (Python dict). Lookup is linear: template dicts are small.
struct Dict {
  std::vector<std::pair<Value, Value>> items;
  const Value *find(const Value &key) const;
  Value *find(const Value &key);
  const Value *find(std::string_view key) const;
  void set(const Value &key, Value v);
};

class Value {
 public:
  enum class Kind { kUndefined, kNone, kBool, kInt, kFloat, kString, kList, kDict, kFunction };

  Value() = default;  // Undefined
  Value(bool b) : kind_(Kind::kBool), b_(b) {}
  Value(int v) : kind_(Kind::kInt), i_(v) {}
  Value(int64_t v) : kind_(Kind::kInt), i_(v) {}
  Value(double v) : kind_(Kind::kFloat), f_(v) {}
  Value(std::string s) : kind_(Kind::kString), s_(std::move(s)) {}
  Value(const char *s) : kind_(Kind::kString), s_(s) {}

  static Value undefined(std::string name) {
    Value v;
    v.s_ = std::move(name);
    return v;
  }
  // markupsafe.Markup, what |safe returns: `markup + str` HTML-escapes the str.
  static Value markup(std::string s) {
    Value v(std::move(s));
    v.markup_ = true;
    return v;
  }
  static Value none() {
    Value v;
    v.kind_ = Kind::kNone;
    return v;
  }
  static Value list(std::vector<Value> items);
  static Value tuple(std::vector<Value> items);
  static Value generator(std::vector<Value> items);
  static Value dict(Dict d = {});
  static Value namespace_object(Dict d = {});
  static Value function(std::string name, NativeFunction fn);

  Kind kind() const { return kind_; }
  bool is_undefined() const { return kind_ == Kind::kUndefined; }
  bool is_none() const { return kind_ == Kind::kNone; }
  bool is_bool() const { return kind_ == Kind::kBool; }
  bool is_int() const { return kind_ == Kind::kInt; }
  bool is_float() const { return kind_ == Kind::kFloat; }
  bool is_number() const {
    return kind_ == Kind::kInt || kind_ == Kind::kFloat || kind_ == Kind::kBool;
  }
  bool is_string() const { return kind_ == Kind::kString; }
  bool is_list() const { return kind_ == Kind::kList; }
  bool is_dict() const { return kind_ == Kind::kDict; }
  bool is_function() const { return kind_ == Kind::kFunction; }
  bool is_tuple() const { return tuple_; }
  bool is_markup() const { return markup_; }
  bool is_namespace() const { return namespace_; }
  bool is_generator() const { return consumed_ != nullptr; }

  // Nesting depth of lists/dicts (scalars 0). Capped at construction, so that printing,
  // comparing and destroying a value never recurses deeper than the stack allows.
  static constexpr int kMaxNesting = 1000;
  int nesting() const { return nesting_; }

  bool as_bool() const { return b_; }
  int64_t as_int() const { return kind_ == Kind::kBool ? (b_ ? 1 : 0) : i_; }
  double as_float() const { return kind_ == Kind::kFloat ? f_ : static_cast<double>(as_int()); }
  const std::string &str() const { return s_; }  // a string, or an Undefined's name
  const std::vector<Value> &items() const { return *list_; }
  std::shared_ptr<std::vector<Value>> list_ptr() const { return list_; }
  Dict &dict_ref() const { return *dict_; }
  const Function &func() const { return *fn_; }

  // Generators are single-use, as in Python: the first iteration consumes them.
  std::vector<Value> take_generator() const;

 private:
  Kind kind_ = Kind::kUndefined;
  bool tuple_ = false;
  bool namespace_ = false;
  bool markup_ = false;
  int nesting_ = 0;
  bool b_ = false;
  int64_t i_ = 0;
  double f_ = 0;
  std::string s_;
  std::shared_ptr<std::vector<Value>> list_;
  std::shared_ptr<Dict> dict_;
  std::shared_ptr<Function> fn_;
  std::shared_ptr<bool> consumed_;
};

const char *type_name(const Value &v);  // Python's type name, for error messages
bool truthy(const Value &v);
std::string to_str(const Value &v);   // str(v)
std::string to_repr(const Value &v);  // repr(v)
bool equals(const Value &a, const Value &b);
// a < b as Python orders them; throws for unorderable types.
bool less(const Value &a, const Value &b);

// json.dumps(v, ensure_ascii=False, indent=indent, separators=..., sort_keys=...);
// indent < 0 means None. Throws for values JSON cannot hold.
struct JsonStyle {
  int indent = -1;
  std::string item_sep;  // empty: Python's default for the indent
  std::string key_sep;
  bool sort_keys = false;
};
std::string to_json(const Value &v, const JsonStyle &style);

}  // namespace keel::jinja
