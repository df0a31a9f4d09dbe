// The OpenAI wire format as a benchmark client sees it: the streaming request body for
// one turn, and what each streamed chunk tells (first content, usage, errors).
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

#include "loadgen/workload.h"

namespace keel::loadgen {

// "/v1/chat/completions" for chat sessions, "/v1/completions" otherwise.
const char *request_path(const Session &session);

// The body for turn `turn` of a session; `replies` holds the assistant's text of the
// session's earlier turns (an agent's history). Streams with usage in the last chunk,
// greedy, and ignore_eos so that every request generates max_tokens.
nlohmann::json request_body(const Session &session, std::size_t turn,
                            const std::vector<std::string> &replies, const std::string &model);

// What one streamed response has told so far. Token counts come only from the server's
// usage chunk: how the server batches content into events cannot change them.
struct StreamState {
  bool saw_content = false;  // a chunk with non-empty text arrived
  bool saw_done = false;     // data: [DONE]
  int prompt_tokens = -1;    // -1 until the usage chunk arrives
  int completion_tokens = -1;
  int cached_tokens = 0;
  int content_events = 0;
  std::string reply;  // the generated text (chat content or completion text)
  std::string error;  // an error the stream reported
};

// Applies one event's data. Returns true when this event carried the first content.
bool apply_event(std::string_view data, StreamState &state);

// The message of an error body ({"error": {"message": ...}}), else the body cut short.
std::string error_message(std::string_view body);

}  // namespace keel::loadgen
