// keel serve's test-only --force-tool-call (behind --enable-fault-injection): makes a
// model's reply call a named tool, so that a client's tool loop (Claude Code, Codex)
// can be tested against a model that would never call one by itself. The call goes
// through the forced-tool grammar path (forced_tool_call.h), so it parses like any
// forced call; fixed arguments are checked against the tool's parameters schema.
#pragma once

#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "core/sampling_params.h"
#include "text/tool_call_parser.h"

namespace keel::server {

struct ForcedToolOption {
  std::string model;                                // the model whose replies are forced
  std::string tool;                                 // the tool they call
  std::optional<nlohmann::ordered_json> arguments;  // fixed arguments; none: any valid ones
};

// "MODEL:TOOL" or "MODEL:TOOL=JSON". Throws Error(kInvalidArgument) naming the option.
ForcedToolOption parse_forced_tool_option(const std::string &spec);

// Forces the call when the request is for o.model, offers o.tool, has no constraint of
// its own and its last user turn carries no tool result (the client has not run the
// call yet: the turn after it answers freely, so the client's loop ends). True when it
// forced. Fixed arguments that the tool's schema rejects are a 400 naming `tools`.
bool apply_forced_tool_option(const ForcedToolOption &o, const std::string &model,
                              SamplingParams &s, ToolCallFormat format,
                              const nlohmann::ordered_json &tools,
                              const nlohmann::ordered_json &messages);

}  // namespace keel::server
