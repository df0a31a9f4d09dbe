#include "engine/engine.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <future>
#include <limits>
#include <optional>
#include <sstream>
#include <utility>

#include "core/error.h"
#include "core/thinking_budget.h"
#include "engine/token_sampling.h"

namespace keel {

namespace {

RequestState finished_state(FinishReason reason) {
  switch (reason) {
    case FinishReason::kStop:
      return RequestState::kFinishedStop;
    case FinishReason::kLength:
      return RequestState::kFinishedLength;
    case FinishReason::kAbort:
      return RequestState::kFinishedAbort;
    case FinishReason::kError:
      return RequestState::kFinishedError;
  }
  return RequestState::kFinishedError;
}

// Sinks belong to other modules; one that throws must not take the engine down.
void deliver(const EventSink &sink, const RequestEvent &ev) {
  if (!sink) return;
  try {
    sink(ev);
  } catch (...) {
  }
}

std::string default_fingerprint(const ModelConfig &c, const KvBlockStore &kv) {
  std::ostringstream s;
  s << "arch=" << c.arch_name << ";vocab=" << c.vocab_size << ";hidden=" << c.hidden_size
    << ";layers=" << c.num_layers << ";heads=" << c.num_heads << ";kv_heads=" << c.num_kv_heads
    << ";head_dim=" << c.head_dim << ";rope=" << c.rope_theta << ";dtype=" << c.torch_dtype
    << ";block_size=" << kv.block_size() << ";block_bytes=" << kv.block_bytes();
  return s.str();
}

}  // namespace

struct Engine::Live {
  EventSink sink;
  SamplingParams params;
  std::optional<std::chrono::steady_clock::time_point> deadline;
  std::unique_ptr<RequestSampler> sampler;
  // Structured output, when asked for; shared with a mask job that may outlive the
  // request (MaskPrefetcher).
  std::shared_ptr<OutputConstraint> constraint;
  std::vector<TokenId> end_ids;            // stop tokens the constraint may allow
  std::vector<TokenId> stop_ids;           // min_tokens: the stop tokens masked until then
  std::optional<ThinkingBudget> thinking;  // a thinking budget, when asked for
  std::int32_t num_prompt_tokens = 0;
  bool first_event_sent = false;
  // Prompt logprobs, gathered chunk by chunk and sent with the first event.
  std::vector<std::optional<TokenLogprob>> prompt_logprobs;
  std::vector<std::vector<TokenLogprob>> prompt_top;
  RequestEvent pending;    // this step's output, sent at the end of the step
  AcceptanceTracker spec;  // speculative decoding: recent acceptance of its drafts
};

std::span<const TokenId> Engine::stops_masked(const Live &live, std::int32_t num_output) {
  if (num_output >= live.params.min_tokens) return {};
  return live.stop_ids;
}

Engine::Engine(BackendFactory factory, EngineConfig config) : config_(std::move(config)) {
  std::promise<void> ready;
  auto ready_future = ready.get_future();
  thread_ = std::thread([this, f = std::move(factory), p = std::move(ready)]() mutable {
    try {
      engine_thread_id_ = std::this_thread::get_id();
      backend_ = f();
      if (!backend_.runner) throw Error(ErrorCode::kInternal, "engine: backend without a runner");
      model_config_ = backend_.runner->config();
      KvBlockStore &store = backend_.runner->kv();
      block_size_ = store.block_size();
      KvCacheConfig kc;
      kc.num_blocks = store.num_blocks();
      kc.block_size = store.block_size();
      kc.enable_prefix_caching = config_.enable_prefix_caching;
      // The shape, dtype and KV layout always take part, so a configured name (a path)
      // never makes blocks of another layout match (they persist on SSD).
      kc.model = ModelFingerprint::of(config_.model_fingerprint + "|" +
                                      default_fingerprint(model_config_, store));
      kv_ = std::make_unique<KvCacheManager>(kc);
      sched_ = std::make_unique<Scheduler>(config_.scheduler, *kv_);
      // MTP heads and draft models refuse a runner that cannot run them (make_drafter
      // says why); n-gram lookup is simply off there.
      if (backend_.runner->verifies_drafts() ||
          (!config_.speculative.method.empty() && config_.speculative.method != "off" &&
           config_.speculative.method != "ngram")) {
        drafter_ = make_drafter(config_.speculative, backend_.runner.get());
        if (drafter_) spec_accepted_at_.assign(config_.speculative.num_speculative_tokens, 0);
      }
      const std::int64_t capacity = static_cast<std::int64_t>(kc.num_blocks) * kc.block_size;
      std::int64_t len =
          config_.max_model_len > 0 ? config_.max_model_len : model_config_.max_position_embeddings;
      if (len <= 0) len = capacity;
      max_model_len_ = static_cast<std::int32_t>(std::min(len, capacity));
      if (config_.tiers.enabled() && config_.enable_prefix_caching) {
        const std::int32_t longest = (max_model_len_ + block_size_ - 1) / block_size_;
        const bool ssd = !config_.tiers.ssd_dir.empty() && config_.tiers.ssd_bytes > 0;
        // The SSD tier lists its directory to find the blocks a previous run left; the
        // host tier allocates (on CUDA: pins) its memory. Neither can be counted inside.
        LoadProgress phase{ssd ? "rebuilding cache index" : "allocating host cache", 0, 0,
                           ssd ? "blocks" : ""};
        if (config_.on_load_progress) config_.on_load_progress(phase);
        tiers_ = std::make_unique<KvTiers>(
            config_.tiers, store, kc.model, &faults_, [this] { wake_for_tiers(); }, longest);
        if (ssd && config_.on_load_progress) {
          phase.done = phase.total = tiers_->ssd_stats().blocks;
          config_.on_load_progress(phase);
        }
        kv_->set_record_evictions(true);
        sched_->set_tiers(tiers_.get());
      }
      publish_status();
    } catch (...) {
      tiers_.reset();
      drafter_.reset();  // a draft model lives on the backend's device
      backend_ = EngineBackend{};
      p.set_exception(std::current_exception());
      return;
    }
    p.set_value();
    thread_main();
  });
  try {
    ready_future.get();
  } catch (...) {
    thread_.join();
    joined_ = true;
    throw;
  }
}

Engine::~Engine() {
  if (!stop(std::chrono::steady_clock::now() + config_.shutdown_grace)) {
    std::fprintf(stderr, "keel engine: engine thread still inside a step after %lld ms; aborting\n",
                 static_cast<long long>(config_.shutdown_grace.count()));
    std::abort();
  }
}

std::int64_t Engine::now_ns() const {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() -
                                                              epoch_)
             .count() +
         1;  // never 0, which means "not in a step"
}

