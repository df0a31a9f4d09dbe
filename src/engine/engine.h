// The in-process engine: one thread that owns a model runner (and its execution
// context), schedules, computes, samples and emits events, step after step.
//
//   other threads                      engine thread (the only one touching the runner)
//   submit/abort/stop_request ──queue──▶ drain commands ─▶ schedule ─▶ copy-on-write
//   status() ◀── published snapshot ──   ─▶ forward ─▶ sample ─▶ events ─▶ publish status
//                + atomic heartbeats
//
// Why this shape (docs/ARCHITECTURE.md, "The bug class"): device work for an engine is enqueued
// from exactly one thread, so no stream or handle is shared; commands never wait for
// a step (the queue's lock is never held while computing); status and heartbeats are
// readable while a step runs, so a stuck step shows as a growing step age, not as a
// frozen status. An abort is acknowledged at once and the request's blocks are freed
// at the start of the next step.
//
// Events: exactly one finish per submitted request. A stop token (eos or
// stop_token_ids) ends the request with kStop and is not included in `tokens`. Sinks
// run on the engine thread and must not block.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <exception>
#include <functional>
#include <future>
#include <memory>
#include <mutex>
#include <optional>
#include <random>
#include <span>
#include <string>
#include <thread>
#include <unordered_map>
#include <variant>
#include <vector>

#include "core/output_constraint.h"
#include "engine/engine_api.h"
#include "engine/load_progress.h"
#include "engine/mask_prefetcher.h"
#include "engine/speculation_governor.h"
#include "engine/speculative.h"
#include "engine/token_sampling.h"
#include "exec/exec_context.h"
#include "exec/forward_batch.h"
#include "exec/model_runner.h"
#include "kv/kv_cache_manager.h"
#include "kv/kv_tiers.h"
#include "sched/scheduler.h"

namespace keel {

// What the engine thread builds when it starts and owns until it ends. The context
// may be null for a runner that needs none (tests). Declared before the runner so
// that the runner, which may refer to it, is destroyed first.
struct EngineBackend {
  std::unique_ptr<ExecContext> context;
  std::unique_ptr<ModelRunner> runner;
};
// Runs on the engine thread, so the context it makes is owned by that thread.
using BackendFactory = std::function<EngineBackend()>;

struct EngineConfig {
  SchedulerConfig scheduler;
  bool enable_prefix_caching = true;
  // Names the weights in block keys, beside the model config and KV layout that always
  // take part (give the weights' path or digest to tell apart two models of one shape;
  // the SSD tier persists blocks, so name the weights whenever it is on).
  std::string model_fingerprint;
  // Longest sequence (prompt + output); 0: max_position_embeddings, capped so that one
  // request always fits in the KV cache.
  std::int32_t max_model_len = 0;
  // How often an idle engine wakes to stamp its heartbeat and check deadlines.
  std::chrono::milliseconds idle_tick{100};
  // The destructor's stop deadline.
  std::chrono::milliseconds shutdown_grace{10000};
  // Cache tiers below the device blocks (issue 7): host RAM and SSD; off when both are
  // 0 (or prefix caching is off). See kv/kv_tiers.h.
  KvTierConfig tiers;
  // How long stopping may spend moving device-cached blocks into the SSD tier (so that
  // a restart finds them). Must stay well inside shutdown_grace.
  std::chrono::milliseconds tier_flush_timeout{3000};
  // Sample on the runner's device when it can (ModelRunner::samples_on_device) and no
  // row of the step needs its logits on the host (top-N or prompt logprobs): only the
  // tokens come back. Same tokens either way (the request's RNG draw is passed along).
  bool device_sampling = true;
  // Makes structured-output constraints (requests with a constraint_kind); unset, such
  // requests are refused.
  OutputConstraintFactory make_constraint;
  // How long a step waits, after its forward, for the masks still being computed
  // (MaskPrefetcher); past it the step fails with a timeout.
  std::chrono::milliseconds mask_timeout{10000};
  // Told the start-up phases the engine itself runs after the backend is built (the cache
  // tiers: "rebuilding cache index" for an SSD tier, whose files are listed again); called
  // on the engine thread before the constructor returns. May be empty.
  LoadProgressSink on_load_progress;
  // Speculative decoding (engine/speculative.h): off unless a method is named; used only
  // with a runner that verifies drafts (ModelRunner::verifies_drafts: CPU and CUDA).
  SpeculativeConfig speculative;
};

class Engine final : public EngineApi {
 public:
  // Starts the engine thread and waits until the backend is built; rethrows its error.
  Engine(BackendFactory factory, EngineConfig config = {});
  // Stops with config.shutdown_grace. A thread still inside a step after that means
  // a wedged backend: the process aborts (docs/ARCHITECTURE.md: a wedged engine is killed).
  ~Engine() override;
  Engine(const Engine &) = delete;
  Engine &operator=(const Engine &) = delete;

