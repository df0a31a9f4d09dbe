// OpenAI request shapes after validation, and the renderers of its responses. Wire
// formats live here only; the rest of keel sees SamplingParams and token ids.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "core/sampling_params.h"
#include "server/generation.h"

namespace keel::server::openai {

struct ChatRequest {
  std::string model;
  nlohmann::ordered_json messages;  // [{role, content: string, ...}], content parts flattened
  nlohmann::ordered_json tools;     // array or null
  SamplingParams sampling;
  bool max_tokens_given = false;
  int n = 1;
  std::vector<std::string> stop;
  bool stream = false;
  bool include_usage = false;
  bool logprobs = false;
  int top_logprobs = 0;
};

struct CompletionRequest {
  std::string model;
  std::vector<std::string> text_prompts;            // when the prompt was text
  std::vector<std::vector<TokenId>> token_prompts;  // when it was token ids
  bool prompt_is_tokens = false;
  SamplingParams sampling;
  bool max_tokens_given = false;
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

// Everything a renderer needs besides the generation itself.
struct RenderContext {
  std::string id;  // "chatcmpl-..." / "cmpl-..."
  std::int64_t created = 0;
  std::string model;
  const ModelText *text = nullptr;  // for token strings in logprobs
};

std::string render_chat(const RenderContext &ctx, const ChatRequest &req, const Generation &g);
// The SSE `data:` payloads of a chat stream.
std::string chat_chunk_role(const RenderContext &ctx, int index);
std::string chat_chunk_delta(const RenderContext &ctx, const ChatRequest &req,
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
