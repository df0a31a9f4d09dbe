#include "server/openai/openai_structured.h"

#include "core/error.h"
#include "grammar/constraint.h"
#include "server/json_fields.h"

namespace keel::server::openai {

namespace {

using json = nlohmann::ordered_json;
using grammar::ConstraintKind;

void set_checked(SamplingParams &s, ConstraintKind kind, std::string text,
                 const std::string &field) {
  check_constraint({kind, text}, field);
  s.constraint_kind = grammar::constraint_kind_name(kind);
  s.constraint_text = std::move(text);
}

}  // namespace

void check_constraint(const grammar::Constraint &c, const std::string &field) {
  try {
    grammar::compile_grammar(c, field);
  } catch (const Error &e) {
    std::string msg = e.what();
    auto colon = msg.find(": ");
    if (colon != std::string::npos && msg.rfind(field, 0) == 0)
      fail_field(msg.substr(0, colon), msg.substr(colon + 2));
    fail_field(field, msg);
  }
}

void set_json_schema_constraint(SamplingParams &s, const json &schema, const std::string &field) {
  if (schema.is_null()) return set_checked(s, ConstraintKind::kJsonObject, "", field);
  if (!schema.is_object() && !schema.is_boolean())
    fail_field(field, "must be a JSON Schema object");
  set_checked(s, ConstraintKind::kJsonSchema, schema.dump(), field);
}

void parse_structured_output(const json &body, SamplingParams &s, bool allow_response_format) {
  auto rf = body.find("response_format");
  if (allow_response_format && rf != body.end() && !rf->is_null()) {
    if (!rf->is_object() || !rf->contains("type") || !(*rf)["type"].is_string())
      fail_field("response_format", "must be an object with a type");
    const std::string type = (*rf)["type"];
    if (type == "json_object") {
      set_checked(s, ConstraintKind::kJsonObject, "", "response_format");
    } else if (type == "json_schema") {
      auto js = rf->find("json_schema");
      if (js == rf->end() || !js->is_object())
        fail_field("response_format.json_schema", "is required and must be an object");
      auto schema = js->find("schema");
      if (schema == js->end() || schema->is_null())
        set_checked(s, ConstraintKind::kJsonObject, "", "response_format.json_schema");
      else
        set_json_schema_constraint(s, *schema, "response_format.json_schema.schema");
    } else if (type != "text") {
      fail_field("response_format.type",
                 "must be one of text, json_object, json_schema (got '" + type + "')");
    }
  }
  auto so = body.find("structured_outputs");
  if (so == body.end() || so->is_null()) return;
  if (!so->is_object()) fail_field("structured_outputs", "must be an object");
  if (!s.constraint_kind.empty())
    fail_field("structured_outputs", "cannot be combined with response_format");
  int given = 0;
  for (const char *k : {"json", "regex", "choice", "grammar"}) given += so->contains(k);
  if (given != 1)
    fail_field("structured_outputs", "must hold exactly one of json, regex, choice, grammar");
  if (auto j = so->find("json"); j != so->end()) {
    if (j->is_string())
      set_checked(s, ConstraintKind::kJsonSchema, j->get<std::string>(), "structured_outputs.json");
    else if (j->is_object() || j->is_boolean())
      set_checked(s, ConstraintKind::kJsonSchema, j->dump(), "structured_outputs.json");
    else
      fail_field("structured_outputs.json", "must be a JSON Schema (object or string)");
  } else if (auto r = so->find("regex"); r != so->end()) {
    if (!r->is_string()) fail_field("structured_outputs.regex", "must be a string");
    set_checked(s, ConstraintKind::kRegex, r->get<std::string>(), "structured_outputs.regex");
  } else if (auto c = so->find("choice"); c != so->end()) {
    if (!c->is_array()) fail_field("structured_outputs.choice", "must be an array of strings");
    set_checked(s, ConstraintKind::kChoice, c->dump(), "structured_outputs.choice");
  } else if (auto g = so->find("grammar"); g != so->end()) {
    if (!g->is_string()) fail_field("structured_outputs.grammar", "must be a string (GBNF)");
    set_checked(s, ConstraintKind::kGrammar, g->get<std::string>(), "structured_outputs.grammar");
  }
}

}  // namespace keel::server::openai
