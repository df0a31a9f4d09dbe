#include "loadgen/spec_counters.h"

#include <nlohmann/json.hpp>
#include <thread>

#include "loadgen/http_client.h"

namespace keel::loadgen {

using json = nlohmann::json;

double SpecCounters::acceptance_length() const {
  return verify_steps > 0 ? 1.0 + static_cast<double>(accepted) / verify_steps : 0.0;
}

double SpecCounters::acceptance_rate() const {
  return drafted > 0 ? static_cast<double>(accepted) / drafted : 0.0;
}

SpecCounters operator-(const SpecCounters &after, const SpecCounters &before) {
  SpecCounters d;
  d.method = after.method;
  d.verify_steps = after.verify_steps - before.verify_steps;
  d.drafted = after.drafted - before.drafted;
  d.accepted = after.accepted - before.accepted;
  d.accepted_at = after.accepted_at;
  for (std::size_t i = 0; i < d.accepted_at.size() && i < before.accepted_at.size(); ++i)
    d.accepted_at[i] -= before.accepted_at[i];
  return d;
}

namespace {

const json *model_entry(const json &status, const std::string &model) {
  if (!status.is_object() || !status.contains("models") || !status["models"].is_array())
    return nullptr;
  for (const json &m : status["models"])
    if (m.is_object() && m.value("id", std::string()) == model) return &m;
  return nullptr;
}

std::optional<SpecCounters> counters_of(const json &m) {
  if (!m.contains("speculative") || !m["speculative"].is_object()) return std::nullopt;
  const json &s = m["speculative"];
  SpecCounters c;
  c.method = s.value("method", std::string());
  c.verify_steps = s.value("verify_steps", std::int64_t{0});
  c.drafted = s.value("drafted_tokens", std::int64_t{0});
  c.accepted = s.value("accepted_tokens", std::int64_t{0});
  if (s.contains("accepted_per_position") && s["accepted_per_position"].is_array())
    for (const json &v : s["accepted_per_position"])
      c.accepted_at.push_back(v.is_number_integer() ? v.get<std::int64_t>() : 0);
  return c;
}

}  // namespace

std::optional<SpecCounters> parse_spec_counters(const std::string &status_json,
                                                const std::string &model) {
  const json j = json::parse(status_json, nullptr, false);
  const json *m = model_entry(j, model);
  return m ? counters_of(*m) : std::nullopt;
}

std::optional<SpecCounters> read_spec_counters(const Endpoint &ep, const std::string &api_key,
                                               const std::string &model,
                                               std::chrono::steady_clock::time_point since,
                                               std::chrono::milliseconds wait) {
  using Clock = std::chrono::steady_clock;
  const auto deadline = Clock::now() + wait;
  std::optional<SpecCounters> last;
  for (;;) {
    const auto asked = Clock::now();
    HttpResponse r;
    try {
      r = http_request(ep, "/api/status", "", api_key, std::chrono::seconds(10));
    } catch (const std::exception &) {
      return last;
    }
    if (r.status != 200) return std::nullopt;
    const json j = json::parse(r.body, nullptr, false);
    const json *m = model_entry(j, model);
    if (m == nullptr) return std::nullopt;
    last = counters_of(*m);
    if (!last) return std::nullopt;
    // The beat this reading carries was sent heartbeat_age_seconds before it was asked
    // for (at the latest), so it is recent enough once that is after `since`.
    const double age = m->value("heartbeat_age_seconds", 0.0);
    const auto beat =
        asked - std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(age));
    if (m->value("running", 0) == 0 && beat >= since) return last;
    if (Clock::now() >= deadline) return last;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
}

}  // namespace keel::loadgen
