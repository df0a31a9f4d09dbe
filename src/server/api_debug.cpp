// /debug/faults (only with --enable-fault-injection) and /v1/cache/clear: operator
// endpoints that reach an engine through EngineApi (over IPC for `keel engine` children).
#include <cmath>
#include <thread>

#include "server/api_server.h"
#include "server/json_fields.h"

namespace keel::server {

using json = nlohmann::ordered_json;

namespace {

json fault_json(const FaultSpec &f) {
  return json{{"kind", fault_kind_name(f.kind)},
              {"seconds", f.seconds ? json(*f.seconds) : json(nullptr)},
              {"count", f.count}};
}

constexpr const char *kFaultKinds =
    "stall-step, crash-engine, ssd-write-error, ssd-read-corrupt, slow-store, mask-error (and "
    "the front's "
    "stall-worker)";

}  // namespace

std::string query_param(const std::string &query, const std::string &name) {
  std::size_t pos = 0;
  while (pos <= query.size()) {
    const std::size_t end = std::min(query.find('&', pos), query.size());
    const std::string part = query.substr(pos, end - pos);
    if (part.rfind(name + "=", 0) == 0) return part.substr(name.size() + 1);
    pos = end + 1;
  }
  return {};
}

FaultSpec parse_fault_request(const json &body) {
  for (const auto &[k, v] : body.items())
    if (k != "model" && k != "kind" && k != "seconds" && k != "count")
      fail_field(k, "unknown field (expected model, kind, seconds, count)");
  const auto kind_name = opt_string(body, "kind");
  if (!kind_name) fail_field("kind", std::string("is required: one of ") + kFaultKinds);
  const auto kind = parse_fault_kind(*kind_name);
  if (!kind)
    fail_field("kind", "'" + *kind_name + "' is not a fault kind (one of " + kFaultKinds + ")");
  FaultSpec spec;
  spec.kind = *kind;
  // A day at most: "forever" is spelled by leaving `seconds` out (stall-step).
  spec.seconds = opt_number(body, "seconds", 0.0, 86400.0);
  if (*kind == FaultKind::kSlowStore && !spec.seconds)
    fail_field("seconds", "is required with slow-store (the extra seconds per store)");
  if (*kind == FaultKind::kCrashEngine && spec.seconds)
    fail_field("seconds", "does not apply to crash-engine");
  spec.count = static_cast<std::int32_t>(opt_int(body, "count", 1, 1'000'000).value_or(1));
  return spec;
}

void ApiServer::handle_faults(const HttpRequest &req, const std::shared_ptr<ResponseChannel> &ch) {
  if (!options_.enable_fault_injection)
    throw ApiErrorException{{403,
                             "fault injection is off: start keel serve with "
                             "--enable-fault-injection to use /debug/faults",
                             ""}};
  if (req.method == "GET") {
    json models = json::array();
    for (const auto &r : registry_.report()) {
      json armed = json::array();
      if (auto lease = registry_.try_lease(r.id))
        for (const auto &f : (*lease)->engine->armed_faults()) armed.push_back(fault_json(f));
      models.push_back({{"id", r.id}, {"state", model_state_name(r.state)}, {"armed", armed}});
    }
    send_json(ch, 200, json{{"models", models}}.dump());
    return;
  }
  if (req.method == "DELETE") {
    std::string model = query_param(req.query, "model");
    if (model.empty() && !req.body.empty())
      model = opt_string(parse_body(req.body), "model").value_or("");
    json cleared = json::array();
    for (const auto &r : registry_.report()) {
      if (!model.empty() && r.id != model) continue;
      if (auto lease = registry_.try_lease(r.id)) {
        for (const auto &f : (*lease)->engine->armed_faults()) {
          FaultSpec off = f;
          off.count = 0;  // count 0 disarms its kind
          (*lease)->engine->inject_fault(off);
        }
        cleared.push_back(r.id);
      }
    }
    if (!model.empty()) require_model(model);
    send_json(ch, 200, json{{"disarmed", cleared}}.dump());
    return;
  }
  const json body = parse_body(req.body);
  if (opt_string(body, "kind") == std::optional<std::string>("stall-worker")) {
    // The front's own fault: this request holds its handler thread for `seconds`, so a
    // test can stall the pool (--workers 1) and watch /health (worker_watch.h).
    const auto secs = opt_number(body, "seconds", 0.0, 600.0);
    if (!secs) fail_field("seconds", "is required with stall-worker");
    options_.log.log(LogLevel::kWarn, "fault: a request handler stalls for %.1f s", *secs);
    std::this_thread::sleep_for(std::chrono::duration<double>(*secs));
    send_json(ch, 200, json{{"stalled_seconds", *secs}}.dump());
    return;
  }
  const FaultSpec spec = parse_fault_request(body);
  const std::string model = opt_string(body, "model").value_or(options_.default_model);
  if (model.empty()) fail_field("model", "is required");
  require_model(model);
  // Faults strike a live engine: load the model if it is not loaded yet.
  ModelLease lease = registry_.acquire(model, load_deadline());
  lease->engine->inject_fault(spec);
  options_.log.log(LogLevel::kWarn, "fault injected into '%s': %s", model.c_str(),
                   fault_json(spec).dump().c_str());
  json armed = json::array();
  for (const auto &f : lease->engine->armed_faults()) armed.push_back(fault_json(f));
  send_json(ch, 200, json{{"model", model}, {"armed", armed}}.dump());
}

void ApiServer::handle_cache_clear(const HttpRequest &req,
                                   const std::shared_ptr<ResponseChannel> &ch) {
  std::optional<std::string> model;
  if (!req.body.empty()) {
    const json body = parse_body(req.body);
    for (const auto &[k, v] : body.items())
      if (k != "model") fail_field(k, "unknown field (expected model)");
    model = opt_string(body, "model");
  }
  std::vector<ModelLease> leases;
  if (model) {
    require_model(*model);
    if (auto lease = registry_.try_lease(*model)) leases.push_back(std::move(*lease));
  } else {
    leases = registry_.ready_leases();
  }
  json cleared = json::array();
  for (auto &lease : leases) {
    lease->engine->clear_cache();
    cleared.push_back(lease->id);
  }
  options_.log.log(LogLevel::kInfo, "cache cleared for %zu model(s)", leases.size());
  send_json(ch, 200, json{{"cleared", cleared}}.dump());
}

}  // namespace keel::server
