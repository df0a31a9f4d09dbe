// OpenAI request shapes after validation, and the renderers of its responses. Wire
// formats live here only; the rest of keel sees SamplingParams and token ids.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "core/sampling_params.h"
#include "server/generation.h"
#include "text/reasoning_parser.h"
#include "text/tool_call_parser.h"

namespace keel::server::openai {

struct ChatRequest {
  std::string model;
  nlohmann::ordered_json messages;      // [{role, content: string, ...}], content parts flattened
  nlohmann::ordered_json tools;         // array or null
  std::vector<std::string> tool_names;  // declared function names, in order
  // "auto" (also when absent), "none", "required" or "function" (tool_choice_name): the
  // last two force a call, through a constraint (server/forced_tool_call.h).
  std::string tool_choice = "auto";
  std::string tool_choice_name;
  // Extra chat-template variables: chat_template_kwargs, and enable_thinking /
  // reasoning_effort from reasoning_effort.
  nlohmann::ordered_json template_kwargs = nlohmann::ordered_json::object();
  SamplingParams sampling;  // its max_tokens is settled by fit_max_tokens, not parsed
  std::optional<std::int64_t> max_tokens;  // as asked; none: as many as fit
  int n = 1;
  std::vector<std::string> stop;
  bool stream = false;
  bool include_usage = false;
  bool logprobs = false;
  int top_logprobs = 0;

  // Whether generated text is parsed for tool calls.
  bool parses_tool_calls() const { return !tool_names.empty() && tool_choice != "none"; }
  bool forces_tool_call() const { return tool_choice == "required" || tool_choice == "function"; }
};

struct CompletionRequest {
  std::string model;
  std::vector<std::string> text_prompts;            // when the prompt was text
  std::vector<std::vector<TokenId>> token_prompts;  // when it was token ids
  bool prompt_is_tokens = false;
  SamplingParams sampling;  // its max_tokens is settled by fit_max_tokens, not parsed
  std::optional<std::int64_t> max_tokens;  // as asked (16 when not given)
  int n = 1;
  std::vector<std::string> stop;
  bool stream = false;
  bool include_usage = false;
  bool echo = false;
  int logprobs = -1;  // -1: none
};

// Throw ApiErrorException naming the field.
ChatRequest parse_chat(const nlohmann::ordered_json &body);
CompletionRequest parse_completion(const nlohmann::ordered_json &body);

// A streamed choice's parsing state: its reasoning split, then tool calls.
struct ChoiceToolStream {
  ToolCallParser parser;
  int calls = 0;
  ReasoningParser reasoning;
};

// Everything a renderer needs besides the generation itself.
struct RenderContext {
  std::string id;  // "chatcmpl-..." / "cmpl-..."
  std::int64_t created = 0;
  std::string model;
  const ModelText *text = nullptr;  // for token strings in logprobs and the tool-call format
  // Chat: the prompt ends inside a <think> block (the output starts with reasoning).
  bool opens_reasoning = false;

  // Streaming state of tool-call parsing per choice index. Mutable because the
  // stream callbacks share one const context; a generation's deltas are serialized,
  // so no lock is needed.
  mutable std::map<int, ChoiceToolStream> tool_streams;
  // Completions: per choice, where the next token's text starts (logprobs text_offset).
  struct TextPosition {
    std::unique_ptr<StreamingDetokenizer> detok;
    std::size_t pos = 0;
  };
  mutable std::map<int, TextPosition> completion_offsets;
};

// The tool-call format of the context's model (kHermes without a model).
ToolCallFormat tool_call_format(const RenderContext &ctx);
// "call_..." for choice `choice`, call `k`: unique within the response.
std::string tool_call_id(const RenderContext &ctx, int choice, int k);
// Validates tools, tool_choice and parallel_tool_calls into req (needs no messages).
void parse_tools(const nlohmann::ordered_json &body, ChatRequest &req);
// Validates an assistant message's tool_calls and returns them as chat templates expect
// (function.arguments as an object when it holds one, as vLLM and HF pass them).
nlohmann::ordered_json template_tool_calls(const nlohmann::ordered_json &calls,
                                           const std::string &field);

std::string render_chat(const RenderContext &ctx, const ChatRequest &req, const Generation &g);
// The SSE `data:` payloads of a chat stream.
std::string chat_chunk_role(const RenderContext &ctx, int index);
// One chunk per delta (empty delta when tool-call text is held back).
std::string chat_chunk_delta(const RenderContext &ctx, const ChatRequest &req,
                             const ChoiceDelta &d);
// The chunks of a delta, none when there is nothing to send: content, and each tool
// call as OpenAI streams it (id and name with empty arguments, then the arguments).
// Use this or chat_chunk_delta for a whole stream, not both.
std::vector<std::string> chat_chunks(const RenderContext &ctx, const ChatRequest &req,
                                     const ChoiceDelta &d);
std::string chat_chunk_usage(const RenderContext &ctx, const Generation &g);

// Prompt text (for echo) per prompt index.
std::string render_completion(const RenderContext &ctx, const CompletionRequest &req,
                              const Generation &g, const std::vector<std::string> &prompt_texts);
std::string completion_chunk(const RenderContext &ctx, const CompletionRequest &req,
                             const ChoiceDelta &d, const std::string &echo_prefix,
                             const std::vector<TokenId> &echo_tokens,
                             const std::vector<std::optional<TokenLogprob>> &echo_logprobs,
                             const std::vector<std::vector<TokenLogprob>> &echo_top);
std::string completion_chunk_usage(const RenderContext &ctx, const Generation &g);

nlohmann::ordered_json usage_json(const Generation &g);

}  // namespace keel::server::openai
