// The OpenAI Responses API (/v1/responses) on top of the chat path: a request's input
// items become chat messages (an openai::ChatRequest, so tool-call parsing, stops,
// cancellation and the max-tokens rule are the chat endpoint's), and generated text
// becomes output items (reasoning, message, function_call) and stream events.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "server/generation.h"
#include "server/openai/openai_types.h"
#include "text/reasoning_parser.h"
#include "text/tool_call_parser.h"

namespace keel::server::openai {

struct ResponsesRequest {
  ChatRequest chat;  // model, messages, tools, tool_choice, sampling, max tokens, stream
  nlohmann::ordered_json instructions;          // string or null
  nlohmann::ordered_json conversation;          // previous turns' items + this input, as items
  nlohmann::ordered_json tools;                 // the function tools as given (echoed back)
  nlohmann::ordered_json tool_choice = "auto";  // as given
  bool parallel_tool_calls = true;
  std::optional<std::int64_t> max_output_tokens;
  std::optional<std::string> previous_response_id;
  std::optional<std::string> reasoning_effort;
  std::optional<std::string> reasoning_summary;  // "auto" | "concise" | "detailed" | "none"
  bool store = true;
  bool background = false;
  nlohmann::ordered_json metadata = nlohmann::ordered_json::object();
  std::optional<std::string> user;
  std::optional<std::string> prompt_cache_key;
  nlohmann::ordered_json text = {{"format", {{"type", "text"}}}};
};

// The conversation items of a stored response (previous_response_id): returns them,
// or nullopt when the id is unknown or expired.
using PreviousLookup = std::function<std::optional<nlohmann::ordered_json>(const std::string &)>;

// A stored item by id (for item_reference inputs), or nullopt when unknown.
using ItemLookup = std::function<std::optional<nlohmann::ordered_json>(const std::string &)>;

// Validates a /v1/responses body (throws ApiErrorException naming the field, e.g.
// "input[2].call_id") and converts it to a chat request.
ResponsesRequest parse_responses(const nlohmann::ordered_json &body, const PreviousLookup &previous,
                                 const ItemLookup &item = nullptr);

// Everything the response object carries besides the output.
struct ResponseContext {
  std::string id;  // "resp_..."
  std::int64_t created_at = 0;
  std::string model;
  const ModelText *text = nullptr;  // the tool-call format and reasoning token counts
  bool prompt_opens_reasoning = false;
};

// Builds output items from generated text as it arrives, and (when streaming) the
// events that announce them. Reasoning (<think>...</think>) becomes a reasoning item,
// tool calls function_call items, the rest message items, in the order written.
// Feeding the whole text at once gives the same items as any chunking.
class ResponseBuilder {
 public:
  ResponseBuilder(const ResponseContext &ctx, const ResponsesRequest &req);

  // The response object (status in_progress, no output yet) for created / in_progress.
  nlohmann::ordered_json initial() const;
  // SSE text of the opening events.
  std::string start_events();
  // Feeds a delta; returns the SSE text of the events it settles (empty when not
  // streaming or nothing settled).
  std::string feed(const std::string &text);
  // The end of the generation: settles everything held back and closes open items.
  // `finish` is the Generation's; the response's status and events follow from it.
  std::string finish(FinishReason finish, const std::string &error, int input_tokens,
                     int output_tokens, int cached_tokens);
  // The final response object (after finish).
  const nlohmann::ordered_json &response() const { return final_; }
  // The output items (after finish).
  const nlohmann::ordered_json &output() const { return output_; }

  // Streamed: the events are written, and a call's arguments come in fragments as the
  // model writes them. Call before the first feed.
  void set_streaming(bool on);

 private:
  nlohmann::ordered_json base(const char *status) const;
  std::string event(const char *type, nlohmann::ordered_json fields);
  void on_reasoning(const std::string &text, std::string &out);
  void open_message(std::string &out);
  void on_content(const std::string &text, std::string &out);
  void on_call(const ParsedToolCall &call, std::string &out);
  void on_call_start(const std::string &name, std::string &out);
  void on_call_arguments(const std::string &fragment, std::string &out);
  void on_call_end(bool complete, std::string &out);
  void on_event(const ToolParseEvent &e, std::string &out);
  void close_reasoning(std::string &out);
  void close_message(std::string &out);
  std::string item_id(const char *prefix);

  const ResponseContext &ctx_;
  const ResponsesRequest &req_;
  bool streaming_ = false;
  // Reasoning as summary_text, or as reasoning_text content when the client asked for
  // no summary ("none"). Summary by default: the AI SDK, LangChain and Codex read only
  // summaries, and they ask for one only with OpenAI's reasoning model names.
  bool summary_ = true;
  bool cut_off_ = false;  // finished at max_output_tokens: the last message is incomplete
  ReasoningParser reasoning_;
  std::optional<ToolCallParser> tools_;
  std::int64_t sequence_ = 0;
  int calls_ = 0;
  std::string reasoning_text_;  // all reasoning, for the token count
  // The open item (reasoning or message), or -1.
  int open_reasoning_ = -1, open_message_ = -1;
  int open_call_ = -1;          // the function_call item whose arguments are streaming
  bool dropping_call_ = false;  // the call streaming is left out (parallel_tool_calls)
  nlohmann::ordered_json output_ = nlohmann::ordered_json::array();
  nlohmann::ordered_json final_;
};

// "event: TYPE\ndata: JSON\n\n"
std::string response_sse(const nlohmann::ordered_json &event);

}  // namespace keel::server::openai