void Engine::check_engine_thread(const char *what) const {
  if (std::this_thread::get_id() != engine_thread_id_)
    throw Error(ErrorCode::kInternal,
                std::string("engine: ") + what + " called off the engine thread");
}

// ---- other threads ----------------------------------------------------------------

void Engine::submit(GenerationRequest request, EventSink sink) {
  {
    std::lock_guard lk(cmd_mu_);
    if (stopping_) throw Error(ErrorCode::kUnavailable, "engine: stopped, not accepting requests");
    commands_.emplace_back(Submit{std::move(request), std::move(sink)});
    queued_submits_.fetch_add(1);
  }
  cmd_cv_.notify_one();
}

void Engine::abort(RequestId id) {
  {
    std::lock_guard lk(cmd_mu_);
    if (stopping_) return;  // stop() aborts everything anyway
    commands_.emplace_back(Finish{id, FinishReason::kAbort});
  }
  cmd_cv_.notify_one();
}

void Engine::stop_request(RequestId id) {
  {
    std::lock_guard lk(cmd_mu_);
    if (stopping_) return;
    commands_.emplace_back(Finish{id, FinishReason::kStop});
  }
  cmd_cv_.notify_one();
}

EngineStatus Engine::status() const {
  EngineStatus s;
  {
    std::lock_guard lk(status_mu_);
    s = snapshot_;
  }
  s.waiting += queued_submits_.load();
  const std::int64_t now = now_ns();
  const std::int64_t start = step_start_ns_.load();
  s.step_in_progress_seconds = start != 0 ? (now - start) * 1e-9 : 0.0;
  const std::int64_t hb = heartbeat_ns_.load();
  s.heartbeat_age_seconds = hb != 0 ? (now - hb) * 1e-9 : 0.0;
  return s;
}

bool Engine::stop(std::chrono::steady_clock::time_point deadline) {
  {
    std::lock_guard lk(cmd_mu_);
    stopping_ = true;
  }
  cmd_cv_.notify_one();
  std::unique_lock lk(done_mu_);
  if (!done_cv_.wait_until(lk, deadline, [&] { return thread_done_; })) return false;
  if (!joined_) {    // under done_mu_: two threads calling stop() join once
    thread_.join();  // immediate: the thread has finished its work
    joined_ = true;
  }
  return true;
}

// ---- engine thread ----------------------------------------------------------------

void Engine::thread_main() {
  try {
    loop();
  } catch (const std::exception &e) {
    // A broken invariant: the engine is unusable. Fail every request, queued or live,
    // and refuse new ones, rather than hang.
    const std::string msg = std::string("engine: internal error: ") + e.what();
    {
      std::lock_guard lk(cmd_mu_);
      stopping_ = true;
      for (Command &c : commands_) inflight_.push_back(std::move(c));
      commands_.clear();
    }
    queued_submits_.fetch_sub(unsettled_submits_);
    for (Command &c : inflight_)
      if (auto *s = std::get_if<Submit>(&c)) {
        RequestEvent ev;
        ev.id = s->request.id;
        ev.finish = FinishReason::kError;
        ev.error = msg;
        deliver(s->sink, ev);
        queued_submits_.fetch_sub(1);
      }
    inflight_.clear();
    for (auto &[id, live] : live_) {
      RequestEvent ev = std::move(live->pending);
      ev.id = id;
      ev.finish = FinishReason::kError;
      ev.error = msg;
      deliver(live->sink, ev);
    }
    live_.clear();
  }
  // Drop the backend here, on its owning thread (the tiers' transfers first).
  tiers_.reset();
  sched_.reset();
  kv_.reset();
  drafter_.reset();  // before the backend: a draft model lives on its device
  backend_ = EngineBackend{};
  step_start_ns_.store(0);
  {
    std::lock_guard lk(done_mu_);
    thread_done_ = true;
  }
  done_cv_.notify_all();
}

void Engine::loop() {
  bool idle = false;
  for (;;) {
    heartbeat_ns_.store(now_ns());
    bool stopping;
    {
      std::unique_lock lk(cmd_mu_);
      if (idle) {
        // Restores in flight are polled often (a device copy signals nothing); SSD
        // workers wake the loop themselves.
        const auto tick = tiers_ && tiers_->restoring()
                              ? std::min<std::chrono::milliseconds>(config_.idle_tick,
                                                                    std::chrono::milliseconds(1))
                              : config_.idle_tick;
        cmd_cv_.wait_for(lk, tick, [&] { return !commands_.empty() || stopping_ || tier_wake_; });
      }
      tier_wake_ = false;
      inflight_.swap(commands_);
      stopping = stopping_;
    }
    heartbeat_ns_.store(now_ns());
    // Commands leave inflight_ before they run, so that after an internal error the
    // rest can still be answered. Submits stay counted as waiting until the status
    // that shows them is published (never a moment where a request is in neither).
    while (!inflight_.empty()) {
      Command c = std::move(inflight_.front());
      inflight_.pop_front();
      if (auto *s = std::get_if<Submit>(&c)) {
        ++unsettled_submits_;
        if (stopping) {
          RequestEvent ev;
          ev.id = s->request.id;
          ev.finish = FinishReason::kAbort;
          deliver(s->sink, ev);
        } else {
          admit(*s);
        }
      } else if (auto *f = std::get_if<Finish>(&c)) {
        finish(f->id, f->reason);
      } else if (auto *d = std::get_if<DemoteCache>(&c)) {
        if (tiers_) {
          const auto cached = kv_->cached_blocks();
          tiers_->flush(cached, std::chrono::steady_clock::now() + config_.tier_flush_timeout);
          kv_->evict_cached();
          if (d->drop_host_tier) tiers_->clear_host();
        }
        d->done->set_value();
      } else {
        kv_->evict_cached();
        if (tiers_) tiers_->clear();
      }
    }
    if (stopping) {
      std::vector<RequestId> ids;
      for (const auto &[id, live] : live_) ids.push_back(id);
      for (RequestId id : ids) finish(id, FinishReason::kAbort);
      flush_tiers();
      publish_status();
      queued_submits_.fetch_sub(std::exchange(unsettled_submits_, 0));
      return;
    }
    expire_deadlines();
    publish_status();
    queued_submits_.fetch_sub(std::exchange(unsettled_submits_, 0));
    idle = !run_step();
  }
}

