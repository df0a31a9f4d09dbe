// The lifecycle of a generation request inside an engine, in one place:
//
//   WAITING ──▶ LOADING_CACHE ──▶ RUNNING ⇄ PREEMPTED
//      │  └──────────────────────▶   │          │
//      ▼                             ▼          ▼
//   FINISHED_ABORT / ERROR      FINISHED_STOP / LENGTH / ABORT / ERROR
//
// A request has a count of computed tokens, not a prefill or decode phase. PREEMPTED
// requests lost their KV blocks and recompute (or restore) them when they resume.
// Every state change goes through transition(); an illegal one throws Error(kInternal),
// because it means the scheduler's bookkeeping is wrong, not that the input is.
#pragma once

#include <cstdint>

namespace keel {

enum class RequestState : std::uint8_t {
  kWaiting,       // queued, holds no KV blocks
  kLoadingCache,  // admitted, its cached prefix blocks are being restored; skipped by steps
  kRunning,       // holds KV blocks, scheduled every step until it finishes
  kPreempted,     // blocks taken back under memory pressure; waits to resume
  kFinishedStop,
  kFinishedLength,
  kFinishedAbort,
  kFinishedError,
};

const char *request_state_name(RequestState state);
bool is_finished(RequestState state);
bool is_legal_transition(RequestState from, RequestState to);

// Moves `state` to `to`, or throws Error(kInternal) naming both states.
void transition(RequestState &state, RequestState to);

}  // namespace keel
