// OpenAI function tools: request validation (tools, tool_choice, assistant tool_calls)
// and the model format used to parse calls out of generated text.
#include <algorithm>
#include <cctype>

#include "server/chat_prompt.h"
#include "server/forced_tool_call.h"
#include "server/json_fields.h"
#include "server/openai/openai_structured.h"
#include "server/openai/openai_types.h"

namespace keel::server::openai {

using json = nlohmann::ordered_json;

namespace {

bool valid_function_name(const std::string &s) {
  if (s.empty() || s.size() > 64) return false;
  for (unsigned char c : s)
    if (!std::isalnum(c) && c != '_' && c != '-' && c != '.') return false;
  return true;
}

const json &require_object(const json &parent, const char *key, const std::string &field) {
  auto it = parent.find(key);
  if (it == parent.end() || !it->is_object()) fail_field(field, "must be an object");
  return *it;
}

}  // namespace

ToolCallFormat tool_call_format(const RenderContext &ctx) {
  return ctx.text ? tool_call_format_of(*ctx.text) : ToolCallFormat::kHermes;
}

std::string tool_call_id(const RenderContext &ctx, int choice, int k) {
  const auto dash = ctx.id.find('-');
  std::string id = "call_" + (dash == std::string::npos ? ctx.id : ctx.id.substr(dash + 1));
  if (choice) id += "c" + std::to_string(choice);
  return id + "t" + std::to_string(k);
}

void parse_tools(const json &body, ChatRequest &req) {
  auto tools = body.find("tools");
  if (tools != body.end() && !tools->is_null()) {
    if (!tools->is_array()) fail_field("tools", "must be an array");
    if (tools->size() > 512) fail_field("tools", "at most 512 tools");
    for (std::size_t i = 0; i < tools->size(); ++i) {
      const json &t = (*tools)[i];
      const std::string f = "tools[" + std::to_string(i) + "]";
      if (!t.is_object()) fail_field(f, "must be an object");
      auto type = t.find("type");
      if (type == t.end() || !type->is_string()) fail_field(f + ".type", "is required");
      if (*type != "function")
        fail_field(f + ".type",
                   "'" + type->get<std::string>() + "' tools are not supported (only 'function')");
      const json &fn = require_object(t, "function", f + ".function");
      auto name = fn.find("name");
      if (name == fn.end() || !name->is_string() || !valid_function_name(name->get<std::string>()))
        fail_field(f + ".function.name",
                   "is required: 1 to 64 letters, digits, underscores, dashes or dots");
      if (fn.contains("description") && !fn["description"].is_string() &&
          !fn["description"].is_null())
        fail_field(f + ".function.description", "must be a string");
      if (fn.contains("parameters") && !fn["parameters"].is_object() && !fn["parameters"].is_null())
        fail_field(f + ".function.parameters", "must be a JSON Schema object");
      if (fn.contains("strict") && !fn["strict"].is_boolean() && !fn["strict"].is_null())
        fail_field(f + ".function.strict", "must be a boolean");
      req.tool_names.push_back(name->get<std::string>());
    }
    req.tools = *tools;
  }
  opt_bool(body, "parallel_tool_calls");  // a hint: keel takes every call the model writes
  auto tc = body.find("tool_choice");
  if (tc == body.end() || tc->is_null()) return;
  if (tc->is_string()) {
    const std::string v = tc->get<std::string>();
    if (v != "none" && v != "auto" && v != "required")
      fail_field("tool_choice", "must be 'none', 'auto', 'required' or a function object");
    req.tool_choice = v;
  } else if (tc->is_object()) {
    auto type = tc->find("type");
    if (type == tc->end() || *type != "function")
      fail_field("tool_choice.type", "must be 'function'");
    const json &fn = require_object(*tc, "function", "tool_choice.function");
    auto name = fn.find("name");
    if (name == fn.end() || !name->is_string())
      fail_field("tool_choice.function.name", "is required");
    const std::string n = name->get<std::string>();
    if (std::find(req.tool_names.begin(), req.tool_names.end(), n) == req.tool_names.end())
      fail_field("tool_choice.function.name", "'" + n + "' is not one of the request's tools");
    req.tool_choice = "function";
    req.tool_choice_name = n;
  } else {
    fail_field("tool_choice", "must be a string or an object");
  }
  if (req.tool_names.empty() && req.tool_choice != "none")
    fail_field("tool_choice", "is only allowed when tools are given");
  if (!req.forces_tool_call()) return;
  // A forced call is constrained to the allowed tools' parameters: a schema the grammar
  // engine refuses is the client's error, named where it wrote it.
  for (std::size_t i = 0; i < req.tools.size(); ++i) {
    const json &fn = req.tools[i]["function"];
    if (req.tool_choice == "function" && fn["name"] != req.tool_choice_name) continue;
    check_constraint({grammar::ConstraintKind::kJsonSchema, forced_tool_parameters(fn).dump()},
                     "tools[" + std::to_string(i) + "].function.parameters");
  }
}

json template_tool_calls(const json &calls, const std::string &field) {
  if (!calls.is_array()) fail_field(field, "must be an array");
  json out = json::array();
  for (std::size_t i = 0; i < calls.size(); ++i) {
    const json &c = calls[i];
    const std::string f = field + "[" + std::to_string(i) + "]";
    if (!c.is_object()) fail_field(f, "must be an object");
    if (c.contains("id") && !c["id"].is_string()) fail_field(f + ".id", "must be a string");
    if (c.contains("type") && c["type"] != "function")
      fail_field(f + ".type", "must be 'function'");
    const json &fn = require_object(c, "function", f + ".function");
    auto name = fn.find("name");
    if (name == fn.end() || !name->is_string())
      fail_field(f + ".function.name", "is required and must be a string");
    json args = json::object();
    auto a = fn.find("arguments");
    if (a != fn.end() && !a->is_null()) {
      if (a->is_string()) {
        // Templates print arguments with tojson: pass the object, as vLLM does; text
        // that is not a JSON object stays a string.
        const std::string &s = a->get_ref<const std::string &>();
        bool deep = false;
        const bool whole = !s.empty() && s.find_first_not_of(" \t\r\n") != std::string::npos &&
                           s[s.find_first_not_of(" \t\r\n")] == '{';
        json parsed;
        if (whole) {
          const std::string_view v = std::string_view(s).substr(s.find_first_not_of(" \t\r\n"));
          if (json_value_end(v, 64, &deep) != std::string_view::npos && !deep)
            parsed = parse_bounded_json<json>(s, request_json_limits()).value_or(json());
        }
        args = parsed.is_object() ? parsed : *a;
      } else if (a->is_object()) {
        args = *a;
      } else {
        fail_field(f + ".function.arguments", "must be a string holding a JSON object");
      }
    }
    json call = c;
    call["type"] = "function";
    call["function"] = {{"name", *name}, {"arguments", args}};
    out.push_back(std::move(call));
  }
  return out;
}

}  // namespace keel::server::openai