void Engine::admit(Submit &cmd) {
  GenerationRequest &req = cmd.request;
  auto reject = [&](const std::string &msg) {
    RequestEvent ev;
    ev.id = req.id;
    ev.finish = FinishReason::kError;
    ev.error = msg;
    deliver(cmd.sink, ev);
  };
  const std::string rid = "request " + std::to_string(req.id.value);
  if (live_.count(req.id)) return reject("engine: duplicate " + rid);
  if (req.prompt.empty()) return reject("engine: " + rid + ": prompt is empty");
  const auto n = static_cast<std::int64_t>(req.prompt.size());
  if (n >= max_model_len_)
    return reject("engine: " + rid + ": prompt of " + std::to_string(n) +
                  " tokens leaves no room to generate within the limit of " +
                  std::to_string(max_model_len_));
  for (TokenId t : req.prompt)
    if (t < 0 || t >= model_config_.vocab_size)
      return reject("engine: " + rid + ": token id " + std::to_string(t) +
                    " outside the vocabulary of " + std::to_string(model_config_.vocab_size));
  if (req.sampling.max_tokens < 0) return reject("engine: " + rid + ": max_tokens is negative");
  if (req.sampling.min_tokens < 0) return reject("engine: " + rid + ": min_tokens is negative");
  if (req.deadline && *req.deadline <= std::chrono::steady_clock::now())
    return reject("engine: " + rid + ": deadline passed before admission");
  auto live = std::make_unique<Live>();
  try {
    live->sampler = std::make_unique<RequestSampler>(req.sampling, seed_rng_());
    if (ThinkingBudget::wanted(req.sampling)) live->thinking.emplace(req.sampling);
  } catch (const std::exception &e) {
    return reject("engine: " + rid + ": " + e.what());
  }
  if (!req.sampling.constraint_kind.empty()) {
    if (!config_.make_constraint)
      return reject("engine: " + rid + ": structured output is not available in this engine");
    try {
      live->constraint = config_.make_constraint(req.sampling);
      live->end_ids = req.sampling.stop_token_ids;
      if (!req.sampling.ignore_eos)
        live->end_ids.insert(live->end_ids.end(), model_config_.eos_token_ids.begin(),
                             model_config_.eos_token_ids.end());
    } catch (const std::exception &e) {
      return reject("engine: " + rid + ": " + e.what());
    }
  }
  if (req.sampling.max_tokens == 0 && !req.sampling.prompt_logprobs) {
    RequestEvent ev;
    ev.id = req.id;
    ev.finish = FinishReason::kLength;
    deliver(cmd.sink, ev);
    return;
  }
  if (req.sampling.min_tokens > 0) {
    live->stop_ids = req.sampling.stop_token_ids;
    if (!req.sampling.ignore_eos)
      live->stop_ids.insert(live->stop_ids.end(), model_config_.eos_token_ids.begin(),
                            model_config_.eos_token_ids.end());
  }
  live->sink = std::move(cmd.sink);
  live->params = req.sampling;
  live->deadline = req.deadline;
  live->num_prompt_tokens = static_cast<std::int32_t>(n);
  if (req.sampling.prompt_logprobs) {
    live->prompt_logprobs.assign(n, std::nullopt);
    live->prompt_top.assign(n, {});
  }
  if (live->deadline) ++num_with_deadline_;
  // Prompt logprobs need a logits row for every prompt token: no prefix reuse.
  sched_->add_request(req.id, std::move(req.prompt), !req.sampling.prompt_logprobs, {}, req.group);
  prompt_tokens_ += n;
  live_.emplace(req.id, std::move(live));
}

void Engine::finish(RequestId id, FinishReason reason, std::string error) {
  auto it = live_.find(id);
  if (it == live_.end()) return;  // already finished: abort after finish is a no-op
  Live &live = *it->second;
  RequestState target = finished_state(reason);
  std::int32_t cached = 0, stored = 0;
  if (const SchedRequest *r = sched_->find(id); r != nullptr) {
    if (!is_legal_transition(r->state, target))
      target = RequestState::kFinishedAbort;  // an early stop before any output
    cached = std::max(r->num_cached_prompt_tokens, 0);
    stored = r->num_stored_prompt_tokens;
  }
  sched_->finish(id, target);
  if (drafter_) drafter_->forget(id);
  if (tiers_) tiers_->cancel_restore(id);
  RequestEvent ev = std::move(live.pending);
  ev.id = id;
  ev.finish = reason;
  ev.error = std::move(error);
  if (!live.first_event_sent) {
    ev.prompt_logprobs = std::move(live.prompt_logprobs);
    ev.prompt_top_logprobs = std::move(live.prompt_top);
    ev.cached_prompt_tokens = cached;
    ev.stored_prompt_tokens = stored;
  }
  if (live.deadline) --num_with_deadline_;
  EventSink sink = std::move(live.sink);
  live_.erase(it);
  // The request's blocks are free now: the status says so before its end is delivered,
  // so a client that saw the end never reads the blocks as still in use (issue 21).
  publish_status();
  deliver(sink, ev);
}

void Engine::expire_deadlines() {
  if (num_with_deadline_ == 0) return;
  const auto now = std::chrono::steady_clock::now();
  std::vector<RequestId> expired;
  for (const auto &[id, live] : live_)
    if (live->deadline && *live->deadline <= now) expired.push_back(id);
  for (RequestId id : expired) finish(id, FinishReason::kError, "engine: request deadline passed");
}

void Engine::clear_cache() {
  {
    std::lock_guard lk(cmd_mu_);
    commands_.push_back(ClearCache{});
  }
  cmd_cv_.notify_one();
}

std::future<void> Engine::demote_cache(bool drop_host_tier) {
  auto done = std::make_shared<std::promise<void>>();
  auto f = done->get_future();
  {
    std::lock_guard lk(cmd_mu_);
    if (stopping_) throw Error(ErrorCode::kUnavailable, "engine: stopped");
    commands_.push_back(DemoteCache{drop_host_tier, std::move(done)});
  }
  cmd_cv_.notify_one();
  return f;
}

