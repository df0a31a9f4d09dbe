#include "grammar/tagged_json.h"

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "grammar/json_schema.h"

namespace keel::grammar {

using json = nlohmann::ordered_json;

std::string tagged_json_text(const TaggedJson &t) {
  json options = json::array();
  for (const auto &o : t.options)
    options.push_back({{"head", o.head}, {"schema", o.schema}, {"tail", o.tail}});
  return json{{"begin", t.begin}, {"options", std::move(options)}, {"end", t.end}}.dump();
}

TaggedJson parse_tagged_json(std::string_view text, const std::string &where) {
  const std::string at = where.empty() ? "tagged_json" : where;
  auto bad = [&](const std::string &path, const std::string &why) -> Error {
    return Error(ErrorCode::kInvalidArgument, at + path + ": " + why);
  };
  json j = json::parse(text, nullptr, false);
  if (!j.is_object()) throw bad("", "must be a JSON object {begin, options, end}");
  auto str = [&](const json &o, const char *key, const std::string &path) {
    auto it = o.find(key);
    if (it == o.end() || it->is_null()) return std::string();
    if (!it->is_string()) throw bad(path + "." + key, "must be a string");
    return it->get<std::string>();
  };
  TaggedJson t;
  t.begin = str(j, "begin", "");
  t.end = str(j, "end", "");
  auto options = j.find("options");
  if (options == j.end() || !options->is_array() || options->empty())
    throw bad(".options", "must be a non-empty array");
  for (std::size_t i = 0; i < options->size(); ++i) {
    const json &o = (*options)[i];
    const std::string path = ".options." + std::to_string(i);
    if (!o.is_object()) throw bad(path, "must be an object {head, schema, tail}");
    auto schema = o.find("schema");
    if (schema == o.end()) throw bad(path + ".schema", "is required");
    t.options.push_back({str(o, "head", path), *schema, str(o, "tail", path)});
  }
  return t;
}

Grammar tagged_json_grammar(const TaggedJson &t, const std::string &where) {
  const std::string at = where.empty() ? "tagged_json" : where;
  if (t.options.empty())
    throw Error(ErrorCode::kInvalidArgument, at + ".options: must be a non-empty array");
  GrammarBuilder b;
  auto root = b.add_rule("root");
  std::vector<GrammarBuilder::ExprId> options;
  for (std::size_t i = 0; i < t.options.size(); ++i) {
    const auto &o = t.options[i];
    JsonSchemaOptions opts;
    opts.where = at + ".options." + std::to_string(i) + ".schema";
    opts.declared_properties_only = true;  // a tool takes the parameters it declares
    options.push_back(
        b.seq({b.literal(o.head), json_schema_expr(b, o.schema, opts), b.literal(o.tail)}));
  }
  b.set_body(root, b.seq({b.literal(t.begin), b.alt(std::move(options)), b.literal(t.end)}));
  return b.build(root);
}

}  // namespace keel::grammar
