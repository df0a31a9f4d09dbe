// /health, /api/status and /metrics: liveness and load, from the engines' own reports.
#include <algorithm>
#include <cstdio>
#include <sstream>

#include "server/api_server.h"

namespace keel::server {

using json = nlohmann::ordered_json;

namespace {

// A loaded engine is healthy while it answers and its step in progress is younger than
// the deadline. Returns the reason when it is not.
std::string problem_of(const ModelReport &r, double heartbeat_limit_s) {
  const double step_deadline_s = r.step_deadline_seconds;
  switch (r.state) {
    case ModelState::kStalled:
      return "stalled: " + r.last_error;
    case ModelState::kRestarting:
      return "restarting after: " + r.last_error;
    case ModelState::kReady: {
      if (!r.engine) return "";
      const double step_age = r.engine->step_in_progress_seconds > 0
                                  ? r.engine->step_in_progress_seconds + r.heartbeat_age_seconds
                                  : 0.0;
      char buf[200];
      if (step_age > step_deadline_s) {
        std::snprintf(buf, sizeof buf,
                      "stalled: engine pid %lld has been in one step for %.1f s (deadline %.1f s)",
                      static_cast<long long>(r.pid), step_age, step_deadline_s);
        return buf;
      }
      // A reader thread, not the step, takes the engine's frames: one that takes nothing
      // for half a second while frames wait is stopped or swapped out (issue 24).
      if (r.ipc_blocked_seconds > std::min(0.5, heartbeat_limit_s)) {
        std::snprintf(buf, sizeof buf,
                      "stalled: engine pid %lld has not read its socket for %.1f s (%zu frames "
                      "waiting)",
                      static_cast<long long>(r.pid), r.ipc_blocked_seconds, r.ipc_queued_frames);
        return buf;
      }
      if (r.heartbeat_age_seconds > heartbeat_limit_s) {
        std::snprintf(buf, sizeof buf, "engine pid %lld: no heartbeat for %.1f s",
                      static_cast<long long>(r.pid), r.heartbeat_age_seconds);
        return buf;
      }
      return "";
    }
    default:
      return "";
  }
}

double ratio(double a, double b) { return b > 0 ? a / b : 0.0; }

}  // namespace

std::pair<double, double> ApiServer::rates(const std::string &model, const EngineStatus &s) {
  std::lock_guard lock(rates_mu_);
  auto now = std::chrono::steady_clock::now();
  auto &r = rates_[model];
  const double dt = std::chrono::duration<double>(now - r.at).count();
  if (r.at.time_since_epoch().count() == 0 || s.prefill_tokens < r.prefill ||
      s.decode_tokens < r.decode) {
    r = {now, s.prefill_tokens, s.decode_tokens, 0, 0};
  } else if (dt >= 1.0) {
    r.prefill_rate = (s.prefill_tokens - r.prefill) / dt;
    r.decode_rate = (s.decode_tokens - r.decode) / dt;
    r.at = now;
    r.prefill = s.prefill_tokens;
    r.decode = s.decode_tokens;
  }
  return {r.prefill_rate, r.decode_rate};
}

void ApiServer::handle_health(const std::shared_ptr<ResponseChannel> &ch) {
  json problems = json::array(), models = json::array();
  bool loading = false;
  for (const auto &r : registry_.report()) {
    loading = loading || r.state == ModelState::kLoading || r.state == ModelState::kRestarting;
    if (r.state == ModelState::kAvailable) continue;
    const std::string why = problem_of(r, options_.heartbeat_timeout.count() / 2000.0);
    models.push_back({{"id", r.id}, {"state", model_state_name(r.state)}});
    if (!why.empty()) {
      json p{{"model", r.id}, {"state", model_state_name(r.state)}, {"reason", why}};
      if (r.engine) {
        p["pid"] = r.pid;
        p["step_age_seconds"] = r.engine->step_in_progress_seconds > 0
                                    ? r.engine->step_in_progress_seconds + r.heartbeat_age_seconds
                                    : 0.0;
      }
      p["step_deadline_seconds"] = r.step_deadline_seconds;
      problems.push_back(std::move(p));
    }
  }
  // The handler pool: requests wait and no worker has taken one within the deadline
  // (longer while a model loads or restarts: handlers wait for it up to --load-timeout).
  auto deadline = options_.worker_deadline;
  if (loading && deadline.count() > 0) deadline = std::max(deadline, options_.load_timeout);
  if (auto stall = worker_watch_.stalled(deadline)) {
    char buf[200];
    std::snprintf(buf, sizeof buf,
                  "stalled: no request handler took a request for %.1f s while %zu wait "
                  "(--workers %d, deadline %.1f s)",
                  stall->seconds, stall->waiting, std::max(1, options_.workers),
                  deadline.count() / 1000.0);
    problems.push_back({{"component", "workers"},
                        {"reason", buf},
                        {"waiting", stall->waiting},
                        {"stalled_seconds", stall->seconds},
                        {"deadline_seconds", deadline.count() / 1000.0}});
  }
  if (problems.empty())
    ch->send(200, "application/json", json{{"status", "ok"}, {"models", models}}.dump());
  else
    ch->send(503, "application/json",
             json{{"status", "unhealthy"}, {"problems", problems}, {"models", models}}.dump());
}

void ApiServer::handle_status(const std::shared_ptr<ResponseChannel> &ch) {
  json models = json::array();
  std::int64_t running = 0, waiting = 0, preempted = 0, loading = 0;
  double prefill_tps = 0, decode_tps = 0;
  for (const auto &r : registry_.report()) {
    json m{{"id", r.id},
           {"state", model_state_name(r.state)},
           {"pinned", r.pinned},
           {"memory_bytes", r.memory_bytes},
           {"pid", r.pid},
           {"restarts", r.restarts},
           {"last_error", r.last_error.empty() ? json(nullptr) : json(r.last_error)},
           {"context_length", r.context_length},
           {"active_requests", r.leases},
           {"step_deadline_seconds", r.step_deadline_seconds},
           {"idle_ttl_seconds", r.idle_ttl.count() / 1000.0}};
    json history = json::array();
    for (const auto &[st, ago] : r.history)
      history.push_back({{"state", model_state_name(st)}, {"seconds_ago", ago}});
    m["history"] = std::move(history);
    // Load progress (issue 22): while the engine loads, null otherwise.
    if (r.progress) {
      const LoadProgress &p = r.progress->latest;
      const auto f = p.fraction();
      m["progress"] = {{"phase", p.phase},
                       {"done", p.done},
                       {"total", p.total},
                       {"unit", p.unit},
                       {"fraction", f ? json(*f) : json(nullptr)},
                       {"elapsed_seconds", r.progress->elapsed_seconds},
                       {"phase_elapsed_seconds", r.progress->phase_elapsed_seconds},
                       {"started_at", r.progress->started_at}};
    } else {
      m["progress"] = nullptr;
    }
    // Memory by part (issue 21): planned before load, as allocated once loaded; the
    // parts add up to memory_bytes' total.
    const ModelMemoryPlan &mem = r.memory;
    m["memory"] = {
        {"weights_bytes", mem.weights_bytes},
        {"kv_pool_bytes", mem.kv_bytes},
        {"workspace_bytes", mem.workspace_bytes},
        {"host_tier_bytes", mem.host_tier_bytes},
        {"total_bytes", mem.total_bytes()},
        {"share", r.memory_fraction},
        {"kv_rule", mem.rule},
        {"weights_format", r.weights_format.empty() ? json(nullptr) : json(r.weights_format)},
        {"planned", r.engine ? false : true}};
    const std::int64_t block_size = r.kv_block_size > 0 ? r.kv_block_size
                                    : mem.kv_blocks > 0 ? mem.kv_tokens / mem.kv_blocks
                                                        : 0;
    const std::int64_t pool_blocks = r.engine ? r.engine->kv_blocks_total : mem.kv_blocks;
    // Bytes a cached token takes (all layers): MLA's latent row makes it small.
    const std::int64_t pool_tokens = pool_blocks * block_size;
    m["kv_pool"] = {{"blocks", pool_blocks},
                    {"block_size", block_size},
                    {"bytes_per_token", pool_tokens > 0 ? mem.kv_bytes / pool_tokens : 0},
                    {"tokens", pool_blocks * block_size},
                    {"used_blocks", r.engine ? r.engine->kv_blocks_used : 0},
                    {"cached_blocks", r.engine ? r.engine->kv_blocks_cached : 0},
                    {"max_sequence_tokens", r.context_length}};
    if (r.engine) {
      const auto &s = *r.engine;
      auto [pre, dec] = rates(r.id, s);
      m["running"] = s.running;
      m["waiting"] = s.waiting;
      m["preempted"] = s.preempted;
      m["loading_cache"] = s.loading_cache;
      m["step_in_progress_seconds"] = s.step_in_progress_seconds;
      // The age /health compares with step_deadline_seconds (the dashboard's liveness).
      m["step_age_seconds"] = s.step_in_progress_seconds > 0
                                  ? s.step_in_progress_seconds + r.heartbeat_age_seconds
                                  : 0.0;
      m["last_step_seconds"] = s.last_step_seconds;
      m["heartbeat_age_seconds"] = r.heartbeat_age_seconds;
      m["steps"] = s.steps;
      m["prefill_tokens_per_second"] = pre;
      m["decode_tokens_per_second"] = dec;
      m["kv_blocks"] = {
          {"total", s.kv_blocks_total}, {"used", s.kv_blocks_used}, {"cached", s.kv_blocks_cached}};
      m["kv_usage"] =
          ratio(static_cast<double>(s.kv_blocks_used), static_cast<double>(s.kv_blocks_total));
      m["prefix_cache_hit_rate"] =
          ratio(static_cast<double>(s.prefix_hit_tokens), static_cast<double>(s.prompt_tokens));
      auto tier = [](const KvTierStatus &t) {
        return json{{"capacity_bytes", t.capacity_bytes},
                    {"used_bytes", t.used_bytes},
                    {"blocks", t.blocks},
                    {"hit_blocks", t.hit_blocks},
                    {"stored_blocks", t.stored_blocks},
                    {"errors", t.errors},
                    {"pending_stores", t.pending}};
      };
      m["tiers"] = {{"device_blocks_used", s.kv_blocks_used},
                    {"device_blocks_cached", s.kv_blocks_cached},
                    {"host", tier(s.host_tier)},
                    {"ssd", tier(s.ssd_tier)}};
      m["restored_tokens"] = s.restored_tokens;
      // Speculative decoding: null when the engine has no drafter. acceptance_length is
      // the tokens a verify step emits on average (accepted drafts + the target's own).
      m["speculative"] =
          s.spec_method.empty()
              ? json(nullptr)
              : json{{"method", s.spec_method},
                     {"verify_steps", s.spec_steps},
                     {"drafted_tokens", s.spec_drafted},
                     {"accepted_tokens", s.spec_accepted},
                     {"acceptance_rate", ratio(static_cast<double>(s.spec_accepted),
                                               static_cast<double>(s.spec_drafted))},
                     {"acceptance_length", s.spec_steps > 0
                                               ? 1.0 + static_cast<double>(s.spec_accepted) /
                                                           static_cast<double>(s.spec_steps)
                                               : 0.0},
                     {"accepted_per_position", s.spec_accepted_at},
                     // --speculative-adaptive: drafting paused at the batch
                     // size now running because it measured slower, and
                     // its measured speed-up there (null: not yet known).
                     {"paused", s.spec_paused},
                     {"speedup", s.spec_speedup > 0.0 ? json(s.spec_speedup) : json(nullptr)},
                     {"draft_weights_bytes", s.spec_draft_weights_bytes},
                     {"draft_kv_bytes", s.spec_draft_kv_bytes}};
      running += s.running;
      waiting += s.waiting;
      preempted += s.preempted;
      loading += s.loading_cache;
      prefill_tps += pre;
      decode_tps += dec;
    } else {
      m["running"] = 0;
      m["waiting"] = 0;
      m["preempted"] = 0;
      m["loading_cache"] = 0;
    }
    models.push_back(std::move(m));
  }
  json totals{{"running", running},
              {"waiting", waiting},
              {"preempted", preempted},
              {"loading_cache", loading},
              {"prefill_tokens_per_second", prefill_tps},
              {"decode_tokens_per_second", decode_tps},
              {"memory_bytes", registry_.memory_in_use()},
              {"memory_budget_bytes", registry_.memory_budget()},
              {"generations", generations_started_.load()},
              {"client_aborts", client_aborts_.load()}};
  // Generations that finished with 200 in the last window (the dashboard's latency chart).
  const LatencySummary lat = latency_->summary();
  totals["latency"] = {{"window_seconds", latency_->window().count()},
                       {"requests", lat.requests},
                       {"ttft_ms", {{"p50", lat.ttft_p50_ms}, {"p90", lat.ttft_p90_ms}}},
                       {"e2e_ms", {{"p50", lat.e2e_p50_ms}, {"p90", lat.e2e_p90_ms}}}};
  if (http_counters_)
    totals["http"] = {{"open_connections", http_counters_->open_connections.load()},
                      {"requests", http_counters_->requests.load()},
                      {"disconnects", http_counters_->disconnects.load()},
                      {"dropped_slow", http_counters_->dropped_slow.load()},
                      {"refused", http_counters_->refused.load()},
                      {"accept_errors", http_counters_->accept_errors.load()},
                      {"waiting_for_worker", worker_watch_.waiting()}};
  ch->send(200, "application/json", json{{"models", models}, {"totals", totals}}.dump());
}

void ApiServer::handle_metrics(const std::shared_ptr<ResponseChannel> &ch) {
  std::ostringstream o;
  auto family = [&](const char *name, const char *type, const char *help) {
    o << "# HELP " << name << ' ' << help << "\n# TYPE " << name << ' ' << type << '\n';
  };
  const auto reports = registry_.report();
  auto per_model = [&](const char *name, const char *type, const char *help, auto value) {
    family(name, type, help);
    for (const auto &r : reports) o << name << "{model=\"" << r.id << "\"} " << value(r) << '\n';
  };
  auto eng = [](const ModelReport &r, auto f) -> double {
    return r.engine ? static_cast<double>(f(*r.engine)) : 0.0;
  };
  per_model("keel_model_loaded", "gauge", "1 while the model has a ready engine",
            [](const ModelReport &r) { return r.state == ModelState::kReady ? 1 : 0; });
  per_model(
      "keel_model_memory_bytes", "gauge", "memory held by the model's engine",
      [](const ModelReport &r) { return r.state == ModelState::kAvailable ? 0 : r.memory_bytes; });
  per_model("keel_engine_restarts_total", "counter", "engine restarts after a death or stall",
            [](const ModelReport &r) { return r.restarts; });
  per_model("keel_requests_running", "gauge", "requests running in the engine",
            [&](const ModelReport &r) {
              return eng(r, [](const EngineStatus &s) { return s.running; });
            });
  per_model("keel_requests_waiting", "gauge", "requests waiting for admission",
            [&](const ModelReport &r) {
              return eng(r, [](const EngineStatus &s) { return s.waiting; });
            });
  per_model("keel_requests_preempted", "gauge", "requests preempted", [&](const ModelReport &r) {
    return eng(r, [](const EngineStatus &s) { return s.preempted; });
  });
  per_model("keel_requests_loading_cache", "gauge", "requests waiting for KV blocks to load",
            [&](const ModelReport &r) {
              return eng(r, [](const EngineStatus &s) { return s.loading_cache; });
            });
  per_model("keel_step_in_progress_seconds", "gauge",
            "age of the engine step in progress (0 when idle)", [&](const ModelReport &r) {
              return eng(r, [](const EngineStatus &s) { return s.step_in_progress_seconds; });
            });
  per_model("keel_last_step_seconds", "gauge", "duration of the last engine step",
            [&](const ModelReport &r) {
              return eng(r, [](const EngineStatus &s) { return s.last_step_seconds; });
            });
  per_model("keel_heartbeat_age_seconds", "gauge", "seconds since the engine last reported",
            [](const ModelReport &r) { return r.heartbeat_age_seconds; });
  per_model("keel_engine_steps_total", "counter", "engine steps", [&](const ModelReport &r) {
    return eng(r, [](const EngineStatus &s) { return s.steps; });
  });
  per_model("keel_prefill_tokens_total", "counter", "prompt tokens computed",
            [&](const ModelReport &r) {
              return eng(r, [](const EngineStatus &s) { return s.prefill_tokens; });
            });
  per_model("keel_decode_tokens_total", "counter", "tokens generated", [&](const ModelReport &r) {
    return eng(r, [](const EngineStatus &s) { return s.decode_tokens; });
  });
  per_model("keel_spec_verify_steps_total", "counter",
            "speculative decoding: sequence steps that verified drafts", [&](const ModelReport &r) {
              return eng(r, [](const EngineStatus &s) { return s.spec_steps; });
            });
  per_model("keel_spec_drafted_tokens_total", "counter", "speculative decoding: drafts verified",
            [&](const ModelReport &r) {
              return eng(r, [](const EngineStatus &s) { return s.spec_drafted; });
            });
  per_model("keel_spec_accepted_tokens_total", "counter", "speculative decoding: drafts accepted",
            [&](const ModelReport &r) {
              return eng(r, [](const EngineStatus &s) { return s.spec_accepted; });
            });
  per_model("keel_spec_acceptance_length", "gauge",
            "speculative decoding: tokens per verify step (1 + accepted drafts), since start",
            [&](const ModelReport &r) {
              return eng(r, [](const EngineStatus &s) {
                return s.spec_steps > 0 ? 1.0 + static_cast<double>(s.spec_accepted) /
                                                    static_cast<double>(s.spec_steps)
                                        : 0.0;
              });
            });
  per_model("keel_spec_paused", "gauge",
            "speculative decoding: 1 where --speculative-adaptive measured drafting slower at "
            "the batch size running and paused it",
            [&](const ModelReport &r) {
              return eng(r, [](const EngineStatus &s) { return s.spec_paused ? 1.0 : 0.0; });
            });
  per_model("keel_spec_measured_speedup", "gauge",
            "speculative decoding: seconds a token without drafts over with them, as "
            "--speculative-adaptive measured at the batch size running (0: not measured)",
            [&](const ModelReport &r) {
              return eng(r, [](const EngineStatus &s) { return s.spec_speedup; });
            });
  per_model("keel_prompt_tokens_total", "counter", "prompt tokens submitted",
            [&](const ModelReport &r) {
              return eng(r, [](const EngineStatus &s) { return s.prompt_tokens; });
            });
  per_model("keel_prefix_cache_hit_tokens_total", "counter",
            "prompt tokens served from the prefix cache", [&](const ModelReport &r) {
              return eng(r, [](const EngineStatus &s) { return s.prefix_hit_tokens; });
            });
  per_model("keel_kv_blocks_used", "gauge", "KV blocks in use", [&](const ModelReport &r) {
    return eng(r, [](const EngineStatus &s) { return s.kv_blocks_used; });
  });
  per_model("keel_kv_blocks_total", "gauge", "KV blocks in the pool", [&](const ModelReport &r) {
    return eng(r, [](const EngineStatus &s) { return s.kv_blocks_total; });
  });
  per_model("keel_kv_blocks_cached", "gauge", "KV blocks holding cached prefixes",
            [&](const ModelReport &r) {
              return eng(r, [](const EngineStatus &s) { return s.kv_blocks_cached; });
            });
  per_model("keel_kv_restored_tokens_total", "counter", "prompt tokens restored from host or SSD",
            [&](const ModelReport &r) {
              return eng(r, [](const EngineStatus &s) { return s.restored_tokens; });
            });
  // Cache tiers below the device: one series per (model, tier).
  auto per_tier = [&](const char *name, const char *type, const char *help, auto field) {
    family(name, type, help);
    for (const auto &r : reports) {
      if (!r.engine) continue;
      o << name << "{model=\"" << r.id << "\",tier=\"host\"} " << field(r.engine->host_tier)
        << '\n';
      o << name << "{model=\"" << r.id << "\",tier=\"ssd\"} " << field(r.engine->ssd_tier) << '\n';
    }
  };
  per_tier("keel_kv_tier_capacity_bytes", "gauge", "capacity of a KV cache tier",
           [](const KvTierStatus &t) { return t.capacity_bytes; });
  per_tier("keel_kv_tier_used_bytes", "gauge", "bytes used in a KV cache tier",
           [](const KvTierStatus &t) { return t.used_bytes; });
  per_tier("keel_kv_tier_blocks", "gauge", "blocks held in a KV cache tier",
           [](const KvTierStatus &t) { return t.blocks; });
  per_tier("keel_kv_tier_hit_blocks_total", "counter", "blocks restored from a KV cache tier",
           [](const KvTierStatus &t) { return t.hit_blocks; });
  per_tier("keel_kv_tier_stored_blocks_total", "counter", "blocks written into a KV cache tier",
           [](const KvTierStatus &t) { return t.stored_blocks; });
  per_tier("keel_kv_tier_errors_total", "counter", "failed or corrupt tier reads and writes",
           [](const KvTierStatus &t) { return t.errors; });
  per_tier("keel_kv_tier_pending_stores", "gauge", "stores queued, not yet written",
           [](const KvTierStatus &t) { return t.pending; });
  per_model("keel_step_deadline_seconds", "gauge", "deadline in force for one engine step",
            [](const ModelReport &r) { return r.step_deadline_seconds; });
  family("keel_memory_budget_bytes", "gauge", "memory budget for loaded models (0: none)");
  o << "keel_memory_budget_bytes " << registry_.memory_budget() << '\n';
  family("keel_generations_total", "counter", "generation requests started");
  o << "keel_generations_total " << generations_started_.load() << '\n';
  family("keel_client_aborts_total", "counter", "generations aborted because the client left");
  o << "keel_client_aborts_total " << client_aborts_.load() << '\n';
  if (http_counters_) {
    family("keel_http_open_connections", "gauge", "open HTTP connections");
    o << "keel_http_open_connections " << http_counters_->open_connections.load() << '\n';
    family("keel_http_requests_total", "counter", "HTTP requests read");
    o << "keel_http_requests_total " << http_counters_->requests.load() << '\n';
    family("keel_http_dropped_slow_total", "counter", "connections dropped for not reading");
    o << "keel_http_dropped_slow_total " << http_counters_->dropped_slow.load() << '\n';
    family("keel_http_refused_total", "counter",
           "connections refused over the total or per-client cap");
    o << "keel_http_refused_total " << http_counters_->refused.load() << '\n';
    family("keel_http_accept_errors_total", "counter", "accept() failures (EMFILE: backed off)");
    o << "keel_http_accept_errors_total " << http_counters_->accept_errors.load() << '\n';
  }
  ch->send(200, "text/plain; version=0.0.4", o.str());
}

}  // namespace keel::server
