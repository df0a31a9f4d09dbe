// Continuous batching, vLLM v1 style: each step has a token budget; running requests
// get their next token first, then partial prefills of running requests, then waiting
// requests are admitted, fairly by group, with chunked prefill. There are no prefill and
// decode phases, only computed-token counts.
//
// Fairness (issue 31): every request belongs to a group, one per API request (all its
// prompts x n samples share it). Admission takes the oldest waiting request of the group
// with the fewest running (RUNNING or LOADING_CACHE) requests, ties to the group whose
// oldest waiting request arrived first; so a 1,024-sequence completion cannot starve
// single requests that arrive after it, and a preempted request goes back with its group
// rather than ahead of everything. Victims, of preemption for blocks and of preemption
// for admission, are the newest running request of the group with the most running.
//
// Guarantees:
// - every running request that is ready to decode gets its token in every step (the
//   budget is at least max_num_seqs), so a long prefill delays decodes by at most one
//   chunk of at most max_chunk_tokens;
// - admission needs KV blocks and a free seat (max_num_seqs); when a running request
//   cannot grow, a victim is preempted (its blocks freed; it recomputes, mostly from the
//   prefix cache, when it resumes); no admission happens in a step that preempted so;
// - when the request admission picks cannot get blocks or a seat, and some group has at
//   least two more running than the picked one's, that group's newest running request is
//   preempted for it (never one admitted in the same step); otherwise it waits, and
//   nothing overtakes it. Such a swap never reverses: the victim's group keeps at least
//   as many running as the admitted one's;
// - requests in LOADING_CACHE (blocks being restored) are skipped, never waited for;
// - with tiers below the device (set_tiers), admission continues the prefix lookup into
//   them; a request with a hit there is admitted into LOADING_CACHE (its blocks
//   allocated, a TierLoad in the plan) instead of RUNNING, and runs once the engine
//   calls finish_loading(). A failed restore sends it back to waiting to recompute.
//
// The scheduler owns each request's token sequence and state, never tensors or streams.
// Single-threaded: the engine thread calls every method.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <set>
#include <span>
#include <string>
#include <tuple>
#include <unordered_map>
#include <vector>

#include "core/ids.h"
#include "core/request_state.h"
#include "kv/kv_cache_manager.h"
#include "sched/step_plan.h"

namespace keel {

struct SchedulerConfig {
  std::int32_t max_num_batched_tokens = 2048;  // token budget of one step
  std::int32_t max_num_seqs = 256;             // running requests at most
  std::int32_t max_chunk_tokens = 512;         // prefill tokens of one request per step
};

struct SchedRequest {
  RequestId id;
  std::uint64_t arrival = 0;  // arrival order (ties of fairness, and within a group)
  std::uint64_t group = 0;    // fairness group: one API request's sequences
  RequestState state = RequestState::kWaiting;
  std::vector<TokenId> tokens;  // prompt, then output
  std::int32_t num_prompt_tokens = 0;
  std::int32_t num_computed_tokens = 0;        // tokens whose KV is in the cache
  std::int32_t num_cached_prompt_tokens = -1;  // prefix hit at first admission; -1 before
  std::int32_t num_stored_prompt_tokens = 0;   // prompt tokens this request wrote to the cache
  std::int32_t num_preemptions = 0;
  bool use_prefix_cache = true;       // off for prompt logprobs, which need every prompt row
  std::string extra_keys;             // hashed into every block key (cache salt)
  std::int32_t loading_tokens = 0;    // in LOADING_CACHE: tokens computed once loaded
  std::int32_t restoring_tokens = 0;  // of those, the ones restored from the tiers
  bool skip_tiers = false;            // a restore failed: recompute instead
  std::uint64_t scheduled_step = 0;
  std::uint64_t admitted_step = 0;  // last admission (not a victim for admission then)
  // Speculative decoding: tokens proposed to follow `tokens` while it has draft_for
  // tokens (set_draft); taken by the next decode step when blocks and budget are left.
  std::vector<TokenId> draft;
  std::int32_t draft_for = -1;

  std::int32_t num_tokens() const { return static_cast<std::int32_t>(tokens.size()); }
  std::int32_t num_output_tokens() const { return num_tokens() - num_prompt_tokens; }
};

class Scheduler {
 public:
  Scheduler(const SchedulerConfig &config, KvCacheManager &kv);
  Scheduler(const Scheduler &) = delete;
  Scheduler &operator=(const Scheduler &) = delete;

  // Queues a request (WAITING) in fairness group `group` (0: a group of its own, keyed by
  // its id; give the id of a group's first request to every member). Throws
  // Error(kInvalidArgument) on an empty prompt or a duplicate id.
  SchedRequest &add_request(RequestId id, std::vector<TokenId> prompt, bool use_prefix_cache = true,
                            std::string extra_keys = {}, std::uint64_t group = 0);
  // Ends a request in any live state with a finished state and frees its blocks now.
  // Returns false when the id is unknown (already finished).
  bool finish(RequestId id, RequestState finished_state);

  StepPlan schedule();
  // After the forward: counts the computed tokens, caches newly full blocks, releases
  // the step's copy sources.
  void on_step_done(const StepPlan &plan);
  // After sampling: the request's next token. `kv_computed`: an accepted draft, whose KV
  // this step already computed (it counts as computed).
  void append_token(RequestId id, TokenId token, bool kv_computed = false);