void Engine::wake_for_tiers() {
  {
    std::lock_guard lk(cmd_mu_);
    tier_wake_ = true;
  }
  cmd_cv_.notify_one();
}

void Engine::settle_restores() {
  for (const KvTiers::RestoreDone &d : tiers_->poll()) {
    sched_->finish_loading(d.id, d.ok, (d.from_host + d.from_ssd) * block_size_);
    if (!d.ok) continue;
    restores_.fetch_add(1);
    restored_blocks_.fetch_add(d.from_host + d.from_ssd);
    restore_ns_.fetch_add(static_cast<std::int64_t>(d.seconds * 1e9));
  }
}

Engine::RestoreTotals Engine::restore_totals() const {
  return RestoreTotals{restores_.load(), restored_blocks_.load(), restore_ns_.load() * 1e-9};
}

void Engine::flush_tiers() {
  if (!tiers_ || tiers_->ssd() == nullptr) return;  // host RAM dies with the process
  try {
    const auto cached = kv_->cached_blocks();
    tiers_->flush(cached, std::chrono::steady_clock::now() + config_.tier_flush_timeout);
  } catch (const std::exception &e) {
    std::fprintf(stderr, "keel engine: flushing the KV cache to SSD failed: %s\n", e.what());
  }
}

// Where a wedged device wait or a crashing kernel would strike: inside the step, after
// the heartbeat said a step began, so the front sees a step that does not end.
void Engine::inject_step_faults() {
  if (faults_.take_crash()) {
    std::fprintf(stderr, "keel engine: fault injection: crash-engine, aborting\n");
    std::abort();
  }
  if (auto seconds = faults_.take_stall()) {
    std::fprintf(stderr, "keel engine: fault injection: stall-step for %g s\n", *seconds);
    const auto until =
        std::chrono::steady_clock::now() + std::chrono::duration<double>(std::min(*seconds, 1e9));
    while (std::chrono::steady_clock::now() < until)
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
}

bool Engine::run_step() {
  const std::int64_t start = now_ns();
  step_start_ns_.store(start);
  heartbeat_ns_.store(start);
  if (tiers_) settle_restores();
  // Backpressure: a full SSD write queue admits one new request per step.
  sched_->set_admission_limit(tiers_ && tiers_->write_backlogged() ? 1 : -1);
  StepPlan plan = sched_->schedule();
  const std::int64_t decode_before = decode_tokens_, prefill_before = prefill_tokens_;
  if (tiers_) {
    // Restores pin the host slots their lookup found before offloads may evict any.
    // Their loads start at a later poll; the saves of the blocks this plan reuses are
    // issued now, before this step's copies and forward write them.
    for (const TierLoad &l : plan.loads) tiers_->start_restore(l.id, l.blocks, l.hashes);
    const auto evicted = kv_->take_evicted();
    if (!evicted.empty()) tiers_->offload(evicted);
  }
  if (plan.empty()) {
    step_start_ns_.store(0);
    if (!plan.loads.empty()) publish_status();
    return !plan.loads.empty();  // look again at once: restores from RAM start next pass
  }
  publish_status();  // admissions and preemptions show while the step runs
  inject_step_faults();
  try {
    // Build the ragged batch: tokens, positions and block tables of every sequence.
    batch_.tokens.clear();
    batch_.seqs.clear();
    batch_.block_table.clear();
    batch_.want_hidden = drafter_ && drafter_->wants_hidden() && hidden_next_step_;
    if (batch_.want_hidden) batch_.hidden_layers = drafter_->hidden_layers();
    for (const ScheduledSeq &s : plan.seqs) {
      const SchedRequest *r = sched_->find(s.id);
      KEEL_CHECK(r != nullptr);
      const auto blocks = kv_->blocks(s.id);
      const std::int32_t end = s.start_pos + s.num_tokens;
      const auto drafts = static_cast<std::int32_t>(s.draft.size());
      const std::int32_t nb = (end + block_size_ - 1) / block_size_;
      KEEL_CHECK(static_cast<std::int32_t>(blocks.size()) >= nb && end - drafts <= r->num_tokens());
      // A shared or cached block is never written.
      for (std::int32_t b = s.start_pos / block_size_; b < nb; ++b)
        KEEL_CHECK(kv_->writable(blocks[b]));
      SequenceSlice slice;
      slice.token_offset = batch_.total_tokens();
      slice.num_tokens = s.num_tokens;
      slice.start_pos = s.start_pos;
      slice.block_offset = static_cast<std::int32_t>(batch_.block_table.size());
      slice.num_blocks = nb;
      const Live &live = *live_.at(s.id);
      if (live.params.prompt_logprobs && !live.first_event_sent &&
          s.start_pos < live.num_prompt_tokens)
        slice.logits = SequenceSlice::Logits::kAll;
      else
        slice.logits = s.samples ? SequenceSlice::Logits::kLast : SequenceSlice::Logits::kNone;
      if (drafts > 0) {  // a verify: the last accepted token's row, then each draft's
        slice.logits = SequenceSlice::Logits::kTail;
        slice.num_logits = 1 + drafts;
      }
      batch_.tokens.insert(batch_.tokens.end(), r->tokens.begin() + s.start_pos,
                           r->tokens.begin() + (end - drafts));
      batch_.tokens.insert(batch_.tokens.end(), s.draft.begin(), s.draft.end());
      for (std::int32_t b = 0; b < nb; ++b) batch_.block_table.push_back(blocks[b].value);
      batch_.seqs.push_back(slice);
      if (s.num_tokens - drafts == 1 && s.start_pos >= r->num_prompt_tokens)
        ++decode_tokens_;
      else
        prefill_tokens_ += s.num_tokens;
    }
    check_engine_thread("ModelRunner::forward");
    ModelRunner &runner = *backend_.runner;
    for (const ScheduledSeq &s : plan.seqs)
      if (s.copy) runner.kv().copy_block(s.copy->src.value, s.copy->dst.value);
    post_masks(plan);  // computed while the forward runs
    sampled_on_device_ = device_sample_rows(plan, sample_rows_);
    if (sampled_on_device_) {
      runner.forward_sample(batch_, sample_rows_, out_);  // calls finish_masks before sampling
    } else {
      runner.forward(batch_, out_);
    }
    finish_masks();
  } catch (const std::exception &e) {
    if (mask_prefetcher_) mask_prefetcher_->abandon();
    fail_step(plan, e.what());
    step_start_ns_.store(0);
    return true;
  }
  sched_->on_step_done(plan);
  if (batch_.want_hidden) observe_hidden(plan);
  emit_outputs(plan);
  if (drafter_) govern_and_propose(plan, start, decode_before, prefill_before);
  ++steps_;
  const std::int64_t end = now_ns();
  last_step_seconds_ = (end - start) * 1e-9;
  publish_status();
  step_start_ns_.store(0);
  heartbeat_ns_.store(end);
  return true;
}

void Engine::fail_step(const StepPlan &plan, const std::string &what) {
  // The blocks these requests wrote are theirs alone and were never cached, so
  // freeing them leaves the cache clean; the copy sources are unpinned.
  kv_->end_step();
  for (const ScheduledSeq &s : plan.seqs)
    finish(s.id, FinishReason::kError, std::string("engine: step failed: ") + what);
  publish_status();
}

bool Engine::device_sample_rows(const StepPlan &plan, std::vector<DeviceSampleRow> &rows) {
  rows.clear();
  if (!config_.device_sampling || !backend_.runner->samples_on_device()) return false;
  // Decided before any draw, so a step sampled on the host draws exactly as before.
  for (std::size_t i = 0; i < plan.seqs.size(); ++i) {
    const SequenceSlice::Logits want = batch_.seqs[i].logits;
    if (want == SequenceSlice::Logits::kAll) return false;
    // Drafted rows on the device: without a mask and penalties only (every row's
    // context would be the drafts before it); the CPU runner samples only such rows.
    const SamplingParams &p = live_.at(plan.seqs[i].id)->params;
    // min_tokens masks stop tokens on the host, until the request has that many.
    if (want != SequenceSlice::Logits::kNone &&
        !stops_masked(*live_.at(plan.seqs[i].id),
                      sched_->find(plan.seqs[i].id)->num_output_tokens())
             .empty())
      return false;
    if (want == SequenceSlice::Logits::kTail &&
        (step_mask_[i] != kNoMask || p.repetition_penalty != 1.0f || p.presence_penalty != 0.0f ||
         p.frequency_penalty != 0.0f))
      return false;
    if (want != SequenceSlice::Logits::kNone &&
        (!plan.seqs[i].samples || live_.at(plan.seqs[i].id)->params.logprobs > 0 ||
         !backend_.runner->samples_row_on_device(live_.at(plan.seqs[i].id)->params) ||
         (step_mask_[i] != kNoMask && !backend_.runner->masks_on_device())))
      return false;
  }
  for (std::size_t i = 0; i < plan.seqs.size(); ++i) {
    if (batch_.seqs[i].logits == SequenceSlice::Logits::kNone) continue;
    Live &live = *live_.at(plan.seqs[i].id);
    const SchedRequest *r = sched_->find(plan.seqs[i].id);
    const std::span<const TokenId> all(r->tokens);
    for (std::int32_t j = 0; j < batch_.seqs[i].num_logits; ++j) {  // 1 + drafts
      DeviceSampleRow row{&live.sampler->params(), live.sampler->draw_uniform(),
                          all.first(r->num_prompt_tokens), all.subspan(r->num_prompt_tokens)};
      if (step_mask_[i] != kNoMask) {
        // Its words are written while the forward runs; the runner reads them only after
        // calling mask_ready (the first call finishes every mask of the step).
        row.mask = live.constraint->mask_words();
        row.mask_ready = &mask_ready_;
      }
      rows.push_back(row);
    }
  }
  return true;
}

namespace {

// Fault injection (mask-error): the constraint whose compute_mask throws, as a broken
// grammar would, so that the path from the prefetcher to the client is tested served.
class FailingMask final : public OutputConstraint {
 public:
  explicit FailingMask(std::shared_ptr<OutputConstraint> inner) : inner_(std::move(inner)) {}
  bool compute_mask(std::span<const TokenId>) override {
    throw Error(ErrorCode::kInternal, "fault injection: mask-error");
  }
  std::span<const std::uint32_t> mask_words() const override { return inner_->mask_words(); }
  bool accept(TokenId token) override { return inner_->accept(token); }

 private:
  std::shared_ptr<OutputConstraint> inner_;
};

}  // namespace

void Engine::post_masks(const StepPlan &plan) {
  step_mask_.assign(plan.seqs.size(), kNoMask);
  step_mask_error_.assign(plan.seqs.size(), std::string());
  std::vector<MaskPrefetcher::Job> jobs;
  for (std::size_t i = 0; i < plan.seqs.size(); ++i) {
    const ScheduledSeq &s = plan.seqs[i];
    const Live &live = *live_.at(s.id);
    if (!s.samples || !live.constraint || live.params.max_tokens == 0) continue;
    step_mask_[i] = kMaskPending;
    std::shared_ptr<OutputConstraint> c = live.constraint;
    if (faults_.take_mask_error()) c = std::make_shared<FailingMask>(std::move(c));
    jobs.push_back(MaskPrefetcher::Job{std::move(c), live.end_ids, false, {}});
  }
  if (jobs.empty()) return;
  if (!mask_prefetcher_) mask_prefetcher_ = std::make_unique<MaskPrefetcher>();
  mask_prefetcher_->start(std::move(jobs));
}

void Engine::finish_masks() {
  const auto pending = std::find(step_mask_.begin(), step_mask_.end(), kMaskPending);
  if (pending == step_mask_.end()) return;  // none this step, or finished already
  ThreadPool *pool = backend_.context ? &backend_.context->pool() : nullptr;
  const auto &jobs =
      mask_prefetcher_->finish(pool, std::chrono::steady_clock::now() + config_.mask_timeout);
  std::size_t j = 0;
  for (std::size_t i = 0; i < step_mask_.size(); ++i) {
    if (step_mask_[i] != kMaskPending) continue;
    const MaskPrefetcher::Job &job = jobs[j++];
    if (!job.error.empty()) {
      step_mask_[i] = kMaskFailed;
      step_mask_error_[i] = job.error;
    } else {
      step_mask_[i] = job.allowed ? kMaskAllowed : kMaskDeadEnd;
    }
  }
}

void Engine::finish_mask_failure(RequestId id, const std::string &error) {
  std::string why =
      error.empty()
          ? std::string(
                "engine: structured output reached a dead end: no token of the "
                "vocabulary continues the document")
          : "engine: structured output failed: computing the mask of allowed tokens threw: " +
                error;
  std::fprintf(stderr, "keel engine: request %llu: %s\n", static_cast<unsigned long long>(id.value),
               why.c_str());
  finish(id, FinishReason::kError, std::move(why));
}

// The rows of a step are independent (each request samples once, with its own sampler
// and RNG), so they are sampled up front, in parallel on the engine's pool; the caller
// then emits them in row order.
std::vector<SampledToken> Engine::sample_host_rows(const StepPlan &plan) {
  const std::size_t rows = out_.row_seq.size();
  std::vector<SampledToken> sampled(sampled_on_device_ ? 0 : rows);
  if (sampled_on_device_) return sampled;
  const std::int32_t vocab = out_.vocab_size;
  struct Job {
    std::size_t row;
    RequestSampler *sampler;
    const OutputConstraint *constraint;  // its mask applies first, when set
    std::span<const TokenId> prompt, generated;
    std::span<const TokenId> masked_stops;  // min_tokens not reached: masked next
  };
  std::vector<Job> jobs;
  for (std::size_t i = 0; i < rows; ++i) {
    const ScheduledSeq &s = plan.seqs[out_.row_seq[i]];
    auto it = live_.find(s.id);
    if (it == live_.end() || !s.samples || out_.row_pos[i] != s.start_pos + s.num_tokens - 1 ||
        it->second->params.max_tokens == 0 || !s.draft.empty())  // drafted: emit_verified
      continue;
    // The mask (computed during the forward: finish_masks) applies to the row in place,
    // which is not read again.
    Live &live = *it->second;
    if (step_mask_[out_.row_seq[i]] == kMaskDeadEnd || step_mask_[out_.row_seq[i]] == kMaskFailed) {
      sampled[i].token = -1;  // emit_outputs finishes the request with an error
      continue;
    }
    const SchedRequest *r = sched_->find(s.id);
    const std::span<const TokenId> all(r->tokens);
    jobs.push_back(
        Job{i, live.sampler.get(),
            step_mask_[out_.row_seq[i]] == kMaskAllowed ? live.constraint.get() : nullptr,
            all.first(r->num_prompt_tokens), all.subspan(r->num_prompt_tokens),
            stops_masked(live, r->num_output_tokens())});
  }
  // One row: its passes split over the pool; more: rows spread over it.
  ThreadPool *pool = backend_.context ? &backend_.context->pool() : nullptr;
  const auto n = static_cast<std::int64_t>(jobs.size());
  auto run = [&](std::int64_t begin, std::int64_t end) {
    for (std::int64_t j = begin; j < end; ++j) {
      const Job &job = jobs[j];
      const std::span<float> row(out_.logits.data() + job.row * vocab, vocab);
      if (job.constraint) apply_token_mask(row, job.constraint->mask_words());
      if (!job.masked_stops.empty()) mask_stop_tokens(row, job.masked_stops);
      const std::span<const float> logits(row);
      sampled[job.row] =
          job.sampler->sample(logits, job.prompt, job.generated, n == 1 ? pool : nullptr);
    }
  };
  if (pool && n > 1)
    pool->parallel_for(n, run);
  else
    run(0, n);
  return sampled;
}

void Engine::emit_outputs(const StepPlan &plan) {
  const std::int32_t vocab = out_.vocab_size;
  const std::size_t rows = out_.row_seq.size();
  auto bad_output = [&](const std::string &why) {
    for (const ScheduledSeq &s : plan.seqs)
      finish(s.id, FinishReason::kError, "engine: runner output " + why);
  };
  if (vocab != model_config_.vocab_size || out_.row_pos.size() != rows)
    return bad_output("has the wrong shape");
  if (sampled_on_device_) {
    if (out_.sampled.size() != rows || out_.sampled_logprobs.size() != rows)
      return bad_output("has the wrong shape");
    for (TokenId t : out_.sampled)
      if (t < 0 || t >= vocab) return bad_output("sampled a token outside the vocabulary");
  } else if (out_.logits.size() != rows * static_cast<std::size_t>(vocab)) {
    return bad_output("has the wrong shape");
  }
  // Every sequence that must sample needs its row, or it would never be scheduled
  // again (all its tokens computed, none to sample): a phantom running request.
  std::vector<std::uint8_t> has_sample_row(plan.seqs.size(), 0);
  for (std::size_t i = 0; i < rows; ++i) {
    const std::int32_t si = out_.row_seq[i];
    if (si < 0 || si >= static_cast<std::int32_t>(plan.seqs.size()))
      return bad_output("names a sequence outside the batch");
    const ScheduledSeq &s = plan.seqs[si];
    if (out_.row_pos[i] == s.start_pos + s.num_tokens - 1) has_sample_row[si] = 1;
  }
  for (std::size_t si = 0; si < plan.seqs.size(); ++si)
    if (plan.seqs[si].samples && !has_sample_row[si])
      finish(plan.seqs[si].id, FinishReason::kError, "engine: runner returned no logits row");
  std::vector<SampledToken> host_samples = sample_host_rows(plan);
  for (std::size_t i = 0; i < rows; ++i) {
    const ScheduledSeq &s = plan.seqs[out_.row_seq[i]];
    const std::int32_t pos = out_.row_pos[i];
    auto it = live_.find(s.id);
    if (it == live_.end()) continue;  // finished earlier in this loop
    Live &live = *it->second;
    const std::span<const float> logits =
        sampled_on_device_ ? std::span<const float>()
                           : std::span<const float>(out_.logits.data() + i * vocab, vocab);
    const SchedRequest *r = sched_->find(s.id);
    if (!sampled_on_device_ && live.params.prompt_logprobs && !live.first_event_sent &&
        pos + 1 < live.num_prompt_tokens && pos >= 0) {
      const TokenId next = r->tokens[pos + 1];
      SampledToken lp = logprob_of(logits, next, std::max(live.params.logprobs, 0));
      live.prompt_logprobs[pos + 1] = TokenLogprob{next, lp.logprob};
      live.prompt_top[pos + 1] = lp.top;
    }
    if (!s.draft.empty()) {
      if (pos == s.start_pos) emit_verified(plan, out_.row_seq[i], i);
      continue;
    }
    if (!s.samples || pos != s.start_pos + s.num_tokens - 1) continue;
    if (live.params.max_tokens == 0) {  // prompt logprobs only
      finish(s.id, FinishReason::kLength);
      continue;
    }
    const std::span<const TokenId> all(r->tokens);
    SampledToken t;
    if (sampled_on_device_) {
      if (step_mask_[out_.row_seq[i]] == kMaskDeadEnd ||
          step_mask_[out_.row_seq[i]] == kMaskFailed) {
        finish_mask_failure(s.id, step_mask_error_[out_.row_seq[i]]);
        continue;
      }
      t.token = out_.sampled[i];
      t.logprob = out_.sampled_logprobs[i];
    } else {
      t = std::move(host_samples[i]);
      if (t.token < 0) {  // the row's constraint left no token (sample_host_rows)
        finish_mask_failure(s.id, step_mask_error_[out_.row_seq[i]]);
        continue;
      }
    }
    take_token(s, live, std::move(t), false);
  }
  // One event per request that produced output this step.
  for (const ScheduledSeq &s : plan.seqs) {
    auto it = live_.find(s.id);
    if (it == live_.end() || it->second->pending.tokens.empty()) continue;
    Live &live = *it->second;
    RequestEvent ev = std::move(live.pending);
    live.pending = RequestEvent{};
    ev.id = s.id;
    if (!live.first_event_sent) {
      ev.prompt_logprobs = std::move(live.prompt_logprobs);
      ev.prompt_top_logprobs = std::move(live.prompt_top);
      const SchedRequest *r = sched_->find(s.id);
      ev.cached_prompt_tokens = std::max(r->num_cached_prompt_tokens, 0);
      ev.stored_prompt_tokens = r->num_stored_prompt_tokens;
      live.first_event_sent = true;
    }
    deliver(live.sink, ev);
  }
}

bool Engine::take_token(const ScheduledSeq &s, Live &live, SampledToken t, bool kv_computed) {
  if (live.thinking) t.token = live.thinking->choose(t.token);  // may close the block
  if (live.sampler->is_stop_token(t.token, model_config_.eos_token_ids)) {
    finish(s.id, FinishReason::kStop);
    return false;
  }
  if (live.constraint) {
    // Its mask allowed the token, so a refusal (or a throw) is a grammar bug: said, and
    // logged, with the token.
    std::string error;
    try {
      if (!live.constraint->accept(t.token))
        error = "sampled token " + std::to_string(t.token) +
                " is one the structured output forbids (its mask allowed it)";
    } catch (const std::exception &e) {
      error = "advancing on sampled token " + std::to_string(t.token) + " threw: " + e.what();
    }
    if (!error.empty()) {
      error = "engine: structured output failed: " + error;
      std::fprintf(stderr, "keel engine: request %llu: %s\n",
                   static_cast<unsigned long long>(s.id.value), error.c_str());
      finish(s.id, FinishReason::kError, std::move(error));
      return false;
    }
  }
  sched_->append_token(s.id, t.token, kv_computed);
  live.pending.tokens.push_back(t.token);
  if (live.params.logprobs >= 0) {
    live.pending.sampled_logprobs.push_back(TokenLogprob{t.token, t.logprob});
    live.pending.top_logprobs.push_back(std::move(t.top));
  }
  const SchedRequest *r = sched_->find(s.id);
  if (r->num_output_tokens() >= live.params.max_tokens || r->num_tokens() >= max_model_len_) {
    finish(s.id, FinishReason::kLength);
    return false;
  }
  return true;
}

void Engine::emit_verified(const StepPlan &plan, std::size_t si, std::size_t first_row) {
  const ScheduledSeq &s = plan.seqs[si];
  Live &live = *live_.at(s.id);
  const auto k = static_cast<std::int32_t>(s.draft.size());
  const std::int32_t vocab = out_.vocab_size;
  if (first_row + k >= out_.row_seq.size() ||
      out_.row_seq[first_row + k] != out_.row_seq[first_row] ||
      out_.row_pos[first_row + k] != s.start_pos + k) {
    finish(s.id, FinishReason::kError, "engine: runner returned too few verify rows");
    return;
  }
  ThreadPool *pool = backend_.context ? &backend_.context->pool() : nullptr;
  std::int32_t accepted = 0;
  bool live_on = true;
  // Counted as they happen: a finish inside take_token publishes the status, whose
  // counters must agree with each other then.
  ++spec_steps_;
  spec_drafted_ += k;
  for (std::int32_t j = 0; j <= k && live_on; ++j) {
    const std::size_t row = first_row + j;
    SampledToken t;
    if (sampled_on_device_) {
      t.token = out_.sampled[row];
      t.logprob = out_.sampled_logprobs[row];
    } else {
      const std::span<float> logits(out_.logits.data() + row * vocab, vocab);
      if (live.constraint) {
        // Row 0's mask was made during the forward; a later row's only now, after the
        // drafts before it were accepted (one mask per drafted position).
        bool allowed = false;
        std::string error = j == 0 ? step_mask_error_[si] : std::string();
        if (j == 0) {
          allowed = step_mask_[si] == kMaskAllowed;
        } else {
          try {
            allowed = live.constraint->compute_mask(live.end_ids);
          } catch (const std::exception &e) {
            error = *e.what() ? e.what() : "an exception without a message";
          }
        }
        if (!allowed) {
          finish_mask_failure(s.id, error);
          live_on = false;
          break;
        }
        apply_token_mask(logits, live.constraint->mask_words());
      }
      const SchedRequest *r = sched_->find(s.id);
      // Row j follows the drafts before it: a drafted stop token before min_tokens is
      // masked here, so it is never sampled and never accepted.
      if (auto stops = stops_masked(live, r->num_output_tokens()); !stops.empty())
        mask_stop_tokens(logits, stops);
      const std::span<const TokenId> all(r->tokens);
      t = live.sampler->sample(logits, all.first(r->num_prompt_tokens),
                               all.subspan(r->num_prompt_tokens), pool);
    }
    // (No drafts with a thinking budget, which may replace the token: propose_drafts.)
    const bool match = j < k && t.token == s.draft[j];
    live_on = take_token(s, live, std::move(t), match);
    if (!match) break;
    ++accepted;
    ++spec_accepted_;
    ++spec_accepted_at_[j];
    ++decode_tokens_;  // tokens generated by decode steps, drafts included
  }
  if (!live_on) return;  // finished: `live` is gone, its blocks freed
  live.spec.record(k, accepted);
  sched_->settle_drafts(s.id);
}

void Engine::observe_hidden(const StepPlan &plan) {
  const auto width = static_cast<std::size_t>(model_config_.hidden_size) *
                     std::max<std::size_t>(1, batch_.hidden_layers.size());
  if (out_.hidden.size() != static_cast<std::size_t>(batch_.total_tokens()) * width) return;
  for (std::size_t i = 0; i < plan.seqs.size(); ++i) {
    const SequenceSlice &slice = batch_.seqs[i];
    const SchedRequest *r = sched_->find(plan.seqs[i].id);
    if (r == nullptr) continue;
    drafter_->observe_hidden(
        plan.seqs[i].id, r->tokens, slice.start_pos, slice.num_tokens,
        std::span<const float>(out_.hidden.data() + slice.token_offset * width,
                               static_cast<std::size_t>(slice.num_tokens) * width));
  }
}

void Engine::govern_and_propose(const StepPlan &plan, std::int64_t start_ns,
                                std::int64_t decode_before, std::int64_t prefill_before) {
  const SpeculativeConfig &sc = config_.speculative;
  // A decode-only step (prefill rows would swamp its time) in a mode the governor chose.
  const bool verified = std::any_of(plan.seqs.begin(), plan.seqs.end(),
                                    [](const ScheduledSeq &s) { return !s.draft.empty(); });
  if (step_drafting_ && prefill_tokens_ == prefill_before)
    governor_.record_step(step_running_, *step_drafting_, verified, (now_ns() - start_ns) * 1e-9,
                          static_cast<std::int32_t>(decode_tokens_ - decode_before));
  step_drafting_.reset();
  const std::int32_t running = sched_->num_running();
  // No running sequence: the next step admits new ones, which may draft.
  hidden_next_step_ = running == 0;
  if (running == 0 || (sc.max_running > 0 && running >= sc.max_running)) return;
  if (sc.adaptive) {
    step_drafting_ = governor_.should_draft(running);
    step_running_ = running;
    if (!*step_drafting_) return;
  }
  hidden_next_step_ = true;
  const std::int64_t t0 = now_ns();
  if (propose_drafts(plan) > 0 && sc.adaptive)
    governor_.record_proposal(running, (now_ns() - t0) * 1e-9);
}

int Engine::propose_drafts(const StepPlan &plan) {
  const SpeculativeConfig &sc = config_.speculative;
  // Every running sequence may ask for a row next step; drafts take only the rows left.
  const std::int32_t max_rows = backend_.runner->max_logits_rows();
  std::int32_t rows_left =
      max_rows > 0 ? max_rows - sched_->num_running() : std::numeric_limits<std::int32_t>::max();
  std::vector<TokenId> draft;
  int drafted = 0;
  for (const ScheduledSeq &s : plan.seqs) {
    if (!s.samples) continue;
    auto it = live_.find(s.id);
    if (it == live_.end()) continue;
    Live &live = *it->second;
    // A thinking budget may write other tokens than the sampled ones: no drafts.
    if (!live.params.speculative || live.thinking || !live.spec.should_draft()) continue;
    const SchedRequest *r = sched_->find(s.id);
    if (r == nullptr || r->state != RequestState::kRunning ||
        r->num_tokens() - r->num_computed_tokens != 1)
      continue;
    // Never past max_tokens or the context: k drafts may emit k + 1 tokens.
    const std::int32_t room = std::min(live.params.max_tokens - r->num_output_tokens(),
                                       max_model_len_ - r->num_tokens()) -
                              1;
    const std::int32_t k = std::min({sc.num_speculative_tokens, room, rows_left});
    if (k <= 0) continue;
    draft.clear();
    drafter_->propose(s.id, r->tokens, k, draft);
    if (static_cast<std::int32_t>(draft.size()) > k) draft.resize(k);
    if (!draft.empty()) {
      rows_left -= static_cast<std::int32_t>(draft.size());
      sched_->set_draft(s.id, draft);
      ++drafted;
    }
  }
  return drafted;
}

void Engine::publish_status() {
  EngineStatus s;
  s.running = sched_->num_running();
  s.waiting = sched_->num_waiting();
  s.preempted = sched_->num_preempted();
  s.loading_cache = sched_->num_loading();
  const BlockPool &pool = kv_->pool();
  s.kv_blocks_total = pool.num_blocks();
  s.kv_blocks_used = pool.num_used();
  s.kv_blocks_cached = pool.num_cached();
  s.prefix_hit_tokens = kv_->stats().hit_tokens + kv_->stats().restored_tokens;
  s.restored_tokens = kv_->stats().restored_tokens;
  if (tiers_) {
    auto put = [](KvTierStatus &o, const TierStats &t) {
      o.capacity_bytes = t.capacity_bytes;
      o.used_bytes = t.used_bytes;
      o.blocks = t.blocks;
      o.hit_blocks = t.hit_blocks;
      o.stored_blocks = t.stored_blocks;
      o.errors = t.errors;
      o.pending = t.pending;
    };
    put(s.host_tier, tiers_->host_stats());
    put(s.ssd_tier, tiers_->ssd_stats());
  }
  s.prompt_tokens = prompt_tokens_;
  s.prefill_tokens = prefill_tokens_;
  s.decode_tokens = decode_tokens_;
  s.steps = steps_;
  s.last_step_seconds = last_step_seconds_;
  if (drafter_) {
    s.spec_method = drafter_->name();
    s.spec_steps = spec_steps_;
    s.spec_drafted = spec_drafted_;
    s.spec_accepted = spec_accepted_;
    s.spec_accepted_at = spec_accepted_at_;
    if (config_.speculative.adaptive) {
      const std::int32_t running = std::max<std::int32_t>(sched_->num_running(), 1);
      s.spec_paused = governor_.paused(running);
      s.spec_speedup = governor_.speedup(running).value_or(0.0);
    }
    s.spec_draft_weights_bytes = drafter_->weights_bytes();
    s.spec_draft_kv_bytes = drafter_->kv_bytes();
  }
  std::lock_guard lk(status_mu_);
  snapshot_ = s;
}

}  // namespace keel
