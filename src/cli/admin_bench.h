// The dashboard's "run a short benchmark" (POST /api/bench): a small fixed load from
// src/loadgen against this same server, bounded in requests and time.
#pragma once

#include <nlohmann/json.hpp>
#include <string>

namespace keel::cli {

// Runs 8 random prompts (32 tokens in, 16 out) at concurrency 2 against `base_url`,
// bounded by 60 s. Returns the results json with "report_html" (keel bench's report).
nlohmann::ordered_json run_dashboard_bench(const std::string &base_url, const std::string &api_key,
                                           const std::string &model);

}  // namespace keel::cli
