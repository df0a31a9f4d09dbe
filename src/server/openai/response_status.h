// A Responses API response's status as a state machine: queued -> in_progress -> one of
// the terminal states (completed, cancelled, failed, incomplete). A terminal state is
// final: nothing that happens later (a generation finishing after its cancel, an engine
// crash after a cancel, a second cancel) changes it. ResponseStore applies this rule at
// every write, so it holds in one place for every path that settles a response.
#pragma once

#include <optional>
#include <string_view>

namespace keel::server::openai {

enum class ResponseStatus { kQueued, kInProgress, kCompleted, kCancelled, kFailed, kIncomplete };

// "queued", "in_progress", ... (the wire names).
const char *response_status_name(ResponseStatus s);
std::optional<ResponseStatus> parse_response_status(std::string_view name);

constexpr bool is_terminal(ResponseStatus s) {
  return s == ResponseStatus::kCompleted || s == ResponseStatus::kCancelled ||
         s == ResponseStatus::kFailed || s == ResponseStatus::kIncomplete;
}

// Whether a response in `from` may move to `to`: forward only (queued before
// in_progress), never out of a terminal state. Staying put is allowed for the
// non-terminal states (a stored in_progress response rewritten as in_progress).
constexpr bool may_transition(ResponseStatus from, ResponseStatus to) {
  if (is_terminal(from)) return false;
  if (from == ResponseStatus::kInProgress && to == ResponseStatus::kQueued) return false;
  return true;
}

}  // namespace keel::server::openai
