#include "core/request_state.h"

#include <string>

#include "core/error.h"

namespace keel {

const char *request_state_name(RequestState state) {
  switch (state) {
    case RequestState::kWaiting:
      return "WAITING";
    case RequestState::kLoadingCache:
      return "LOADING_CACHE";
    case RequestState::kRunning:
      return "RUNNING";
    case RequestState::kPreempted:
      return "PREEMPTED";
    case RequestState::kFinishedStop:
      return "FINISHED_STOP";
    case RequestState::kFinishedLength:
      return "FINISHED_LENGTH";
    case RequestState::kFinishedAbort:
      return "FINISHED_ABORT";
    case RequestState::kFinishedError:
      return "FINISHED_ERROR";
  }
  return "?";
}

bool is_finished(RequestState state) {
  return state == RequestState::kFinishedStop || state == RequestState::kFinishedLength ||
         state == RequestState::kFinishedAbort || state == RequestState::kFinishedError;
}

bool is_legal_transition(RequestState from, RequestState to) {
  using S = RequestState;
  // Abort and error can end a request from any live state; stop and length need output,
  // which only a running request produces.
  if (!is_finished(from) && (to == S::kFinishedAbort || to == S::kFinishedError)) return true;
  switch (from) {
    case S::kWaiting:
      return to == S::kLoadingCache || to == S::kRunning;
    // A failed restore sends the request back to recompute its prefix.
    case S::kLoadingCache:
      return to == S::kRunning || to == S::kWaiting;
    case S::kRunning:
      return to == S::kPreempted || to == S::kFinishedStop || to == S::kFinishedLength;
    // The front may end a preempted request early on a stop string it already saw.
    case S::kPreempted:
      return to == S::kRunning || to == S::kLoadingCache || to == S::kFinishedStop;
    default:
      return false;  // finished is final
  }
}

void transition(RequestState &state, RequestState to) {
  if (!is_legal_transition(state, to))
    throw Error(ErrorCode::kInternal, std::string("request_state: illegal transition ") +
                                          request_state_name(state) + " -> " +
                                          request_state_name(to));
  state = to;
}

}  // namespace keel
