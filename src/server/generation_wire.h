// How one endpoint renders a Generation on the wire. The skeleton around it (stream or
// not, a choice that fails, a client that leaves) is ApiServer::serve_generation, one
// for every generating endpoint; an endpoint supplies only its format's pieces.
#pragma once

#include <functional>
#include <string>

#include "server/api_error.h"
#include "server/generation.h"

namespace keel::server {

enum class WireFormat { kOpenAI, kAnthropic };

struct GenerationWire {
  WireFormat format = WireFormat::kOpenAI;
  bool stream = false;
  // Runs first when the generation ends, streamed or not (the Responses API stores the
  // response here). Optional.
  std::function<void(const Generation &)> ended;

  // Not streamed: the 200 body once every choice ended; a failed choice answers 503.
  std::function<std::string(const Generation &)> body;

  // Streamed: SSE text sent as the stream opens, before the first token.
  std::string opening;
  // Streamed: SSE text at a choice's first delta, before anything else, even an
  // error (Anthropic's message_start carries the first delta's cache hit). Optional.
  std::function<std::string(const ChoiceDelta &)> first;
  // Streamed: SSE text of a delta that neither failed nor was aborted ("": nothing).
  std::function<std::string(const ChoiceDelta &)> delta;
  // Streamed: SSE text of an error: the generation could not start, or (when
  // `choice_error` is unset) a choice failed with 503.
  std::function<std::string(const ApiError &)> error;
  // Streamed: SSE text of a failed choice, where the format reports it otherwise. Optional.
  std::function<std::string(const ChoiceDelta &)> choice_error;
  // Streamed: SSE text that closes the stream once every choice ended.
  std::function<std::string(const Generation &)> closing;
};

}  // namespace keel::server
