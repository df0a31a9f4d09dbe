// What the rest of keel sees of an engine: submit a request, abort it, read status, and
// receive neutral token and finish events. No wire formats here: server/ renders them.
// Implemented in-process by engine/engine.h and across a process boundary by the IPC
// client, with the same semantics.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/fault_injector.h"
#include "core/ids.h"
#include "core/sampled_token.h"
#include "core/sampling_params.h"

namespace keel {

enum class FinishReason { kStop, kLength, kAbort, kError };

struct GenerationRequest {
  RequestId id;
  std::vector<TokenId> prompt;
  SamplingParams sampling;
  std::optional<std::chrono::steady_clock::time_point> deadline;
  // Fair admission (sched/scheduler.h): the requests of one API request (its prompts x n)
  // share a group, the id of its first request; 0: a group of its own.
  std::uint64_t group = 0;
};

// One event per request per step (or fewer): tokens appended, and possibly the finish.
struct RequestEvent {
  RequestId id;
  std::vector<TokenId> tokens;                          // new output tokens, in order
  std::vector<TokenLogprob> sampled_logprobs;           // [tokens.size()] when logprobs were asked
  std::vector<std::vector<TokenLogprob>> top_logprobs;  // [tokens.size()][N]
  // Prompt logprobs, sent once with the first event when asked (first token has none).
  std::vector<std::optional<TokenLogprob>> prompt_logprobs;
  std::vector<std::vector<TokenLogprob>> prompt_top_logprobs;
  std::int32_t cached_prompt_tokens = 0;  // prefix-cache hit, reported with the first event
  std::int32_t stored_prompt_tokens = 0;  // prompt tokens written to the cache, ditto
  std::optional<FinishReason> finish;
  std::string error;  // with FinishReason::kError
};

// One cache tier below the device blocks (host RAM or SSD), as the engine reports it.
// Counters are cumulative since the engine started.
struct KvTierStatus {
  std::int64_t capacity_bytes = 0, used_bytes = 0, blocks = 0;
  std::int64_t hit_blocks = 0;     // blocks restored from this tier
  std::int64_t stored_blocks = 0;  // blocks written into this tier
  std::int64_t errors = 0;         // failed writes, failed or corrupt reads (each a miss)
  std::int64_t pending = 0;        // stores queued, not yet written
};

struct EngineStatus {
  std::int32_t running = 0, waiting = 0, preempted = 0, loading_cache = 0;
  std::int64_t kv_blocks_total = 0, kv_blocks_used = 0, kv_blocks_cached = 0;
  std::int64_t prefix_hit_tokens = 0, prompt_tokens = 0;
  std::int64_t prefill_tokens = 0, decode_tokens = 0;  // computed, cumulative
  std::uint64_t steps = 0;
  double last_step_seconds = 0.0;
  double step_in_progress_seconds = 0.0;  // 0 when idle between steps
  double heartbeat_age_seconds = 0.0;
  KvTierStatus host_tier, ssd_tier;
  std::int64_t restored_tokens = 0;  // prompt tokens restored from host or SSD, cumulative
  // Speculative decoding (cumulative): the drafter's name ("" when off), the steps that
  // verified drafts, the drafts verified and accepted, and drafts accepted at each
  // position (accepted_at[j]: the (j+1)-th draft of a step was accepted).
  std::string spec_method;
  std::int64_t spec_steps = 0, spec_drafted = 0, spec_accepted = 0;
  std::vector<std::int64_t> spec_accepted_at;
  // SpeculativeConfig::adaptive, at the batch size now running: drafting paused because it
  // measured slower, and its measured speed-up (seconds a token without drafts over with;
  // 0 until both were measured).
  bool spec_paused = false;
  double spec_speedup = 0.0;
  // A draft model's memory beside the target's (its weights' files, its own KV pool).
  std::int64_t spec_draft_weights_bytes = 0, spec_draft_kv_bytes = 0;
};

using EventSink = std::function<void(const RequestEvent &)>;

class EngineApi {
 public:
  virtual ~EngineApi() = default;
  // Queues a request; events arrive on `sink` from the engine's side (never re-entrantly
  // from inside submit). Every submitted request gets exactly one event with `finish`.
  virtual void submit(GenerationRequest request, EventSink sink) = 0;
  // Acknowledged at once; the engine frees the request at its next step and sends a
  // finish(kAbort) event unless it had already finished.
  virtual void abort(RequestId id) = 0;
  // Ends the request with kStop (the front matched a stop string on its text), acknowledged
  // at once like abort. Engines that cannot tell the two apart abort it.
  virtual void stop_request(RequestId id) { abort(id); }
  virtual EngineStatus status() const = 0;
  // Forgets every cached prefix block in every tier (blocks that running requests hold
  // stay until they finish). Acknowledged at once, done at the engine's next step.
  virtual void clear_cache() {
    throw Error(ErrorCode::kUnsupported, "engine: clearing the cache is not supported here");
  }
  // Arms a fault (only reachable when the server runs with --enable-fault-injection).
  virtual void inject_fault(const FaultSpec &) {
    throw Error(ErrorCode::kUnsupported, "engine: fault injection is not supported here");
  }
  virtual std::vector<FaultSpec> armed_faults() const { return {}; }
};

}  // namespace keel
