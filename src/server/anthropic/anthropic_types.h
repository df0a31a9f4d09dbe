// Anthropic Messages API: request validation and response rendering (plain and the
// streamed event sequence message_start ... message_stop).
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "core/sampling_params.h"
#include "server/generation.h"
#include "text/reasoning_parser.h"
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
  // auto (also when absent), none, any or tool (tool_choice_name): the last two force a
  // call, through a constraint (server/forced_tool_call.h).
  std::string tool_choice = "auto";
  std::string tool_choice_name;
  bool forces_tool_call() const { return tool_choice == "any" || tool_choice == "tool"; }
  // thinking.type: "" (absent), enabled, disabled or adaptive (the model's thinking on,
  // its budget by output_config.effort). Passed to the template as enable_thinking.
  std::string thinking;
  std::int64_t thinking_budget = 0;  // enabled: budget_tokens
  bool thinking_omitted = false;     // thinking.display "omitted": blocks carry no text
  std::string effort;                // output_config.effort, or empty
  // Extra chat-template variables (enable_thinking).
  nlohmann::ordered_json template_kwargs = nlohmann::ordered_json::object();
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
  // The model's output format even without tools (harmony splits reasoning by channel).
  ToolCallFormat output_format = ToolCallFormat::kNone;
  std::vector<std::string> tool_names;
  // The output's leading <think> block becomes a thinking content block. The prompt
  // may already have opened it; with display "omitted" the block carries no text.
  bool opens_reasoning = false;
  bool thinking_omitted = false;

  // Streaming state: the stream callbacks share one const context, and a generation's
  // deltas are serialized, so these need no lock. Blocks open as content arrives
  // (thinking, then text and tool_use blocks in the order the model writes them).
  struct Stream {
    ReasoningParser reasoning{false};
    ToolCallParser parser{ToolCallFormat::kNone, {}};
    std::string thinking;  // the thinking text so far (for its signature)
    int next_block = 0;    // index of the next content block
    bool thinking_open = false;
    bool text_open = false;
    int tool_block = -1;  // the tool_use block whose input is streaming, or -1
    int calls = 0;
    bool started = false;
  };
  mutable Stream stream;
};

// Makes the context parse tool calls when the request declares tools (and
// tool_choice is not none), in the format of the model's vocabulary.
void prepare_tools(RenderContext &ctx, const MessagesRequest &req, const ModelText &text);
// "toolu_..." for call k: unique within the response.
std::string tool_use_id(const RenderContext &ctx, int k);
// The signature of a thinking block keel wrote: a digest of its text (clients send it
// back with the block; keel reads the text, not the signature).
std::string thinking_signature(const std::string &thinking);

// input_tokens excludes cache reads, as the API defines it.
std::string render_message(const RenderContext &ctx, const Generation &g);
// One SSE event: "event: NAME\ndata: JSON\n\n".
std::string sse_event(const std::string &name, const nlohmann::ordered_json &data);
// message_start and a ping; content blocks open as content arrives.
std::string stream_start(const RenderContext &ctx, int input_tokens, int cached_tokens,
                         int stored_tokens);
std::string stream_delta(const RenderContext &ctx, const std::string &text);
// Settles what is held back, closes the open block, then message_delta and message_stop.
std::string stream_finish(const RenderContext &ctx, const ChoiceDelta &d, int output_tokens);
std::string stream_error(int status, const std::string &message);

}  // namespace keel::server::anthropic
