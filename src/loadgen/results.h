// A benchmark's figures: each level's summary from its request records, and the
// results.json / results.csv files. Tokens are the server's usage counts only.
#pragma once

#include <filesystem>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "loadgen/runner.h"
#include "loadgen/spec_counters.h"
#include "loadgen/stats.h"

namespace keel::loadgen {

struct LevelSummary {
  int concurrency = 0;      // virtual users (0 in request-rate mode)
  double request_rate = 0;  // sessions per second (0 in concurrency mode)
  int requests = 0;         // every turn of the workload
  int completed = 0;
  int failed = 0;
  double duration_s = 0;
  long long prompt_tokens = 0;
  long long output_tokens = 0;
  long long cached_tokens = 0;
  double request_throughput = 0;                    // completed requests per second
  double output_token_throughput = 0;               // output tokens per second
  double total_token_throughput = 0;                // prompt + output tokens per second
  double cached_share = 0;                          // cached prompt tokens / prompt tokens
  Summary ttft_ms, itl_ms, e2e_ms;                  // of completed requests
  std::vector<std::pair<std::string, int>> errors;  // message -> count, most common first
  // The server's speculative decoding over the level (keel with a drafter only).
  std::optional<SpecCounters> speculative;
};

// Inter-token latency of one request: the time after its first token over the tokens
// that followed, by the server's count, so batched events give the same figure.
double inter_token_latency_s(const RequestRecord &r);

LevelSummary summarize_level(const LevelRun &run, int concurrency, double request_rate);

struct BenchResults {
  nlohmann::ordered_json config;  // what was run: endpoint, model, workload, flags
  std::vector<LevelSummary> levels;
  std::vector<LevelRun> runs;  // the records behind each level
};

nlohmann::ordered_json results_json(const BenchResults &results);
std::string results_csv(const BenchResults &results);

// Writes text to a file through a temporary and a rename; throws keel::Error.
void write_file(const std::filesystem::path &path, const std::string &text);

}  // namespace keel::loadgen
