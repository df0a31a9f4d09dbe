// Runs one load level of a workload against a server: a fixed number of virtual users
// (each runs sessions one after another over a kept-alive HTTP/1.1 connection), or
// sessions arriving as a Poisson process at a given rate. Every operation expires at
// the run's deadline, so a level always ends; failures are recorded, never retried.
// SIGINT or SIGTERM during a level ends it at once, with what was measured so far.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "loadgen/endpoint.h"
#include "loadgen/workload.h"

namespace keel::loadgen {

struct RunOptions {
  Endpoint endpoint;
  std::string api_key;
  std::string model;
  int concurrency = 1;      // virtual users (when request_rate is 0)
  double request_rate = 0;  // > 0: sessions per second, Poisson arrivals, no user limit
  std::chrono::steady_clock::time_point deadline;
  std::uint64_t seed = 0;  // arrival times
  std::function<void(int finished, int failed)> on_progress;
};

struct RequestRecord {
  int session = 0;
  int turn = 0;
  double start_s = 0;  // seconds since the level started
  double ttft_s = -1;  // to the first chunk with content; -1 when none came
  double end_s = 0;
  int prompt_tokens = 0;  // from the server's usage
  int output_tokens = 0;
  int cached_tokens = 0;
  int content_events = 0;
  bool ok = false;
  std::string error;
};

struct LevelRun {
  std::vector<RequestRecord> records;  // one per turn of the workload, in finish order
  double duration_s = 0;               // first send to last finish
  bool interrupted = false;            // SIGINT or SIGTERM ended it early
};

LevelRun run_level(const Workload &workload, const RunOptions &options);

}  // namespace keel::loadgen
