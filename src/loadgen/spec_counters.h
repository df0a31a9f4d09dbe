// Speculative decoding as the server counts it (keel's /api/status `speculative`): read
// before and after a load level, so a report gives that level's acceptance. Servers
// other than keel, and keel models without a drafter, give none.
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "loadgen/endpoint.h"

namespace keel::loadgen {

struct SpecCounters {
  std::string method;  // "ngram", ...
  std::int64_t verify_steps = 0, drafted = 0, accepted = 0;
  std::vector<std::int64_t> accepted_at;  // drafts accepted at position 1, 2, ...

  // Tokens a verify step emits on average (accepted drafts + the target's own); 0 with
  // no verify step.
  double acceptance_length() const;
  double acceptance_rate() const;  // accepted / drafted (0 with no drafts)
};

// What happened between two readings of the same server.
SpecCounters operator-(const SpecCounters &after, const SpecCounters &before);

// The model's counters from /api/status, from a heartbeat sent at or after `since` with
// no request running there (the counters ride the engine's heartbeat: a reading taken at
// once may be one beat behind the level that just ended), waiting at most `wait`.
// None when the server has no /api/status, or the model no drafter.
std::optional<SpecCounters> read_spec_counters(const Endpoint &ep, const std::string &api_key,
                                               const std::string &model,
                                               std::chrono::steady_clock::time_point since,
                                               std::chrono::milliseconds wait);

// The "speculative" object of /api/status's model entry (a parsed JSON text); none when
// it is null or absent. Split out so that tests can give it texts.
std::optional<SpecCounters> parse_spec_counters(const std::string &status_json,
                                                const std::string &model);

}  // namespace keel::loadgen
