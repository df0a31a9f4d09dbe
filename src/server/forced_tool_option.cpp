#include "server/forced_tool_option.h"

#include <memory>

#include "core/error.h"
#include "grammar/compiled_grammar.h"
#include "grammar/json_schema.h"
#include "grammar/matcher.h"
#include "server/forced_tool_call.h"
#include "server/json_fields.h"

namespace keel::server {

using json = nlohmann::ordered_json;

ForcedToolOption parse_forced_tool_option(const std::string &spec) {
  auto bad = [&spec](const std::string &why) {
    throw Error(ErrorCode::kInvalidArgument, "--force-tool-call: '" + spec + "': " + why);
  };
  ForcedToolOption o;
  // Tool names have no '=', so the first one starts the JSON.
  const auto eq = spec.find('=');
  const std::string target = spec.substr(0, eq);
  const auto colon = target.rfind(':');
  if (colon == std::string::npos || colon == 0 || colon + 1 == target.size())
    bad("must be MODEL:TOOL or MODEL:TOOL=JSON");
  o.model = target.substr(0, colon);
  o.tool = target.substr(colon + 1);
  if (eq != std::string::npos) {
    json args = json::parse(spec.substr(eq + 1), nullptr, false);
    if (!args.is_object()) bad("the arguments must be a JSON object");
    o.arguments = std::move(args);
  }
  return o;
}

namespace {

// The messages after the last assistant turn include a tool result.
bool last_turn_has_tool_result(const json &messages) {
  if (!messages.is_array()) return false;
  for (auto m = messages.rbegin(); m != messages.rend(); ++m) {
    const std::string role = m->value("role", std::string());
    if (role == "assistant") return false;
    if (role == "tool") return true;
  }
  return false;
}

bool schema_admits(const json &schema, const json &doc) {
  auto g = std::make_shared<const grammar::CompiledGrammar>(grammar::json_schema_grammar(schema),
                                                            nullptr);
  grammar::GrammarMatcher m(g);
  return m.accept_bytes(doc.dump()) && m.is_complete();
}

}  // namespace

bool apply_forced_tool_option(const ForcedToolOption &o, const std::string &model,
                              SamplingParams &s, ToolCallFormat format, const json &tools,
                              const json &messages) {
  if (model != o.model || !s.constraint_kind.empty() || !tools.is_array() ||
      last_turn_has_tool_result(messages))
    return false;
  for (const auto &tool : tools) {
    const json &fn = tool.at("function");
    if (fn.value("name", std::string()) != o.tool) continue;
    if (!o.arguments) {
      force_tool_call(s, format, json::array({tool}), o.tool);
      return true;
    }
    if (!schema_admits(forced_tool_parameters(fn), *o.arguments))
      fail_field("tools",
                 "--force-tool-call's arguments do not match the parameters of '" + o.tool + "'");
    // The fixed arguments as the one document the grammar admits.
    json fixed = tool;
    fixed["function"]["parameters"] = json{{"const", *o.arguments}};
    force_tool_call(s, format, json::array({fixed}), o.tool);
    return true;
  }
  return false;
}

}  // namespace keel::server
