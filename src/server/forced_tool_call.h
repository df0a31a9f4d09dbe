// A forced tool call (OpenAI tool_choice "required" / a named function, Anthropic
// "any" / "tool"): a constraint that lets the model write nothing but one call, in its
// own tool-call markup, to one of the allowed tools with arguments valid for the tool's
// parameters schema. The ordinary tool-call parser then reads it as for an unforced call.
#pragma once

#include <nlohmann/json.hpp>
#include <string>

#include "core/sampling_params.h"
#include "grammar/constraint.h"
#include "text/tool_call_parser.h"

namespace keel::server {

// tools: the request's tools in the OpenAI function shape ({type, function: {name,
// parameters}}); only_name: the forced tool, or "" for any of them. A tool without a
// parameters schema takes any JSON object.
grammar::Constraint forced_tool_call_constraint(ToolCallFormat format,
                                                const nlohmann::ordered_json &tools,
                                                const std::string &only_name);

// Sets s's constraint to forced_tool_call_constraint (s has none: callers refuse both).
void force_tool_call(SamplingParams &s, ToolCallFormat format, const nlohmann::ordered_json &tools,
                     const std::string &only_name);

// The tool's parameters schema as the constraint uses it ({"type": "object"} if none).
nlohmann::ordered_json forced_tool_parameters(const nlohmann::ordered_json &function);

}  // namespace keel::server
