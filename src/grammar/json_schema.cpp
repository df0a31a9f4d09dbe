#include "grammar/json_schema.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <tuple>

#include "core/error.h"
#include "grammar/compiled_grammar.h"
#include "grammar/integer_range.h"
#include "grammar/matcher.h"
#include "grammar/number_range.h"
#include "grammar/regex_compiler.h"

namespace keel::grammar {

namespace {

using json = nlohmann::ordered_json;
using ExprId = GrammarBuilder::ExprId;

constexpr int kMaxStringLength = 1'000'000'000;  // min/maxLength past this are refused
constexpr std::int64_t kMaxItems = 10'000;
constexpr int kMaxIndent = 40;  // spaces after a newline between tokens (bounded whitespace)

// Keywords that only annotate (or that the structure already implies).
const std::set<std::string, std::less<>> kIgnored = {"$schema",
                                                     "$id",
                                                     "$comment",
                                                     "title",
                                                     "description",
                                                     "default",
                                                     "examples",
                                                     "deprecated",
                                                     "readOnly",
                                                     "writeOnly",
                                                     "strict",
                                                     "$defs",
                                                     "definitions",
                                                     "contentEncoding",
                                                     "contentMediaType",
                                                     "unevaluatedProperties",
                                                     "propertyOrdering",
                                                     "nullable",
                                                     "format",
                                                     "additionalItems",
                                                     "name",
                                                     "id",
                                                     "x-keel-whitespace"};

const std::map<std::string, std::string, std::less<>> kFormats = {
    // Calendar dates: days per month, February 29 in leap years only.
    {"date",
     R"((\d{4}-((0[13578]|1[02])-(0[1-9]|[12]\d|3[01])|(0[469]|11)-(0[1-9]|[12]\d|30)|02-(0[1-9]|1\d|2[0-8]))|(\d\d(0[48]|[2468][048]|[13579][26])|([02468][048]|[13579][26])00)-02-29))"},
    {"time", R"(([01]\d|2[0-3]):[0-5]\d:[0-5]\d(\.\d{1,9})?(Z|[+-]([01]\d|2[0-3]):[0-5]\d)?)"},
    {"date-time",
     R"((\d{4}-((0[13578]|1[02])-(0[1-9]|[12]\d|3[01])|(0[469]|11)-(0[1-9]|[12]\d|30)|02-(0[1-9]|1\d|2[0-8]))|(\d\d(0[48]|[2468][048]|[13579][26])|([02468][048]|[13579][26])00)-02-29)T([01]\d|2[0-3]):[0-5]\d:[0-5]\d(\.\d{1,9})?(Z|[+-]([01]\d|2[0-3]):[0-5]\d))"},
    {"uuid", R"([0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12})"},
    // Formats use loops, not long counted repeats: each counted position is a state.
    {"email", R"([A-Za-z0-9._%+-]+@[A-Za-z0-9-]+(\.[A-Za-z0-9-]+)+)"},
    {"ipv4", R"(((25[0-5]|2[0-4]\d|1\d\d|[1-9]?\d)\.){3}(25[0-5]|2[0-4]\d|1\d\d|[1-9]?\d))"},
    {"hostname",
     R"([A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?(\.[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?){0,8})"},
    {"uri", R"([A-Za-z][A-Za-z0-9+.-]*:[^\s]+)"},
    // An IRI is a URI that may hold non-ASCII characters, which [^\s] already allows.
    {"iri", R"([A-Za-z][A-Za-z0-9+.-]*:[^\s]+)"},
    // RFC 4291 text forms without the embedded IPv4 ones (those are refused, not accepted).
    {"ipv6",
     R"(([0-9a-fA-F]{1,4}:){7}[0-9a-fA-F]{1,4}|([0-9a-fA-F]{1,4}:){1,7}:|([0-9a-fA-F]{1,4}:){1,6}:[0-9a-fA-F]{1,4}|([0-9a-fA-F]{1,4}:){1,5}(:[0-9a-fA-F]{1,4}){1,2}|([0-9a-fA-F]{1,4}:){1,4}(:[0-9a-fA-F]{1,4}){1,3}|([0-9a-fA-F]{1,4}:){1,3}(:[0-9a-fA-F]{1,4}){1,4}|([0-9a-fA-F]{1,4}:){1,2}(:[0-9a-fA-F]{1,4}){1,5}|[0-9a-fA-F]{1,4}:(:[0-9a-fA-F]{1,4}){1,6}|:((:[0-9a-fA-F]{1,4}){1,7}|:))"},
};

// Formats that validators check (Python's jsonschema FormatChecker, ajv-formats) but
// that no regular language here writes exactly: refused with a 400 naming the path,
// never silently accepted as any string. Formats outside both lists are annotations
// (no validator checks them) and are ignored.
const std::set<std::string, std::less<>> kRefusedFormats = {
    "regex",        "uri-reference",         "iri-reference", "idn-email", "idn-hostname",
    "json-pointer", "relative-json-pointer", "uri-template",  "duration"};

class SchemaCompiler {
 public:
  SchemaCompiler(GrammarBuilder &b, const json &root, const JsonSchemaOptions &opts)
      : root_(root), opts_(opts), b_(b) {}

  ExprId document() { return value(root_, "", 0); }

 private:
  [[noreturn]] void fail(const std::string &path, const std::string &why) const {
    std::string where = opts_.where;
    if (!path.empty()) where += (where.empty() ? "" : ".") + path;
    if (where.empty()) where = "schema";
    throw Error(ErrorCode::kInvalidArgument, where + ": " + why);
  }
  static std::string join(const std::string &path, const std::string &key) {
    return path.empty() ? key : path + "." + key;
  }

  ExprId ws() {
    switch (opts_.whitespace) {
      case JsonWhitespace::kNone:
        return b_.empty();
      case JsonWhitespace::kStrict:
        return b_.repeat(b_.char_class({{' ', ' '}, {'\t', '\n'}, {'\r', '\r'}}), 0, -1);
      case JsonWhitespace::kBounded:
        break;
    }
    if (ws_rule_ < 0) {
      ws_rule_ = b_.add_rule("ws");
      b_.set_body(
          std::uint32_t(ws_rule_),
          b_.alt({b_.empty(), lit(" "), b_.seq({lit("\n"), b_.repeat(lit(" "), 0, kMaxIndent)})}));
    }
    return b_.call(std::uint32_t(ws_rule_));
  }
  ExprId lit(std::string_view s) { return b_.literal(s); }

  // One character inside a JSON string: unescaped or a JSON escape. A \u escape names a
  // scalar value: a surrogate half only as a high half followed by a low one (strict JSON
  // parsers, the tool-call parser's among them, refuse a lone half, which has no UTF-8).
  ExprId string_char() { return json_string_char(b_); }
  static ExprId json_string_char(GrammarBuilder &b_) {
    ExprId plain = b_.char_class({{0, 0x1F}, {'"', '"'}, {'\\', '\\'}}, true);
    ExprId hex = b_.char_class({{'0', '9'}, {'a', 'f'}, {'A', 'F'}});
    ExprId d = b_.char_class({{'d', 'd'}, {'D', 'D'}});
    ExprId not_surrogate =
        b_.alt({b_.seq({b_.char_class({{'0', '9'}, {'a', 'c'}, {'A', 'C'}, {'e', 'f'}, {'E', 'F'}}),
                        b_.repeat(hex, 3, 3)}),
                b_.seq({d, b_.char_class({{'0', '7'}}), b_.repeat(hex, 2, 2)})});
    ExprId pair = b_.seq({d, b_.char_class({{'8', '9'}, {'a', 'b'}, {'A', 'B'}}),
                          b_.repeat(hex, 2, 2), b_.literal("\\u"), d,
                          b_.char_class({{'c', 'f'}, {'C', 'F'}}), b_.repeat(hex, 2, 2)});
    ExprId esc = b_.seq(
        {b_.literal("\\"), b_.alt({b_.char_class({{'"', '"'},
                                                  {'\\', '\\'},
                                                  {'/', '/'},
                                                  {'b', 'b'},
                                                  {'f', 'f'},
                                                  {'n', 'n'},
                                                  {'r', 'r'},
                                                  {'t', 't'}}),
                                   b_.seq({b_.literal("u"), b_.alt({not_surrogate, pair})})})});
    return b_.alt({plain, esc});
  }

