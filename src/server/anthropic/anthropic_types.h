// Anthropic Messages API: request validation and response rendering (plain and the
// streamed event sequence message_start ... message_stop).
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "core/sampling_params.h"
#include "server/generation.h"

namespace keel::server::anthropic {

struct MessagesRequest {
  std::string model;
  nlohmann::ordered_json messages;  // [{role, content: string}] with the system prompt first
  nlohmann::ordered_json tools;     // array or null
  SamplingParams sampling;
  std::vector<std::string> stop_sequences;
  bool stream = false;
};

// for_count_tokens: max_tokens is not required (count_tokens has none).
MessagesRequest parse_messages(const nlohmann::ordered_json &body, bool for_count_tokens = false);

struct RenderContext {
  std::string id;  // "msg_..."
  std::string model;
};

// input_tokens excludes cache reads, as the API defines it.
std::string render_message(const RenderContext &ctx, const Generation &g);
// One SSE event: "event: NAME\ndata: JSON\n\n".
std::string sse_event(const std::string &name, const nlohmann::ordered_json &data);
std::string stream_start(const RenderContext &ctx, int input_tokens, int cached_tokens);
std::string stream_delta(const std::string &text);
std::string stream_finish(const ChoiceDelta &d, int output_tokens);
std::string stream_error(int status, const std::string &message);

}  // namespace keel::server::anthropic
