// Tools written into the prompt for chat templates that have no tools section (or
// models with no template at all), in the form the model family was trained on, so a
// request's tools are never dropped without a word:
//   kHermes (also the fallback)  a "# Tools" block with <tools></tools> JSON schemas in
//                                the system prompt (Hermes 2/3, Qwen2.5/3); earlier calls
//                                as <tool_call> blocks, results as <tool_response> blocks
//   kLlama3Json                  the schemas in the system prompt with the instruction
//                                to answer {"name", "parameters"} JSON (Llama 3.1+)
//   kMistral                     [AVAILABLE_TOOLS][...][/AVAILABLE_TOOLS] before the
//                                last user turn, calls after [TOOL_CALLS], results in
//                                [TOOL_RESULTS]
// The calls come back out through ToolCallParser in the same format.
#pragma once

#include <nlohmann/json.hpp>

#include "text/tool_call_parser.h"

namespace keel {

// messages: OpenAI-shaped chat messages as templates take them (system/user/assistant
// with optional tool_calls whose function.arguments is an object or a string, and
// role "tool" results). tools: [{type: function, function: {name, description,
// parameters}}]. Returns messages that carry the tools and the tool turns as plain
// text in user/assistant/system roles, which any template renders.
nlohmann::ordered_json inject_tool_prompt(const nlohmann::ordered_json &messages,
                                          const nlohmann::ordered_json &tools,
                                          ToolCallFormat format);

}  // namespace keel
