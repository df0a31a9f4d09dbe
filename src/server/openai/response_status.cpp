#include "server/openai/response_status.h"

namespace keel::server::openai {

const char *response_status_name(ResponseStatus s) {
  switch (s) {
    case ResponseStatus::kQueued:
      return "queued";
    case ResponseStatus::kInProgress:
      return "in_progress";
    case ResponseStatus::kCompleted:
      return "completed";
    case ResponseStatus::kCancelled:
      return "cancelled";
    case ResponseStatus::kFailed:
      return "failed";
    case ResponseStatus::kIncomplete:
      return "incomplete";
  }
  return "unknown";
}

std::optional<ResponseStatus> parse_response_status(std::string_view name) {
  for (auto s : {ResponseStatus::kQueued, ResponseStatus::kInProgress, ResponseStatus::kCompleted,
                 ResponseStatus::kCancelled, ResponseStatus::kFailed, ResponseStatus::kIncomplete})
    if (name == response_status_name(s)) return s;
  return std::nullopt;
}

}  // namespace keel::server::openai