  void submit(GenerationRequest request, EventSink sink) override;
  void abort(RequestId id) override;
  // Ends a request early with kStop (the front saw a stop string). Like abort, takes
  // effect at the next step.
  void stop_request(RequestId id) override;
  EngineStatus status() const override;
  // Forgets cached blocks in every tier: the device's free cached blocks, host RAM, and
  // this model's SSD files.
  void clear_cache() override;
  // Moves the device's cached blocks down into the tiers and forgets them on the device
  // (then, with drop_host_tier, empties host RAM too, so only the SSD tier holds them).
  // Blocks the engine thread until done or tier_flush_timeout: benchmarks and tests.
  std::future<void> demote_cache(bool drop_host_tier);
  // Restores that landed since the engine started: how many, their blocks, and the sum
  // of their durations (start to landed on the device). Benchmarks.
  struct RestoreTotals {
    std::int64_t restores = 0, blocks = 0;
    double seconds = 0.0;
  };
  RestoreTotals restore_totals() const;
  void inject_fault(const FaultSpec &spec) override { faults_.arm(spec); }
  std::vector<FaultSpec> armed_faults() const override { return faults_.armed(); }
  // The engine's faults, for the parts that strike them (the step loop, cache tiers).
  FaultInjector &faults() { return faults_; }

  // Stops admission, aborts every request (each gets its finish event), ends the loop
  // and joins the thread. Returns false, leaving the thread running, when it is still
  // inside a step at the deadline.
  bool stop(std::chrono::steady_clock::time_point deadline);

  const ModelConfig &model_config() const { return model_config_; }
  std::int32_t max_model_len() const { return max_model_len_; }
  std::int32_t kv_block_size() const { return block_size_; }

 private:
  struct Submit {
    GenerationRequest request;
    EventSink sink;
  };
  struct Finish {
    RequestId id;
    FinishReason reason;
  };
  struct ClearCache {};
  struct DemoteCache {
    bool drop_host_tier = false;
    std::shared_ptr<std::promise<void>> done;
  };
  using Command = std::variant<Submit, Finish, ClearCache, DemoteCache>;

  struct Live;  // engine-side state of one request (engine.cpp)

  void thread_main();
  void loop();
  bool wait_for_work();
  void drain_commands();
  void admit(Submit &cmd);
  void finish(RequestId id, FinishReason reason, std::string error = {});
  void expire_deadlines();
  bool run_step();  // false when there was nothing to compute
  void inject_step_faults();
  void fail_step(const StepPlan &plan, const std::string &what);
  void emit_outputs(const StepPlan &plan);
  // The stop tokens to mask in the request's next row: all of them while it has fewer than
  // min_tokens output tokens, none after.
  static std::span<const TokenId> stops_masked(const Live &live, std::int32_t num_output);
  // Takes one sampled token for `s`'s request: thinking budget, stop tokens, the
  // constraint, max_tokens. False when the request finished instead (or with it).
  // `kv_computed`: an accepted draft whose KV this step computed.
  bool take_token(const ScheduledSeq &s, Live &live, SampledToken t, bool kv_computed);
  // A sequence that carried drafts: its rows from `first_row` in order, each sampled
  // (or read, when sampled on the device) like an ordinary row, accepted while equal
  // to the draft; then the KV of rejected drafts is rolled back.
  void emit_verified(const StepPlan &plan, std::size_t seq, std::size_t first_row);
  // Hands each sequence's hidden rows of this step to a drafter that reads them.
  void observe_hidden(const StepPlan &plan);
  // After a step's outputs: the next drafts of the requests that decode.
  int propose_drafts(const StepPlan &plan);  // sequences given drafts
  // Times the step that ran (from `start_ns`), then proposes drafts for the next one.
  void govern_and_propose(const StepPlan &plan, std::int64_t start_ns, std::int64_t decode_before,
                          std::int64_t prefill_before);
  // Every row the host samples this step ([rows], empty entries for rows that do not).
  std::vector<SampledToken> sample_host_rows(const StepPlan &plan);
  // The step's rows for ModelRunner::forward_sample, or false when the step must
  // sample on the host (a row needs its logits, or the runner cannot).
  bool device_sample_rows(const StepPlan &plan, std::vector<DeviceSampleRow> &rows);
  // The step's structured-output masks: started before the forward, finished after it
  // (or, sampling on the device, when the runner calls mask_ready_).
  void post_masks(const StepPlan &plan);
  void finish_masks();
  // Ends request `id` whose mask allowed no token: a dead end, or `error` (what
  // compute_mask threw), logged and carried to the client in either case.
  void finish_mask_failure(RequestId id, const std::string &error);
  void publish_status();
  void settle_restores();  // tier restores that finished: their requests run or recompute
  void flush_tiers();      // device-cached blocks into the SSD tier (on stop)
  void wake_for_tiers();   // an SSD worker finished a job (any thread)
  void check_engine_thread(const char *what) const;
  std::int64_t now_ns() const;

