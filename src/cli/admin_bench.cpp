#include "cli/admin_bench.h"

#include <chrono>

#include "loadgen/endpoint.h"
#include "loadgen/preflight.h"
#include "loadgen/report_html.h"
#include "loadgen/results.h"
#include "loadgen/runner.h"
#include "loadgen/workload.h"

namespace keel::cli {

using namespace keel::loadgen;

nlohmann::ordered_json run_dashboard_bench(const std::string &base_url, const std::string &api_key,
                                           const std::string &model) {
  const auto started = std::chrono::steady_clock::now();
  const Endpoint ep = parse_base_url(base_url);
  WorkloadOptions w;
  w.kind = WorkloadKind::kRandom;
  w.num_prompts = 8;
  w.input_len = 32;
  w.output_len = 16;
  w.token_prompts = takes_token_prompts(ep, api_key, model, w.min_token_id, w.max_token_id - 1);
  const Workload workload = make_workload(w);
  RunOptions ro;
  ro.endpoint = ep;
  ro.api_key = api_key;
  ro.model = model;
  ro.concurrency = 2;
  ro.deadline = started + std::chrono::seconds(60);
  BenchResults results;
  results.config = {{"server", ep.host_port() + ep.base_path},
                    {"model", model},
                    {"workload", workload_kind_name(w.kind)},
                    {"prompts", w.token_prompts ? "token ids" : "text"},
                    {"num_prompts", w.num_prompts},
                    {"input_len", w.input_len},
                    {"output_len", w.output_len},
                    {"seed", w.seed},
                    {"timeout_s", 60},
                    {"from", "dashboard"}};
  LevelRun run = run_level(workload, ro);
  results.levels.push_back(summarize_level(run, ro.concurrency, ro.request_rate));
  results.runs.push_back(std::move(run));
  results.config["wall_s"] =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  nlohmann::ordered_json out = results_json(results);
  out["report_html"] = report_html(results);
  return out;
}

}  // namespace keel::cli
