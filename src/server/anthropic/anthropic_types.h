// Anthropic Messages API: request validation and response rendering (plain and the
// streamed event sequence message_start ... message_stop).
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "core/sampling_params.h"
#include "server/generation.h"
#include "text/tool_call_parser.h"

namespace keel::server::anthropic {

struct MessagesRequest {
  std::string model;
  // [{role, content: string}] with the system prompt first, in the OpenAI shape chat
  // templates take: tool_use blocks become assistant tool_calls, tool_result blocks
  // become role "tool" messages.
  nlohmann::ordered_json messages;
  // Array or null, converted to the OpenAI function shape templates take:
  // {type: function, function: {name, description, parameters: input_schema}}.
  nlohmann::ordered_json tools;
  std::vector<std::string> tool_names;
  // auto (also when absent), any, tool (tool_choice_name) or none. keel cannot force
  // a call (no constrained decoding): any and tool are parsed as auto.
  std::string tool_choice = "auto";
  std::string tool_choice_name;
  SamplingParams sampling;
  std::vector<std::string> stop_sequences;
  bool stream = false;
};

// for_count_tokens: max_tokens is not required (count_tokens has none).
MessagesRequest parse_messages(const nlohmann::ordered_json &body, bool for_count_tokens = false);

struct RenderContext {
  std::string id;  // "msg_..."
  std::string model;
  // Set by prepare_tools when the request's output is parsed for tool calls.
  ToolCallFormat tool_format = ToolCallFormat::kNone;
  std::vector<std::string> tool_names;

  // Streaming state (only with tools): the stream callbacks share one const context,
  // and a generation's deltas are serialized, so these need no lock.
  struct ToolStream {
    ToolCallParser parser{ToolCallFormat::kNone, {}};
    int next_block = 0;  // index of the next content block
    bool text_open = false;
    int calls = 0;
    bool started = false;
  };
  mutable ToolStream stream;
};

// Makes the context parse tool calls when the request declares tools (and
// tool_choice is not none), in the format of the model's vocabulary.
void prepare_tools(RenderContext &ctx, const MessagesRequest &req, const ModelText &text);
// "toolu_..." for call k: unique within the response.
std::string tool_use_id(const RenderContext &ctx, int k);

// input_tokens excludes cache reads, as the API defines it.
std::string render_message(const RenderContext &ctx, const Generation &g);
// One SSE event: "event: NAME\ndata: JSON\n\n".
std::string sse_event(const std::string &name, const nlohmann::ordered_json &data);
// With tools prepared, content blocks open as content arrives (text, or tool_use with
// its input as one input_json_delta), so the streamed delta and finish need the context.
std::string stream_start(const RenderContext &ctx, int input_tokens, int cached_tokens);
std::string stream_delta(const RenderContext &ctx, const std::string &text);
std::string stream_finish(const RenderContext &ctx, const ChoiceDelta &d, int output_tokens);
// Without tools (the text block 0 that stream_start opened).
std::string stream_delta(const std::string &text);
std::string stream_finish(const ChoiceDelta &d, int output_tokens);
std::string stream_error(int status, const std::string &message);

}  // namespace keel::server::anthropic