  // Speculative decoding: drafted continuation of the request's tokens as they stand now;
  // the next schedule() adds as many of them to its decode as the step's leftover budget
  // and free blocks allow (drafts never preempt and never delay a prefill or admission).
  void set_draft(RequestId id, std::vector<TokenId> draft);
  // After the step's accepted tokens are appended: caches newly full blocks of accepted
  // tokens and frees the blocks that held only rejected drafts (KvCacheManager::truncate).
  void settle_drafts(RequestId id);

  // Backpressure from the cache tiers: at most `max_new` waiting requests are admitted
  // per schedule() (-1: no limit). Admission slows, never stops, so nothing waits on a
  // slow disk forever.
  void set_admission_limit(std::int32_t max_new) { admission_limit_ = max_new; }

  // The tiers below the device to continue prefix lookups into (null: none).
  void set_tiers(const TierIndex *tiers) { tiers_ = tiers; }

  // Tier restore (issue 7): a waiting request's first `num_tokens` are being loaded into
  // freshly allocated blocks; until finish_loading() the request is skipped by steps.
  // Returns false when too few blocks are free.
  bool start_loading(RequestId id, std::int32_t num_tokens);
  // ok: the tokens are computed (full blocks become cached) and the request runs; !ok:
  // blocks freed, back to waiting, and it will not try the tiers again.
  // `restored_tokens` >= 0: only that many of the tokens being restored landed (a
  // partial restore); the request runs from there.
  void finish_loading(RequestId id, bool ok, std::int32_t restored_tokens = -1);

  const SchedRequest *find(RequestId id) const;
  const KvCacheManager &kv() const { return kv_; }
  const SchedulerConfig &config() const { return config_; }

  std::int32_t num_running() const { return static_cast<std::int32_t>(running_.size()); }
  std::int32_t num_waiting() const { return num_waiting_; }
  std::int32_t num_preempted() const { return num_preempted_waiting_; }
  std::int32_t num_loading() const { return static_cast<std::int32_t>(loading_.size()); }
  // RUNNING and LOADING_CACHE requests of a fairness group (0 for an unknown group).
  std::int32_t group_running(std::uint64_t group) const;
  std::int32_t num_requests() const { return static_cast<std::int32_t>(requests_.size()); }
  std::int64_t total_preemptions() const { return total_preemptions_; }
  std::uint64_t steps() const { return step_; }

  // Throws Error(kInternal) if queues, states and KV views disagree. O(requests + blocks).
  void check_invariants() const;

 private:
  // A fairness group: its running count and its waiting requests.
  struct Group {
    std::int32_t running = 0;                         // RUNNING and LOADING_CACHE
    std::int32_t members = 0;                         // live requests in any state
    std::map<std::uint64_t, SchedRequest *> waiting;  // WAITING and PREEMPTED, by arrival
  };
  // ready_'s order: fewest running, then oldest waiting arrival, then the group id.
  using ReadyKey = std::tuple<std::int32_t, std::uint64_t, std::uint64_t>;

  SchedRequest *get(RequestId id);
  void insert_running(SchedRequest *r);
  void erase_running(SchedRequest *r);
  void insert_loading(SchedRequest *r);
  void erase_loading(SchedRequest *r);
  void push_waiting(SchedRequest *r);
  void erase_waiting(SchedRequest *r);
  // Applies `change` to r's group, keeping its key in ready_ in step.
  template <typename Fn>
  void change_group(const SchedRequest *r, Fn change);
  // The request admission takes next (null when none waits).
  SchedRequest *next_waiting() const;
  // The newest running request of the group with the most running (null when none runs).
  SchedRequest *pick_victim() const;
  // For admitting `r`: a victim of a group with at least two more running than r's,
  // not admitted in step `step`; null when there is none.
  SchedRequest *victim_for(const SchedRequest *r, std::uint64_t step) const;
  // Admits `r` into LOADING_CACHE when the tiers hold blocks past its device hit: 1
  // admitted, 0 no tier hit (admit normally), -1 too few free blocks.
  int admit_loading(SchedRequest *r, const PrefixHit &hit, StepPlan &plan);
  void preempt(SchedRequest *victim, StepPlan &plan, std::int32_t &budget);
  // Schedules a running request's next tokens, preempting newer ones for blocks.
  void schedule_running(SchedRequest *r, StepPlan &plan, std::int32_t &budget, bool &preempted_any);
  // Extends the plan's decodes by their requests' drafts, from what is left.
  void add_drafts(StepPlan &plan, std::int32_t &budget);

  SchedulerConfig config_;
  KvCacheManager &kv_;
  std::int32_t admission_limit_ = -1;
  const TierIndex *tiers_ = nullptr;
  std::unordered_map<RequestId, std::unique_ptr<SchedRequest>> requests_;
  std::vector<SchedRequest *> running_;              // by arrival; newest at the back
  std::map<std::uint64_t, SchedRequest *> waiting_;  // by arrival: WAITING and PREEMPTED
  std::map<std::uint64_t, SchedRequest *> loading_;  // LOADING_CACHE
  std::unordered_map<std::uint64_t, Group> groups_;  // groups with live requests
  std::set<ReadyKey> ready_;                         // groups with waiting requests
  std::int32_t num_waiting_ = 0, num_preempted_waiting_ = 0;
  std::uint64_t next_arrival_ = 0;
  std::uint64_t step_ = 0;
  std::int64_t total_preemptions_ = 0;
};

}  // namespace keel