  EngineConfig config_;
  FaultInjector faults_;  // before the thread and backend, which may refer to it

  // Shared with other threads.
  mutable std::mutex cmd_mu_;
  std::condition_variable cmd_cv_;
  std::deque<Command> commands_;
  bool stopping_ = false;   // under cmd_mu_
  bool tier_wake_ = false;  // under cmd_mu_
  std::atomic<std::int32_t> queued_submits_{0};

  mutable std::mutex status_mu_;
  EngineStatus snapshot_;  // under status_mu_
  std::atomic<std::int64_t> heartbeat_ns_{0};
  std::atomic<std::int64_t> restores_{0}, restored_blocks_{0}, restore_ns_{0};
  std::atomic<std::int64_t> step_start_ns_{0};  // 0 between steps
  std::chrono::steady_clock::time_point epoch_ = std::chrono::steady_clock::now();

  std::mutex done_mu_;
  std::condition_variable done_cv_;
  bool thread_done_ = false;  // under done_mu_
  bool joined_ = false;       // under done_mu_ (set by the constructor before sharing)

  // Set before the constructor returns, read-only after.
  ModelConfig model_config_;
  std::int32_t max_model_len_ = 0;
  std::int32_t block_size_ = 0;
  std::thread::id engine_thread_id_;

  // Engine thread only.
  EngineBackend backend_;
  std::unique_ptr<KvCacheManager> kv_;
  std::unique_ptr<Scheduler> sched_;
  std::unique_ptr<KvTiers> tiers_;      // null without tiers
  std::deque<Command> inflight_;        // taken from the queue, not yet run
  std::int32_t unsettled_submits_ = 0;  // run, still in queued_submits_
  std::unordered_map<RequestId, std::unique_ptr<Live>> live_;
  std::int32_t num_with_deadline_ = 0;
  std::mt19937_64 seed_rng_{std::random_device{}()};
  ForwardBatch batch_;
  ForwardOutput out_;
  std::vector<DeviceSampleRow> sample_rows_;  // this step's, when sampled on the device
  bool sampled_on_device_ = false;            // out_ holds tokens, not logits
  // Per plan sequence: whether its mask is being computed, allows a token, is a dead end
  // (no token continues the document), or failed (compute_mask threw: step_mask_error_).
  static constexpr std::int8_t kNoMask = 0, kMaskPending = 1, kMaskAllowed = 2, kMaskDeadEnd = 3,
                               kMaskFailed = 4;
  std::vector<std::int8_t> step_mask_;
  std::vector<std::string> step_mask_error_;         // per plan sequence: the kMaskFailed text
  std::unique_ptr<MaskPrefetcher> mask_prefetcher_;  // made at the first constrained step
  std::function<void()> mask_ready_ = [this] { finish_masks(); };
  std::int64_t prompt_tokens_ = 0, prefill_tokens_ = 0, decode_tokens_ = 0;
  std::unique_ptr<Drafter> drafter_;  // null: no speculation
  std::int64_t spec_steps_ = 0, spec_drafted_ = 0, spec_accepted_ = 0;
  std::vector<std::int64_t> spec_accepted_at_;
  // SpeculativeConfig::adaptive: whether drafting pays, per batch size. step_drafting_ is
  // the mode propose_drafts chose for the step that runs next, with the sequences then
  // running (none: not governed, e.g. past max_running).
  SpeculationGovernor governor_;
  std::optional<bool> step_drafting_;
  std::int32_t step_running_ = 0;
  // Whether the next step asks the runner for hidden rows (a drafter that wants them): only
  // when it may draft after it. Past max_running, or where the governor chose not to draft,
  // the head's catch-up and the rows' copies would cost every step for nothing, and the
  // governor's plain steps must be plain. Positions computed meanwhile reach the head as
  // zero rows (HiddenStateDrafter), as prefix-cache hits do.
  bool hidden_next_step_ = true;
  std::uint64_t steps_ = 0;
  double last_step_seconds_ = 0.0;

  std::thread thread_;  // last: started when everything above exists
};

}  // namespace keel
