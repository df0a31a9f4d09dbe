#include "server/forced_tool_call.h"

#include "grammar/tagged_json.h"

namespace keel::server {

using json = nlohmann::ordered_json;

json forced_tool_parameters(const json &function) {
  auto p = function.find("parameters");
  if (p == function.end() || p->is_null()) return json{{"type", "object"}};
  return *p;
}

grammar::Constraint forced_tool_call_constraint(ToolCallFormat format, const json &tools,
                                                const std::string &only_name) {
  // The markup of one call as text/tool_prompt.cpp writes it in prompts, so that the
  // parser reads it back: Hermes tags, Mistral's [TOOL_CALLS] list, Llama 3's bare JSON.
  grammar::TaggedJson t;
  std::string args_key = "arguments";
  switch (format) {
    case ToolCallFormat::kLlama3Json:
      args_key = "parameters";
      break;
    case ToolCallFormat::kMistral:
      t.begin = "[TOOL_CALLS][";
      t.end = "]";
      break;
    case ToolCallFormat::kNone:
    case ToolCallFormat::kHermes:
      t.begin = "<tool_call>\n";
      t.end = "\n</tool_call>";
      break;
    case ToolCallFormat::kHarmony:
      break;
  }
  for (const auto &tool : tools) {
    const json &fn = tool.at("function");
    const std::string name = fn.at("name").get<std::string>();
    if (!only_name.empty() && name != only_name) continue;
    if (format == ToolCallFormat::kHarmony) {
      // One commentary message to the function, its JSON body constrained. The grammar
      // writes the markup with harmony's special tokens or ordinary ones
      // (grammar/token_vocab.cpp); the streamed text, and so the parser, is the same.
      // The message ends with <|call|>, one of the model's end tokens, which a complete
      // document allows.
      t.options.push_back(
          {"<|channel|>commentary to=functions." + name + " <|constrain|>json<|message|>",
           forced_tool_parameters(fn), ""});
      continue;
    }
    t.options.push_back({"{\"name\": " + json(name).dump() + ", \"" + args_key + "\": ",
                         forced_tool_parameters(fn), "}"});
  }
  return {grammar::ConstraintKind::kTaggedJson, grammar::tagged_json_text(t)};
}

void force_tool_call(SamplingParams &s, ToolCallFormat format, const json &tools,
                     const std::string &only_name) {
  auto c = forced_tool_call_constraint(format, tools, only_name);
  s.constraint_kind = grammar::constraint_kind_name(c.kind);
  s.constraint_text = std::move(c.text);
}

}  // namespace keel::server