  ExprId number_expr() {
    ExprId digit = b_.char_class({{'0', '9'}});
    ExprId integer = b_.seq({b_.optional(lit("-")), int_digits()});
    // Bounded like whitespace, so a model that likes digits still reaches the end within
    // max_tokens: 17 fraction digits (a double's round trip), a 3-digit exponent.
    ExprId frac = b_.optional(b_.seq({lit("."), b_.repeat(digit, 1, 17)}));
    ExprId exp = b_.optional(
        b_.seq({b_.char_class({{'e', 'e'}, {'E', 'E'}}),
                b_.optional(b_.char_class({{'+', '+'}, {'-', '-'}})), b_.repeat(digit, 1, 3)}));
    return b_.seq({integer, frac, exp});
  }
  // A number with no bounds writes at most 20 integer digits (every 64-bit integer):
  // unbounded digits let a random or weak model write digits until max_tokens. Bounds of
  // any size, when given, are enforced exactly by integer_range_dec.
  ExprId int_digits() {
    return b_.alt({lit("0"), b_.seq({b_.char_class({{'1', '9'}}),
                                     b_.repeat(b_.char_class({{'0', '9'}}), 0, 19)})});
  }

  // A generic JSON value (rules, since values nest).
  ExprId any_value() {
    if (any_value_rule_ < 0) {
      any_value_rule_ = b_.add_rule("json_value");
      auto obj = b_.add_rule("json_object"), arr = b_.add_rule("json_array");
      ExprId str = string_expr(0, -1);
      ExprId v = b_.call(any_value_rule_);
      ExprId kv = b_.seq({str, ws(), lit(":"), ws(), v});
      b_.set_body(obj,
                  b_.seq({lit("{"), ws(),
                          b_.optional(b_.seq(
                              {kv, b_.repeat(b_.seq({ws(), lit(","), ws(), kv}), 0, -1), ws()})),
                          lit("}")}));
      b_.set_body(arr, b_.seq({lit("["), ws(),
                               b_.optional(b_.seq(
                                   {v, b_.repeat(b_.seq({ws(), lit(","), ws(), v}), 0, -1), ws()})),
                               lit("]")}));
      b_.set_body(any_value_rule_, b_.alt({b_.call(obj), b_.call(arr), string_expr(0, -1),
                                           number_expr(), b_.literals({"true", "false", "null"})}));
    }
    return b_.call(std::uint32_t(any_value_rule_));
  }

  // A key (quoted) that is none of `names`: a walk down the names' trie of code points
  // that leaves it, or ends at a node that is no name. Escapes always leave the trie,
  // so names needing one (quotes, backslashes, control characters) are not excluded;
  // escapes here are those Python writes (no "\/", "\u" only below U+0020) so a listed
  // name cannot be spelled another way.
  ExprId other_key(const std::vector<std::string> &names) {
    struct Node {
      std::map<char32_t, std::size_t> kids;
      bool name = false;
    };
    std::vector<Node> trie(1);
    for (const auto &n : names) {
      std::vector<char32_t> cps;
      bool plain = true;
      for (std::size_t i = 0; i < n.size();) {
        const unsigned char c = std::uint8_t(n[i]);
        const int len = c < 0x80 ? 1 : c >= 0xF0 ? 4 : c >= 0xE0 ? 3 : 2;
        char32_t cp = len == 1 ? c : c & (0x3F >> (len - 1));
        for (int k = 1; k < len && i + std::size_t(k) < n.size(); ++k)
          cp = (cp << 6) | (std::uint8_t(n[i + std::size_t(k)]) & 0x3F);
        if (cp < 0x20 || cp == '"' || cp == '\\') plain = false;
        cps.push_back(cp);
        i += std::size_t(len);
      }
      if (!plain) continue;
      std::size_t at = 0;
      for (char32_t cp : cps) {
        auto it = trie[at].kids.find(cp);
        if (it == trie[at].kids.end()) {
          trie.push_back({});
          it = trie[at].kids.emplace(cp, trie.size() - 1).first;
        }
        at = it->second;
      }
      trie[at].name = true;
    }
    ExprId hex = b_.char_class({{'0', '9'}, {'a', 'f'}, {'A', 'F'}});
    ExprId esc =
        b_.seq({lit("\\"), b_.alt({b_.char_class({{'"', '"'},
                                                  {'\\', '\\'},
                                                  {'b', 'b'},
                                                  {'f', 'f'},
                                                  {'n', 'n'},
                                                  {'r', 'r'},
                                                  {'t', 't'}}),
                                   b_.seq({lit("u00"), b_.char_class({{'0', '1'}}), hex})})});
    ExprId plain = b_.char_class({{0, 0x1F}, {'"', '"'}, {'\\', '\\'}}, true);
    // The rest of a key once it has left the trie: one rule, called from every trie
    // node, not a copy at each (hundreds of listed names would pass the node cap).
    const auto rest_rule = b_.add_rule("other key rest");
    b_.set_body(rest_rule, b_.repeat(b_.alt({plain, esc}), 0, -1));
    ExprId rest = b_.call(rest_rule);
    std::function<ExprId(std::size_t)> walk = [&](std::size_t at) -> ExprId {
      std::vector<ExprId> options;
      if (!trie[at].name) options.push_back(b_.empty());
      std::vector<GrammarBuilder::CodeRange> leave = {{0, 0x1F}, {'"', '"'}, {'\\', '\\'}};
      for (const auto &[cp, kid] : trie[at].kids) {
        std::string utf8;
        if (cp < 0x80) {
          utf8 += char(cp);
        } else if (cp < 0x800) {
          utf8 += char(0xC0 | (cp >> 6));
          utf8 += char(0x80 | (cp & 0x3F));
        } else if (cp < 0x10000) {
          utf8 += char(0xE0 | (cp >> 12));
          utf8 += char(0x80 | ((cp >> 6) & 0x3F));
          utf8 += char(0x80 | (cp & 0x3F));
        } else {
          utf8 += char(0xF0 | (cp >> 18));
          utf8 += char(0x80 | ((cp >> 12) & 0x3F));
          utf8 += char(0x80 | ((cp >> 6) & 0x3F));
          utf8 += char(0x80 | (cp & 0x3F));
        }
        options.push_back(b_.seq({lit(utf8), walk(kid)}));
        leave.push_back({cp, cp});
      }
      options.push_back(b_.seq({b_.alt({b_.char_class(leave, true), esc}), rest}));
      return b_.alt(std::move(options));
    };
    return b_.seq({lit("\""), walk(0), lit("\"")});
  }

  // A format's regex as one rule for the whole schema: each use is a call, not a copy
  // of its states (dozens of date-time fields would pass the node cap).
  ExprId format_rule(const std::string &name, const std::string &regex, const std::string &path,
                     RegexLengths *len) {
    auto it = format_rules_.find(name);
    if (it == format_rules_.end()) {
      RegexLengths l;
      ExprId body = compile_regex(b_, regex, join(path, "format"), true, &l);
      const auto rule = b_.add_rule("format " + name);
      b_.set_body(rule, body);
      it = format_rules_.emplace(name, std::make_pair(rule, l)).first;
    }
    *len = it->second.second;
    return b_.call(it->second.first);
  }

  ExprId string_expr(int min, int max) {
    return b_.seq({lit("\""), b_.repeat(string_char(), min, max), lit("\"")});
  }

  ExprId value(const json &s, const std::string &path, int depth) {
    if (depth > opts_.max_depth)
      fail(path, "nested deeper than " + std::to_string(opts_.max_depth) + " levels");
    if (s.is_boolean()) {
      if (!s.get<bool>()) fail(path, "a false schema matches nothing");
      return any_value();
    }
    if (!s.is_object()) fail(path, "a schema must be an object or a boolean");
    if (s.contains("$ref")) {
      // Keywords beside a $ref hold too (draft 2019+; and never loosen the schema): the
      // target merged with them, as allOf. A lone $ref stays a call, so recursion works.
      bool siblings = false;
      for (auto it = s.begin(); it != s.end() && !siblings; ++it)
        siblings = it.key() != "$ref" && !kIgnored.count(it.key());
      if (!siblings) return ref(s, path, depth);
      json both = resolved(s, 0);
      if (both.is_object() && both.contains("$ref"))
        fail(join(path, "$ref"),
             "beside other keywords, to a target that cannot be merged, is not supported");
      return value(both, path, depth + 1);
    }
    // anyOf / oneOf first: each branch carries the parent's other keywords, an enum or
    // const of both intersected (merged), so neither side's values are lost.
    for (const char *k : {"anyOf", "oneOf"}) {
      if (!s.contains(k)) continue;
      const json &list = s[k];
      const std::string p = join(path, k);
      if (!list.is_array() || list.empty()) fail(p, "must be a non-empty array");
      // oneOf is anyOf only where no value can match two branches: kept when the
      // branches' types are pairwise disjoint, else refused (an instance valid under two
      // branches must be rejected, which an alternation cannot do).
      if (std::string(k) == "oneOf" && list.size() > 1 && !disjoint_types(s, list))
        fail(p, "with branches that may overlap is not supported");
      std::vector<ExprId> options;
      for (std::size_t i = 0; i < list.size(); ++i) {
        json br = merged(s, list[i], k, join(p, std::to_string(i)));
        if (matches_nothing(br)) continue;  // its values contradict the parent's
        options.push_back(value(br, join(p, std::to_string(i)), depth + 1));
      }
      if (options.empty()) fail(p, "no branch can match (their enum/const values contradict)");
      return b_.alt(std::move(options));
    }
    if (s.contains("const") || s.contains("enum")) {
      // The values that every keyword here allows: const within enum, of the type.
      const bool has_const = s.contains("const");
      const std::string p = join(path, has_const ? "const" : "enum");
      if (!has_const && (!s["enum"].is_array() || s["enum"].empty()))
        fail(p, "must be a non-empty array");
      std::vector<std::string> lits;
      for (const auto &v : enum_values(s)) lits.push_back(v.dump());
      if (lits.empty())
        fail(p, has_const ? "the value has not the schema's type (or is not in its enum)"
                          : "no value has the schema's type");
      return b_.literals(lits);
    }
    if (s.contains("allOf")) {
      const json &list = s["allOf"];
      if (!list.is_array() || list.empty()) fail(join(path, "allOf"), "must be a non-empty array");
      json out = s;
      out.erase("allOf");
      for (std::size_t i = 0; i < list.size(); ++i)
        out = intersect(out, resolved(list[i], 0), join(join(path, "allOf"), std::to_string(i)));
      if (out.contains("$ref"))
        fail(join(path, "allOf"), "a $ref nested deeper than 8 references is not supported");
      return value(out, path, depth + 1);
    }
    if (s.contains("dependencies") && !(s["dependencies"].is_object() && s["dependencies"].empty()))
      fail(join(path, "dependencies"), "is not supported");
    for (const char *k : {"not", "if", "then", "else", "dependentRequired", "dependentSchemas",
                          "propertyNames", "minProperties", "maxProperties", "contains",
                          "minContains", "maxContains", "unevaluatedItems"})
      if (s.contains(k)) fail(join(path, k), "is not supported");
    if (s.contains("uniqueItems") && s["uniqueItems"] == true)
      fail(join(path, "uniqueItems"), "is not supported");
    bool nullable = s.value("nullable", false) == true;
    std::vector<std::string> types;
    if (s.contains("type")) {
      const json &t = s["type"];
      if (t.is_string()) {
        types.push_back(t.get<std::string>());
      } else if (t.is_array() && !t.empty()) {
        for (const auto &x : t) {
          if (!x.is_string()) fail(join(path, "type"), "must hold type names");
          types.push_back(x.get<std::string>());
        }
      } else {
        fail(join(path, "type"), "must be a type name or an array of them");
      }
    } else {
      // No type: infer it from the keywords, else any value.
      // Every keyword that constrains a type must infer one: falling back to any value
      // beside one (patternProperties alone, say) would accept what it forbids.
      auto any_of = [&](std::initializer_list<const char *> ks) {
        for (const char *k : ks)
          if (s.contains(k)) return true;
        return false;
      };
      if (any_of({"properties", "additionalProperties", "required", "patternProperties",
                  "propertyNames", "minProperties", "maxProperties", "dependencies",
                  "dependentRequired", "dependentSchemas"}))
        types.push_back("object");
      else if (any_of({"items", "prefixItems", "minItems", "maxItems", "uniqueItems", "contains"}))
        types.push_back("array");
      else if (any_of({"pattern", "minLength", "maxLength", "format"}))
        types.push_back("string");
      else if (any_of({"minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "multipleOf"}))
        types.push_back("number");
      else
        return any_value();  // a null is a value too
    }
    if (nullable && std::find(types.begin(), types.end(), "null") == types.end())
      types.push_back("null");
    std::vector<ExprId> options;
    for (const auto &t : types) options.push_back(typed(s, t, path, depth));
    return b_.alt(std::move(options));
  }

  // oneOf is anyOf when no value matches two branches. Each pair of branches (each
  // with the parent, whose keywords both must meet too) is shown disjoint from a
  // subset of their constraints, so a "disjoint" answer is always true; an unproven
  // pair is refused by the caller.
  bool disjoint_types(const json &parent, const json &list) const {
    json rest = parent;
    rest.erase("oneOf");
    for (std::size_t i = 0; i < list.size(); ++i)
      for (std::size_t j = i + 1; j < list.size(); ++j)
        if (!disjoint({rest, list[i]}, {rest, list[j]}, 0)) return false;
    return true;
  }

  // The JSON types a schema's values may have ("integer" counted as "number"): its
  // "type" intersected with its const/enum values' types; all seven when unsaid.
  static std::set<std::string> value_types(const json &s) {
    static const std::set<std::string> all = {"null",   "boolean", "string",
                                              "number", "object",  "array"};
    if (s.is_boolean()) return s.get<bool>() ? all : std::set<std::string>{};
    if (!s.is_object()) return all;
    std::set<std::string> out = all;
    if (s.contains("type")) {
      std::set<std::string> t;
      auto add = [&](const json &x) {
        if (!x.is_string()) return;
        const std::string n = x.get<std::string>();
        t.insert(n == "integer" ? "number" : n);
      };
      if (s["type"].is_array())
        for (const auto &x : s["type"]) add(x);
      else
        add(s["type"]);
      out = t;
    }
    if (s.contains("const") || (s.contains("enum") && s["enum"].is_array())) {
      std::set<std::string> t;
      for (const auto &v : enum_values(s)) t.insert(type_of(v));
      std::set<std::string> both;
      for (const auto &x : out)
        if (t.count(x)) both.insert(x);
      out = both;
    }
    return out;
  }
  static std::string type_of(const json &v) {
    if (v.is_null()) return "null";
    if (v.is_boolean()) return "boolean";
    if (v.is_string()) return "string";
    if (v.is_number()) return "number";
    if (v.is_object()) return "object";
    return "array";
  }

  // True only when no value can match both sides, each a conjunction of schemas
  // ($refs resolved here): no type in common; no const/enum value in common; or, as
  // objects only, a property one side requires whose schemas on the two sides are
  // disjoint (a discriminator like {"kind": {"const": "circle"}}, or a key the other
  // side's additionalProperties: false forbids). Each schema's properties and
  // additionalProperties are read together, as JSON Schema scopes them.
  bool disjoint(const std::vector<json> &a0, const std::vector<json> &b0, int depth) const {
    if (depth > 8) return false;
    std::vector<json> a, b;
    for (const auto &x : a0) a.push_back(resolved(x, 0));
    for (const auto &x : b0) b.push_back(resolved(x, 0));
    auto types = [](const std::vector<json> &side) {
      std::set<std::string> t = value_types(json(true));
      for (const auto &x : side) {
        std::set<std::string> both;
        for (const auto &y : value_types(x))
          if (t.count(y)) both.insert(y);
        t = both;
      }
      return t;
    };
    const auto ta = types(a), tb = types(b);
    std::set<std::string> common;
    for (const auto &x : ta)
      if (tb.count(x)) common.insert(x);
    if (common.empty()) return true;
    // The first const/enum on a side: a superset of the side's values.
    auto values = [](const std::vector<json> &side) -> std::optional<std::vector<json>> {
      for (const auto &x : side)
        if (x.is_object() && (x.contains("const") || (x.contains("enum") && x["enum"].is_array())))
          return enum_values(x);
      return std::nullopt;
    };
    const auto va = values(a), vb = values(b);
    if (va && vb) {
      bool shared = false;
      for (const auto &v : *va) shared |= std::find(vb->begin(), vb->end(), v) != vb->end();
      if (!shared) return true;
    }
    if (common != std::set<std::string>{"object"}) return false;
    // The schema one schema gives a key's value: its property schema, else its
    // additionalProperties (true when absent); unknown (nullopt) beside patterns.
    auto key_schema = [](const json &x, const std::string &k) -> std::optional<json> {
      if (!x.is_object()) return std::nullopt;
      if (x.contains("properties") && x["properties"].is_object() && x["properties"].contains(k))
        return x["properties"][k];
      if (x.contains("patternProperties")) return std::nullopt;
      return x.contains("additionalProperties") ? x["additionalProperties"] : json(true);
    };
    for (const auto *side : {&a, &b})
      for (const auto &x : *side) {
        if (!x.is_object() || !x.contains("required") || !x["required"].is_array()) continue;
        for (const auto &r : x["required"]) {
          if (!r.is_string()) continue;
          const std::string k = r.get<std::string>();
          for (const auto &xa : a)
            for (const auto &xb : b) {
              const auto sa = key_schema(xa, k), sb = key_schema(xb, k);
              if (sa && sb && disjoint({*sa}, {*sb}, depth + 1)) return true;
            }
        }
      }
    return false;
  }

  // The values a schema with const and/or enum allows: const (when in the enum, if any),
  // else the enum's values, each only when it has the schema's type.
  static std::vector<json> enum_values(const json &s) {
    std::vector<json> out;
    const bool has_enum = s.contains("enum") && s["enum"].is_array();
    auto in_enum = [&](const json &v) {
      return !has_enum || std::find(s["enum"].begin(), s["enum"].end(), v) != s["enum"].end();
    };
    if (s.contains("const")) {
      if (in_enum(s["const"]) && enum_value_has_type(s, s["const"])) out.push_back(s["const"]);
      return out;
    }
    if (has_enum)
      for (const auto &v : s["enum"])
        if (enum_value_has_type(s, v)) out.push_back(v);
    return out;
  }
  // A schema no value can match because its const/enum values do not survive its type
  // (a branch of anyOf whose values contradict the parent's).
  static bool matches_nothing(const json &s) {
    if (s.is_boolean()) return !s.get<bool>();
    if (!s.is_object() || s.contains("anyOf") || s.contains("oneOf") || s.contains("allOf") ||
        s.contains("$ref"))
      return false;
    if (!s.contains("const") && !(s.contains("enum") && s["enum"].is_array())) return false;
    return enum_values(s).empty();
  }

  // An enum value is valid only when it has the schema's type too (when one is given).
  static bool enum_value_has_type(const json &s, const json &v) {
    if (!s.contains("type")) return true;
    auto has = [&](const std::string &t) {
      if (t == "null") return v.is_null();
      if (t == "boolean") return v.is_boolean();
      if (t == "string") return v.is_string();
      if (t == "number") return v.is_number();
      if (t == "integer")
        return v.is_number_integer() ||
               (v.is_number_float() && v.get<double>() == std::floor(v.get<double>()));
      if (t == "object") return v.is_object();
      if (t == "array") return v.is_array();
      return false;
    };
    const json &t = s["type"];
    if (t.is_string()) return has(t.get<std::string>());
    if (t.is_array())
      for (const auto &x : t)
        if (x.is_string() && has(x.get<std::string>())) return true;
    return !t.is_string() && !t.is_array();
  }

  // `s` with a top-level $ref replaced by its target (the other keywords kept).
  json resolved(const json &s, int hops) const {
    if (!s.is_object() || !s.contains("$ref") || !s["$ref"].is_string() || hops > 8) return s;
    const std::string target = s["$ref"].get<std::string>();
    if (target.empty() || target[0] != '#') return s;
    json::json_pointer ptr;
    try {
      ptr = json::json_pointer(target.substr(1));
    } catch (const std::exception &) {
      return s;
    }
    if (!root_.contains(ptr)) return s;
    json out = resolved(root_[ptr], hops + 1);
    json rest = s;
    rest.erase("$ref");
    // A reference to `true` is the keywords beside it (a $ref kept beside them would
    // be called alone, dropping them); to `false`, nothing.
    if (out.is_boolean()) return out == true && !rest.empty() ? rest : out;
    if (!out.is_object()) return s;
    return rest.empty() ? out : intersect(out, rest, "$ref");
  }

  // One schema that both `a` and `b` describe (allOf), for the keywords where that is
  // exact: properties merged (a shared one becomes an allOf of the two), required
  // united, types intersected, bounds tightened, equal keywords kept. Anything else
  // that differs is refused; so is additionalProperties beside properties it does not
  // see (the merge would widen it).
  json intersect(const json &a, const json &b, const std::string &path) const {
    if (a == true || a.empty()) return b;
    if (b == true || b.empty()) return a;
    if (!a.is_object() || !b.is_object()) fail(path, "a false schema in allOf matches nothing");
    json out = a;
    for (auto it = b.begin(); it != b.end(); ++it) {
      const std::string &k = it.key();
      const json &v = it.value();
      if (kIgnored.count(k) && k != "$defs" && k != "definitions") continue;
      if (!out.contains(k)) {
        out[k] = v;
        continue;
      }
      json &o = out[k];
      if (o == v) continue;
      if (k == "properties" && o.is_object() && v.is_object()) {
        for (auto p = v.begin(); p != v.end(); ++p)
          o[p.key()] = o.contains(p.key()) ? json{{"allOf", json::array({o[p.key()], p.value()})}}
                                           : p.value();
      } else if (k == "required" && o.is_array() && v.is_array()) {
        for (const auto &r : v)
          if (std::find(o.begin(), o.end(), r) == o.end()) o.push_back(r);
      } else if (k == "type") {
        auto list = [](const json &t) {
          std::vector<std::string> l;
          if (t.is_string()) l.push_back(t.get<std::string>());
          if (t.is_array())
            for (const auto &x : t)
              if (x.is_string()) l.push_back(x.get<std::string>());
          return l;
        };
        json both = json::array();
        for (const auto &x : list(o))
          for (const auto &y : list(v))
            if (x == y || (x == "number" && y == "integer"))
              both.push_back(y);
            else if (x == "integer" && y == "number")
              both.push_back(x);
        if (both.empty()) fail(join(path, "type"), "allOf leaves no type");
        o = both.size() == 1 ? both[0] : both;
      } else if ((k == "minimum" || k == "minLength" || k == "minItems" ||
                  k == "exclusiveMinimum" || k == "minProperties") &&
                 o.is_number() && v.is_number()) {
        if (v.get<double>() > o.get<double>()) o = v;
      } else if ((k == "maximum" || k == "maxLength" || k == "maxItems" ||
                  k == "exclusiveMaximum" || k == "maxProperties") &&
                 o.is_number() && v.is_number()) {
        if (v.get<double>() < o.get<double>()) o = v;
      } else if (k == "$defs" || k == "definitions") {
        continue;
      } else {
        fail(join(path, k), "differs between allOf's schemas (not supported)");
      }
    }
    // additionalProperties of one side must see every property of the other.
    for (const json *x : {&a, &b}) {
      if (!x->contains("additionalProperties") || (*x)["additionalProperties"] == true) continue;
      const json &other = x == &a ? b : a;
      if (!other.contains("properties")) continue;
      for (auto p = other["properties"].begin(); p != other["properties"].end(); ++p)
        if (!x->contains("properties") || !(*x)["properties"].contains(p.key()))
          fail(join(path, "additionalProperties"),
               "beside properties from another allOf schema is not supported");
    }
    return out;
  }

  // `sub` with the parent's other keywords, both to be met (anyOf branches often omit
  // the shared type, or add to the shared properties and required): intersected as
  // allOf is, so a branch never drops a parent's constraint (a refusal where that is
  // not exact). A $ref branch beside such keywords is resolved first (a lone $ref stays
  // a call, so recursive schemas stay rules). An enum or const on both sides becomes
  // the values in both.
  json merged(const json &parent, const json &sub, const char *drop,
              const std::string &path) const {
    json rest = json::object();
    if (parent.is_object())
      for (auto it = parent.begin(); it != parent.end(); ++it)
        if (it.key() != drop && !kIgnored.count(it.key())) rest[it.key()] = it.value();
    // A `true` branch (written or reached through $ref) allows what the parent allows,
    // not any value: returning it alone would drop the parent's keywords.
    if (!sub.is_object()) return sub == true && !rest.empty() ? rest : sub;
    if (rest.empty()) return sub;
    json mine = resolved(sub, 0);
    if (!mine.is_object()) return mine == true ? rest : mine;
    const bool parent_values = rest.contains("const") || rest.contains("enum");
    const bool sub_values = mine.contains("const") || mine.contains("enum");
    json both = json::array();
    if (parent_values && sub_values) {
      auto values = [](const json &x) {
        json l = json::array();
        if (x.contains("const"))
          l.push_back(x["const"]);
        else if (x["enum"].is_array())
          l = x["enum"];
        return l;
      };
      const json theirs = values(rest);
      for (const auto &v : values(mine))
        if (std::find(theirs.begin(), theirs.end(), v) != theirs.end()) both.push_back(v);
      for (json *x : {&rest, &mine}) {
        x->erase("const");
        x->erase("enum");
      }
    }
    json out = intersect(rest, mine, path);
    if (parent_values && sub_values) out["enum"] = both;  // maybe empty: matches_nothing
    return out;
  }

  ExprId ref(const json &s, const std::string &path, int depth) {
    const json &r = s["$ref"];
    if (!r.is_string()) fail(join(path, "$ref"), "must be a string");
    std::string target = r.get<std::string>();
    auto it = refs_.find(target);
    if (it != refs_.end()) return b_.call(it->second);
    if (target.empty() || target[0] != '#')
      fail(join(path, "$ref"), "only local references (#/...) are supported: " + target);
    json::json_pointer ptr;
    try {
      ptr = json::json_pointer(target.substr(1));
    } catch (const std::exception &) {
      fail(join(path, "$ref"), "is not a JSON pointer: " + target);
    }
    if (!root_.contains(ptr)) fail(join(path, "$ref"), "points at nothing: " + target);
    auto rule = b_.add_rule("ref " + target);
    refs_[target] = rule;
    std::string ref_path = target.substr(target.size() > 1 ? 2 : 1);
    std::replace(ref_path.begin(), ref_path.end(), '/', '.');
    b_.set_body(rule, value(root_[ptr], ref_path, depth + 1));
    return b_.call(rule);
  }

  // A nested object or array becomes its own rule, so copies (array items) stay small.
  ExprId as_rule(ExprId body, const std::string &name) {
    auto r = b_.add_rule(name);
    b_.set_body(r, body);
    return b_.call(r);
  }

  static std::int64_t get_int(const json &s, const char *k, std::int64_t dflt,
                              const std::function<void(const std::string &)> &bad) {
    if (!s.contains(k)) return dflt;
    const json &v = s[k];
    if (v.is_number_integer() ||
        (v.is_number_float() && v.get<double>() == std::floor(v.get<double>())))
      return v.get<std::int64_t>();
    bad(std::string(k) + " must be an integer");
    return dflt;
  }

  ExprId typed(const json &s, const std::string &t, const std::string &path, int depth) {
    if (t == "null") return lit("null");
    if (t == "boolean") return b_.literals({"true", "false"});
    if (t == "string") return string_type(s, path);
    if (t == "integer") return integer_type(s, path);
    if (t == "number") return number_type(s, path);
    if (t == "object") return as_rule(object_type(s, path, depth), "object " + path);
    if (t == "array") return as_rule(array_type(s, path, depth), "array " + path);
    fail(join(path, "type"), "unknown type '" + t + "'");
  }

  // "^ATOM+$" / "^ATOM*$" (ATOM one character: a [class], an escape like \w, or "."),
  // maybe in one group: the atom and the quantifier.
  static std::optional<std::pair<std::string, char>> single_class_repeat(std::string p) {
    if (p.size() < 3 || p.front() != '^' || p.back() != '$' || p[p.size() - 2] == '\\')
      return std::nullopt;
    p = p.substr(1, p.size() - 2);
    if (p.size() > 2 && p.front() == '(' && p.back() == ')') p = p.substr(1, p.size() - 2);
    if (p.rfind("?:", 0) == 0) p = p.substr(2);
    if (p.size() < 2) return std::nullopt;
    std::size_t end = 0;  // one past the atom
    if (p[0] == '[') {
      std::size_t i = 1;
      if (i < p.size() && p[i] == '^') ++i;
      if (i < p.size() && p[i] == ']') ++i;
      for (; i < p.size() && p[i] != ']'; ++i)
        if (p[i] == '\\')
          ++i;
        else if (p[i] == '[')
          return std::nullopt;
      if (i >= p.size()) return std::nullopt;
      end = i + 1;
    } else if (p[0] == '\\') {
      end = 2;
    } else if (p[0] == '.') {
      end = 1;
    } else {
      return std::nullopt;
    }
    if (end + 1 != p.size() || (p[end] != '+' && p[end] != '*')) return std::nullopt;
    return std::make_pair(p.substr(0, end), p[end]);
  }

  // A quoted JSON string that `pattern` matches (anywhere, unless anchored).
  static ExprId pattern_string(GrammarBuilder &b, const std::string &p, const std::string &where,
                               bool, RegexLengths *len = nullptr) {
    const bool lead = p.empty() || p[0] != '^';
    const bool trail = p.empty() || p.back() != '$' || (p.size() > 1 && p[p.size() - 2] == '\\');
    RegexLengths l;
    ExprId body = compile_regex(b, p, where, true, &l);
    if (lead || trail) l.max = -1;
    if (len) *len = l;
    auto any = [&] { return b.repeat(json_string_char(b), 0, -1); };
    return b.seq({b.literal("\""), lead ? any() : b.empty(), body, trail ? any() : b.empty(),
                  b.literal("\"")});
  }

  ExprId string_type(const json &s, const std::string &path) {
    auto bad = [&](const std::string &why) { fail(path, why); };
    std::int64_t min = get_int(s, "minLength", 0, bad), max = get_int(s, "maxLength", -1, bad);
    if (min < 0 || min > kMaxStringLength) fail(join(path, "minLength"), "out of range");
    if (max > kMaxStringLength)
      fail(join(path, "maxLength"), "over " + std::to_string(kMaxStringLength));
    if (max >= 0 && max < min) fail(join(path, "maxLength"), "is below minLength");
    if (s.contains("pattern")) {
      if (!s["pattern"].is_string()) fail(join(path, "pattern"), "must be a string");
      // Both would have to hold: the grammar cannot intersect the two languages.
      if (s.contains("format") && s["format"].is_string() &&
          (kFormats.count(s["format"].get<std::string>()) ||
           kRefusedFormats.count(s["format"].get<std::string>())))
        fail(join(path, "format"), "beside a pattern is not supported");
      std::string p = s["pattern"].get<std::string>();
      RegexLengths len;
      ExprId quoted = pattern_string(b_, p, join(path, "pattern"), false, &len);
      // Lengths beside a pattern: kept when every match already has a length within
      // them (the grammar cannot intersect the two languages).
      // ^[class]+$ (or *, \w, ., a group around it) with lengths: the class repeated
      // between the lengths, exactly.
      if (s.contains("minLength") || s.contains("maxLength"))
        if (auto rep = single_class_repeat(p)) {
          ExprId one = compile_regex(b_, rep->first, join(path, "pattern"), true);
          const int lo = std::max<int>(int(min), rep->second == '+' ? 1 : 0);
          if (max < 0 || lo <= max)
            return b_.seq({lit("\""), b_.repeat(one, lo, int(max)), lit("\"")});
        }
      if ((s.contains("minLength") || s.contains("maxLength")) &&
          (len.min < min || (max >= 0 && (len.max < 0 || len.max > max))))
        fail(join(path, "pattern"),
             "with minLength/maxLength is supported only when every match of the pattern has "
             "a length within them (the pattern's: " +
                 std::to_string(len.min) + " to " +
                 (len.max < 0 ? std::string("unbounded") : std::to_string(len.max)) + ")");
      return quoted;
    }
    if (s.contains("format") && s["format"].is_string()) {
      const std::string f = s["format"].get<std::string>();
      if (kRefusedFormats.count(f)) fail(join(path, "format"), "'" + f + "' is not supported");
      auto it = kFormats.find(f);
      if (it != kFormats.end()) {
        RegexLengths len;
        ExprId body = format_rule(f, it->second, path, &len);
        // Lengths beside a format: kept when every string of the format has a length
        // within them (the grammar cannot intersect the two languages).
        if ((s.contains("minLength") || s.contains("maxLength")) &&
            (len.min < min || (max >= 0 && (len.max < 0 || len.max > max))))
          fail(join(path, "format"),
               "'" + f +
                   "' with minLength/maxLength is supported only when every string of the "
                   "format has a length within them");
        return b_.seq({lit("\""), body, lit("\"")});
      }
    }
    return string_expr(int(min), int(max));
  }

  // multipleOf as a power of ten: 0 for 1 (integers), n for 10^-n (n fraction digits at
  // most), nullopt when absent. Other divisors are not a language this compiler builds
  // (divisibility by 3 is regular, but not beside bounds): a 400 naming the path.
  std::optional<int> decimal_step(const json &s, const std::string &path, bool integer) {
    if (!s.contains("multipleOf")) return std::nullopt;
    const json &v = s["multipleOf"];
    if (!v.is_number() || !(v.get<double>() > 0))
      fail(join(path, "multipleOf"), "must be a positive number");
    const double d = v.get<double>();
    if (d == 1) return 0;
    if (!integer)
      for (int n = 1; n <= 15; ++n)
        if (std::abs(d * std::pow(10.0, n) - 1) < 1e-9) return n;
    fail(join(path, "multipleOf"),
         std::string("is not supported (only 1") + (integer ? "" : " and 0.1, 0.01, ...") + ")");
  }

  // A bound as a canonical decimal integer: ceil (a lower bound) or floor (an upper)
  // of its value, exact for JSON integers of any size and for every double.
  static std::string integer_bound(const json &v, bool is_min) {
    if (v.is_number_integer()) return v.dump();
    double d = v.get<double>();
    d = is_min ? std::ceil(d) : std::floor(d);
    if (d == 0) return "0";
    char buf[400];
    if (std::abs(d) < 1e15) {
      auto r = std::to_chars(buf, buf + sizeof buf, d, std::chars_format::fixed);
      std::string out(buf, r.ptr);
      if (auto dot = out.find('.'); dot != std::string::npos) out.resize(dot);
      return out;
    }
    // Past 2^53 a double is the nearest of many integers: take the decimal its shortest
    // form names (1e23, as the schema wrote it, not 99999999999999991611392).
    auto r = std::to_chars(buf, buf + sizeof buf, d, std::chars_format::scientific);
    const std::string sci(buf, r.ptr);
    const std::size_t e = sci.find('e');
    std::string out, digits;
    for (std::size_t i = 0; i < e; ++i) {
      if (sci[i] == '-')
        out += '-';
      else if (sci[i] != '.')
        digits += sci[i];
    }
    const int exp = std::stoi(sci.substr(e + 1));  // >= 15 here
    digits.resize(std::max(digits.size(), std::size_t(exp) + 1), '0');
    return out + digits;
  }

  ExprId integer_type(const json &s, const std::string &path) {
    decimal_step(s, path, true);
    std::optional<std::string> lo, hi;
    auto bound = [&](const char *k, bool exclusive, bool is_min) {
      if (!s.contains(k)) return;
      const json &v = s[k];
      if (v.is_boolean()) return;  // draft-4 style exclusive flags
      if (!v.is_number()) fail(join(path, k), "must be a number");
      if (v.is_number_float() && !std::isfinite(v.get<double>()))
        fail(join(path, k), "must be finite");
      std::string x = integer_bound(v, is_min);
      const bool integral = v.is_number_integer() || v.get<double>() == std::floor(v.get<double>());
      if (exclusive && integral) x = add_one_decimal(x, is_min ? 1 : -1);
      auto &slot = is_min ? lo : hi;
      if (!slot || (is_min ? compare_decimal(x, *slot) > 0 : compare_decimal(x, *slot) < 0))
        slot = x;
    };
    bound("minimum", s.value("exclusiveMinimum", json()) == true, true);
    bound("maximum", s.value("exclusiveMaximum", json()) == true, false);
    bound("exclusiveMinimum", true, true);
    bound("exclusiveMaximum", true, false);
    if (lo && hi && compare_decimal(*lo, *hi) > 0)
      fail(join(path, "maximum"), "leaves no integer above the minimum");
    if (!lo && !hi) return b_.seq({b_.optional(lit("-")), int_digits()});
    return integer_range_dec(b_, lo, hi);
  }

  ExprId number_type(const json &s, const std::string &path) {
    const std::optional<int> step = decimal_step(s, path, false);
    if (step == 0) return integer_type(s, path);  // multipleOf 1: an integer
    std::optional<NumberBound> lo, hi;
    auto bound = [&](const char *k, bool exclusive, bool is_min) {
      if (!s.contains(k) || s[k].is_boolean()) return;  // draft-4 exclusive flags: below
      if (!s[k].is_number()) fail(join(path, k), "must be a number");
      const double d = s[k].get<double>();
      if (!(std::abs(d) <= 1e15))
        fail(join(path, k), "is out of the supported range (|x| <= 1e15)");
      auto &slot = is_min ? lo : hi;
      // The tighter of minimum and exclusiveMinimum (maximum and exclusiveMaximum).
      if (!slot || (is_min ? d > slot->value : d < slot->value) || (d == slot->value && exclusive))
        slot = NumberBound{d, exclusive};
    };
    bound("minimum", s.value("exclusiveMinimum", json()) == true, true);
    bound("maximum", s.value("exclusiveMaximum", json()) == true, false);
    bound("exclusiveMinimum", true, true);
    bound("exclusiveMaximum", true, false);
    if (lo && hi &&
        (lo->value > hi->value || (lo->value == hi->value && (lo->exclusive || hi->exclusive))))
      fail(join(path, "maximum"), "leaves no number above the minimum");
    if (step) {
      // n fraction digits at most; with bounds the digit languages would need intersecting.
      if (lo || hi)
        fail(join(path, "multipleOf"), "together with minimum/maximum is not supported");
      ExprId digit = b_.char_class({{'0', '9'}});
      return b_.seq({b_.optional(lit("-")), int_digits(),
                     b_.optional(b_.seq({lit("."), b_.repeat(digit, 1, *step)}))});
    }
    if (!lo && !hi) return number_expr();
    auto range = number_range(b_, lo, hi);
    if (!range)
      fail(join(path, lo ? "minimum" : "maximum"),
           "these bounds are not supported (more than 15 fraction digits, beyond 1e15, or both "
           "within one integer with a fractional or exclusive lower bound)");
    return *range;
  }

  ExprId kv(const std::string &key, ExprId v) {
    return b_.seq({lit(json(key).dump()), ws(), lit(":"), ws(), v});
  }

  // `name` (a key's text) matches `pattern`, searched for as JSON Schema does (a
  // pattern without ^ or $ may match anywhere).
  bool key_matches(const std::string &pattern, const std::string &name, const std::string &where) {
    GrammarBuilder tb;
    auto root = tb.add_rule("key");
    tb.set_body(root, pattern_string(tb, pattern, where, false));
    auto g = std::make_shared<const CompiledGrammar>(tb.build(root), nullptr);
    GrammarMatcher m(g);
    return m.accept_bytes(json(name).dump()) && m.is_complete();
  }

  ExprId object_type(const json &s, const std::string &path, int depth) {
    const json empty = json::object();
    if (s.contains("properties") && !s["properties"].is_object())
      fail(join(path, "properties"), "must be an object");
    json props = s.contains("properties") ? s["properties"] : empty;
    const std::string ap = join(path, "additionalProperties");
    if (s.contains("additionalProperties") && !s["additionalProperties"].is_boolean() &&
        !s["additionalProperties"].is_object())
      fail(ap, "must be a boolean or a schema");
    const json ap_schema =
        s.contains("additionalProperties") ? s["additionalProperties"] : json(true);
    // patternProperties: keys matching a pattern take its schema. Kept when exact: one
    // pattern (or several with one schema) that no listed name matches; keys matching no
    // pattern are then not generated (the grammar cannot take a regex's complement).
    std::vector<std::string> patterns;
    std::optional<json> pattern_schema;
    const std::string pp = join(path, "patternProperties");
    if (s.contains("patternProperties")) {
      const json &p = s["patternProperties"];
      if (!p.is_object()) fail(pp, "must be an object");
      for (auto it = p.begin(); it != p.end(); ++it) {
        if (pattern_schema && *pattern_schema != it.value())
          fail(pp, "several patterns with different schemas are not supported");
        pattern_schema = it.value();
        patterns.push_back(it.key());
      }
    }
    auto pattern_of = [&](const std::string &name) -> std::optional<std::string> {
      for (const auto &p : patterns)
        if (key_matches(p, name, join(pp, p))) return p;
      return std::nullopt;
    };
    for (auto it = props.begin(); it != props.end(); ++it)
      if (auto p = pattern_of(it.key()))
        fail(join(pp, *p), "matches the listed property '" + it.key() + "' (not supported)");
    std::set<std::string> required;
    if (s.contains("required")) {
      if (!s["required"].is_array()) fail(join(path, "required"), "must be an array");
      for (const auto &r : s["required"]) {
        if (!r.is_string()) fail(join(path, "required"), "must hold property names");
        const std::string name = r.get<std::string>();
        required.insert(name);
        if (props.contains(name)) continue;
        // A required key not listed: its value is what the pattern or
        // additionalProperties says.
        if (pattern_of(name)) {
          props[name] = *pattern_schema;
        } else {
          if (ap_schema == false)
            fail(join(path, "required"),
                 "names '" + name + "', which additionalProperties: false forbids");
          props[name] = ap_schema;
        }
      }
    }
    // Extra keys: what additionalProperties allows (any value when absent, unless only
    // declared properties are wanted), never a listed name; or the pattern keys.
    std::optional<ExprId> extra;
    std::vector<std::string> names;
    for (auto it = props.begin(); it != props.end(); ++it) names.push_back(it.key());
    if (!patterns.empty()) {
      std::vector<ExprId> keys;
      for (const auto &p : patterns) keys.push_back(pattern_string(b_, p, join(pp, p), false));
      extra = b_.seq({b_.alt(std::move(keys)), ws(), lit(":"), ws(),
                      value(*pattern_schema, join(pp, patterns[0]), depth + 1)});
    } else if (s.contains("additionalProperties")) {
      if (ap_schema != false)
        extra = b_.seq({other_key(names), ws(), lit(":"), ws(), value(ap_schema, ap, depth + 1)});
    } else if (names.empty() || !opts_.declared_properties_only) {
      extra = b_.seq({other_key(names), ws(), lit(":"), ws(), any_value()});
    }
    std::vector<std::pair<ExprId, bool>> items;  // (key: value, required)
    for (auto it = props.begin(); it != props.end(); ++it)
      items.push_back(
          {kv(it.key(), value(it.value(), join(join(path, "properties"), it.key()), depth + 1)),
           required.count(it.key()) > 0});
    if (extra) items.push_back({*extra, false});
    bool all_required = true;
    for (auto &i : items) all_required &= i.second;
    ExprId body;
    if (all_required) {
      std::vector<ExprId> parts;
      for (std::size_t i = 0; i < items.size(); ++i) {
        if (i) parts.insert(parts.end(), {ws(), lit(","), ws()});
        parts.push_back(items[i].first);
      }
      body = parts.empty() ? b_.empty() : b_.seq(std::move(parts));
    } else {
      // Each member is read from two rules (after a comma or first): one rule each, so
      // its states are not built twice.
      for (auto &i : items) i.first = as_rule(i.first, "member " + path);
      body = members(items, 0, false, extra.has_value(), path);
    }
    return b_.seq({lit("{"), ws(), body, ws(), lit("}")});
  }

  // Members i.. of an object, some optional, each but the first after a comma; the
  // last may repeat (additional properties). Each (i, comma) is a rule, so that k
  // optional members cost O(k) rules, not 2^k copies.
  ExprId members(const std::vector<std::pair<ExprId, bool>> &items, std::size_t i, bool comma,
                 bool last_repeats, const std::string &path) {
    if (i == items.size()) return b_.empty();
    auto key = std::make_tuple(path, i, comma);
    if (auto it = member_rules_.find(key); it != member_rules_.end()) return b_.call(it->second);
    auto rule = b_.add_rule("members " + path + " " + std::to_string(i));
    member_rules_[key] = rule;
    const bool repeats = last_repeats && i + 1 == items.size();
    ExprId sep = comma ? b_.seq({ws(), lit(","), ws()}) : b_.empty();
    ExprId next = members(items, repeats ? i : i + 1, true, last_repeats, path);
    ExprId take = b_.seq({sep, items[i].first, next});
    ExprId body = take;
    if (repeats)
      body = b_.alt({take, b_.empty()});
    else if (!items[i].second)
      body = b_.alt({take, members(items, i + 1, comma, last_repeats, path)});
    b_.set_body(rule, body);
    return b_.call(rule);
  }

  ExprId array_type(const json &s, const std::string &path, int depth) {
    auto bad = [&](const std::string &why) { fail(path, why); };
    std::int64_t min = get_int(s, "minItems", 0, bad), max = get_int(s, "maxItems", -1, bad);
    if (min < 0 || min > kMaxItems) fail(join(path, "minItems"), "out of range");
    if (max > kMaxItems) fail(join(path, "maxItems"), "over " + std::to_string(kMaxItems));
    if (max >= 0 && max < min) fail(join(path, "maxItems"), "is below minItems");
    std::vector<ExprId> prefix;
    if (s.contains("prefixItems")) {
      const json &p = s["prefixItems"];
      if (!p.is_array()) fail(join(path, "prefixItems"), "must be an array");
      for (std::size_t i = 0; i < p.size(); ++i)
        prefix.push_back(
            value(p[i], join(join(path, "prefixItems"), std::to_string(i)), depth + 1));
    }
    // Further elements after the prefix: items' schema; when items is absent, any
    // values without a prefix and none after one (JSON Schema would allow any).
    std::optional<ExprId> item;
    if (!s.contains("items") || s["items"] == true) {
      if (prefix.empty()) item = any_value();
    } else if (s["items"] != false) {
      if (s["items"].is_array())
        fail(join(path, "items"), "an array of items is not supported (use prefixItems)");
      item = value(s["items"], join(path, "items"), depth + 1);
    }
    const std::int64_t k0 = std::int64_t(prefix.size());
    if (!item) {
      if (min > k0) fail(join(path, "minItems"), "is more than the items allowed");
      max = max < 0 ? k0 : std::min(max, k0);
    }
    if (max >= 0 && max < k0) prefix.resize(std::size_t(max));
    const std::int64_t n_prefix = std::int64_t(prefix.size());
    if (item && (min > 8 || max > 8)) *item = as_rule(*item, "item " + path);  // many copies
    ExprId sep = b_.seq({ws(), lit(","), ws()});
    auto count = [](std::int64_t x) { return int(std::max<std::int64_t>(0, x)); };
    if (n_prefix == 0) {
      if (max == 0) return b_.seq({lit("["), ws(), lit("]")});
      ExprId rest = b_.repeat(b_.seq({sep, *item}), count(min - 1), max < 0 ? -1 : count(max - 1));
      ExprId some = b_.seq({*item, rest});
      return b_.seq({lit("["), ws(), min > 0 ? some : b_.optional(some), ws(), lit("]")});
    }
    // After the prefix, further items; prefix element j is optional once j >= min.
    ExprId acc = item ? b_.repeat(b_.seq({sep, *item}), count(min - n_prefix),
                                  max < 0 ? -1 : count(max - n_prefix))
                      : b_.empty();
    for (std::int64_t j = n_prefix - 1; j >= 0; --j) {
      ExprId elem = j == 0 ? prefix[0] : b_.seq({sep, prefix[std::size_t(j)]});
      ExprId with = b_.seq({elem, acc});
      acc = j >= min ? b_.optional(with) : with;
    }
    return b_.seq({lit("["), ws(), acc, ws(), lit("]")});
  }

  const json &root_;
  const JsonSchemaOptions &opts_;
  GrammarBuilder &b_;
  int any_value_rule_ = -1;
  std::map<std::string, std::pair<std::uint32_t, RegexLengths>> format_rules_;
  int ws_rule_ = -1;
  std::map<std::string, std::uint32_t> refs_;
  std::map<std::tuple<std::string, std::size_t, bool>, std::uint32_t> member_rules_;
};

}  // namespace

GrammarBuilder::ExprId json_schema_expr(GrammarBuilder &b, const nlohmann::ordered_json &schema,
                                        const JsonSchemaOptions &opts) {
  JsonSchemaOptions o = opts;
  if (schema.is_object() && schema.contains("x-keel-whitespace")) {
    const auto &w = schema["x-keel-whitespace"];
    if (w == "bounded")
      o.whitespace = JsonWhitespace::kBounded;
    else if (w == "strict")
      o.whitespace = JsonWhitespace::kStrict;
    else if (w == "none")
      o.whitespace = JsonWhitespace::kNone;
    else
      throw Error(ErrorCode::kInvalidArgument,
                  (opts.where.empty() ? std::string("schema") : opts.where) +
                      ".x-keel-whitespace: must be \"bounded\", \"strict\" or \"none\"");
  }
  return SchemaCompiler(b, schema, o).document();
}

Grammar json_schema_grammar(const nlohmann::ordered_json &schema, const JsonSchemaOptions &opts) {
  GrammarBuilder b;
  auto root = b.add_rule("root");
  b.set_body(root, json_schema_expr(b, schema, opts));
  return b.build(root);
}

Grammar json_schema_grammar(std::string_view text, const JsonSchemaOptions &opts) {
  json schema;
  try {
    schema = json::parse(text);
  } catch (const json::parse_error &e) {
    throw Error(ErrorCode::kInvalidArgument,
                (opts.where.empty() ? std::string("schema") : opts.where) +
                    ": not valid JSON: " + e.what());
  }
  return json_schema_grammar(schema, opts);
}

}  // namespace keel::grammar
