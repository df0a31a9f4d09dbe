// `keel bench`: a serving benchmark against any OpenAI-compatible server (or, with
// --self, a keel server it starts on a model). Runs a workload at each load level
// (virtual users, or a Poisson request rate), streams every request with usage, and
// writes results.json, results.csv and a self-contained report.html to --out.
#include <CLI/CLI.hpp>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <optional>

#include "cli/bench_self_server.h"
#include "cli/commands.h"
#include "core/default_model.h"
#include "core/error.h"
#include "loadgen/endpoint.h"
#include "loadgen/preflight.h"
#include "loadgen/progress.h"
#include "loadgen/report_html.h"
#include "loadgen/results.h"
#include "loadgen/runner.h"
#include "loadgen/spec_counters.h"
#include "loadgen/workload.h"

namespace keel::cli {

namespace {

using namespace keel::loadgen;

struct BenchOptions {
  std::string base_url, model, api_key, workload = "random", prompt_format = "auto";
  std::string out = "keel-bench", self_model, device = "cpu";
  std::vector<std::string> serve_args;
  std::vector<int> concurrency;
  std::vector<double> request_rate;
  WorkloadOptions w;
  double timeout_s = 600;
  bool self = false;
};

void add_options(CLI::App &app, BenchOptions &o) {
  app.add_option("--base-url", o.base_url, "the server, e.g. http://127.0.0.1:8000");
  app.add_option("--self", o.self_model,
                 "start a keel server on this model (a path; 'default': the built-in model)")
      ->expected(0, 1)
      ->default_str("default");
  app.add_option("--device", o.device, "--self: cpu or cuda[:N]")->capture_default_str();
  app.add_option("--serve-arg", o.serve_args,
                 "--self: an extra `keel serve` argument, e.g. --serve-arg=--threads=4 (repeat)")
      ->allow_extra_args(false);
  app.add_option("--model", o.model, "model id (default: the first /v1/models lists)");
  app.add_option("--api-key", o.api_key, "sent as a Bearer token")->envname("KEEL_BENCH_API_KEY");
  app.add_option("--workload", o.workload,
                 "random, fixed, shared-prefix, agent or edit (copy-heavy code edits)")
      ->capture_default_str();
  app.add_option("--num-prompts", o.w.num_prompts, "requests per load level")
      ->capture_default_str();
  app.add_option("--concurrency", o.concurrency, "virtual users, a list: 1,16,64")->delimiter(',');
  app.add_option("--request-rate", o.request_rate,
                 "requests (agent: sessions) per second, Poisson arrivals, a list: 1,4")
      ->delimiter(',');
  app.add_option("--input-len", o.w.input_len, "prompt tokens (agent: tokens a turn adds)")
      ->capture_default_str();
  app.add_option("--output-len", o.w.output_len, "tokens generated per request")
      ->capture_default_str();
  app.add_option("--range-ratio", o.w.range_ratio, "random: lengths within len*(1 +- r)")
      ->capture_default_str();
  app.add_option("--prefix-len", o.w.prefix_len,
                 "shared-prefix: prefix tokens (0: 3/4 of --input-len); agent: system prompt");
  app.add_option("--num-prefixes", o.w.num_prefixes, "shared-prefix: distinct prefixes")
      ->capture_default_str();
  app.add_option("--turns", o.w.turns, "agent: turns per session")->capture_default_str();
  app.add_option("--prompt-format", o.prompt_format,
                 "auto (token ids where the server takes them), tokens or text")
      ->capture_default_str();
  app.add_option("--max-token-id", o.w.max_token_id, "token-id prompts: ids below this")
      ->capture_default_str();
  app.add_option("--seed", o.w.seed, "prompts and arrival times")->capture_default_str();
  app.add_option("--timeout", o.timeout_s, "seconds the whole benchmark may take")
      ->capture_default_str();
  app.add_option("--out", o.out, "directory for results.json, results.csv, report.html")
      ->capture_default_str();
}

void validate(const BenchOptions &o, const CLI::App &app) {
  auto bad = [](const std::string &m) { throw Error(ErrorCode::kInvalidArgument, m); };
  const bool self = app.count("--self") > 0;
  if (self == !o.base_url.empty()) bad("give exactly one of --base-url URL or --self MODEL");
  if (!o.concurrency.empty() && !o.request_rate.empty())
    bad("give --concurrency or --request-rate, not both");
  for (int c : o.concurrency)
    if (c < 1) bad("--concurrency: each level must be at least 1");
  for (double r : o.request_rate)
    if (!(r > 0)) bad("--request-rate: each rate must be above 0");
  if (!(o.timeout_s > 0)) bad("--timeout must be above 0");
  if (o.prompt_format != "auto" && o.prompt_format != "tokens" && o.prompt_format != "text")
    bad("--prompt-format: '" + o.prompt_format + "' is not one of auto, tokens, text");
}

std::filesystem::path self_model_path(const std::string &arg) {
  if (!arg.empty() && arg != "default") return arg;
  auto dir = default_model_dir();
  if (!dir) throw Error(ErrorCode::kNotFound, "--self: no built-in default model found");
  return *dir;
}

void print_level(const LevelSummary &l) {
  std::printf(
      "%-10s %4d/%-4d ok  %7.2f req/s  %9.1f out tok/s  %9.1f tot tok/s  cached %5.1f%%  "
      "TTFT p50/p99 %.1f/%.1f ms  ITL p50/p99 %.2f/%.2f ms  E2E p50/p99 %.1f/%.1f ms\n",
      level_label(l).c_str(), l.completed, l.requests, l.request_throughput,
      l.output_token_throughput, l.total_token_throughput, l.cached_share * 100, l.ttft_ms.p50,
      l.ttft_ms.p99, l.itl_ms.p50, l.itl_ms.p99, l.e2e_ms.p50, l.e2e_ms.p99);
  if (l.speculative) {
    const SpecCounters &c = *l.speculative;
    std::printf(
        "           speculative %s: acceptance length %.2f (%lld of %lld drafts accepted, "
        "%lld verify steps)\n",
        c.method.c_str(), c.acceptance_length(), static_cast<long long>(c.accepted),
        static_cast<long long>(c.drafted), static_cast<long long>(c.verify_steps));
  }
  for (const auto &[msg, n] : l.errors) std::printf("           %d failed: %s\n", n, msg.c_str());
  std::fflush(stdout);
}

}  // namespace

int cmd_bench(int argc, char **argv) {
  CLI::App app{"keel bench: a serving benchmark against an OpenAI-compatible server"};
  BenchOptions o;
  add_options(app, o);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError &e) {
    return app.exit(e);
  }
  validate(o, app);
  o.w.kind = parse_workload_kind(o.workload);
  make_workload(o.w);  // checks the workload options before anything starts

  const std::filesystem::path out_dir = o.out;
  std::error_code ec;
  std::filesystem::create_directories(out_dir, ec);
  if (ec) throw Error(ErrorCode::kInvalidArgument, "--out " + o.out + ": " + ec.message());

  const auto started = std::chrono::steady_clock::now();
  const auto deadline = started + std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                                      std::chrono::duration<double>(o.timeout_s));
  std::optional<SelfServer> self;
  std::string base_url = o.base_url;
  if (app.count("--self")) {
    const auto model = self_model_path(o.self_model);
    std::fprintf(stderr, "keel bench: starting keel serve %s (log: %s)\n", model.c_str(),
                 (out_dir / "server.log").c_str());
    self.emplace(model, o.device, o.serve_args, out_dir / "server.log",
                 std::chrono::seconds(std::max(30, static_cast<int>(o.timeout_s))));
    base_url = self->url();
  }
  const Endpoint ep = parse_base_url(base_url);
  const std::string server = ep.host_port() + ep.base_path;
  const std::string model = choose_model(served_models(ep, o.api_key), o.model, server);
  if (o.w.kind != WorkloadKind::kAgent) {
    o.w.token_prompts =
        o.prompt_format == "tokens" ||
        (o.prompt_format == "auto" &&
         takes_token_prompts(ep, o.api_key, model, o.w.min_token_id, o.w.max_token_id - 1));
  }
  if (o.concurrency.empty() && o.request_rate.empty()) o.concurrency = {1};

  BenchResults results;
  results.config = {{"server", server},
                    {"model", model},
                    {"workload", o.workload},
                    {"prompts", o.w.kind == WorkloadKind::kAgent ? "chat"
                                : o.w.token_prompts              ? "token ids"
                                                                 : "text"},
                    {"num_prompts", o.w.num_prompts},
                    {"input_len", o.w.input_len},
                    {"output_len", o.w.output_len},
                    {"seed", o.w.seed},
                    {"timeout_s", o.timeout_s}};
  if (o.w.kind == WorkloadKind::kRandom) results.config["range_ratio"] = o.w.range_ratio;
  if (o.w.kind == WorkloadKind::kSharedPrefix) {
    results.config["num_prefixes"] = o.w.num_prefixes;
    results.config["prefix_len"] = o.w.prefix_len;
  }
  if (o.w.kind == WorkloadKind::kAgent) results.config["turns"] = o.w.turns;
  if (self)
    results.config["self"] = {{"model_path", self_model_path(o.self_model).string()},
                              {"device", o.device}};
  std::fprintf(stderr, "keel bench: %s on %s, workload %s (%s prompts)\n", model.c_str(),
               server.c_str(), o.workload.c_str(),
               results.config["prompts"].get<std::string>().c_str());

  const std::size_t levels = o.request_rate.empty() ? o.concurrency.size() : o.request_rate.size();
  int failed = 0, total = 0;
  bool interrupted = false;
  for (std::size_t i = 0; i < levels; ++i) {
    WorkloadOptions wo = o.w;
    wo.seed = o.w.seed + i;  // fresh prompts per level: no level reuses another's cache
    const Workload workload = make_workload(wo);
    RunOptions ro;
    ro.endpoint = ep;
    ro.api_key = o.api_key;
    ro.model = model;
    ro.concurrency = o.request_rate.empty() ? o.concurrency[i] : 0;
    ro.request_rate = o.request_rate.empty() ? 0 : o.request_rate[i];
    ro.deadline = deadline;
    ro.seed = o.w.seed + i;
    LevelSummary label_only;
    label_only.concurrency = ro.concurrency;
    label_only.request_rate = ro.request_rate;
    Progress progress(stderr, level_label(label_only), workload.total_turns());
    ro.on_progress = [&](int done, int nfailed) { progress.update(done, nfailed); };
    const auto spec_before = read_spec_counters(
        ep, o.api_key, model, std::chrono::steady_clock::now(), std::chrono::seconds(2));
    LevelRun run = run_level(workload, ro);
    progress.finish();
    results.levels.push_back(summarize_level(run, ro.concurrency, ro.request_rate));
    {
      // None before: a keel model whose engine loads with this level's first request
      // (its counters start there), or a server that reports none (then none after).
      const auto spec_after = read_spec_counters(
          ep, o.api_key, model, std::chrono::steady_clock::now(), std::chrono::seconds(2));
      if (spec_after)
        results.levels.back().speculative = spec_before ? *spec_after - *spec_before : *spec_after;
    }
    results.runs.push_back(std::move(run));
    print_level(results.levels.back());
    failed += results.levels.back().failed;
    total += results.levels.back().requests;
    if (results.runs.back().interrupted) {
      interrupted = true;
      break;
    }
  }
  results.config["wall_s"] =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  write_file(out_dir / "results.json", results_json(results).dump(2) + "\n");
  write_file(out_dir / "results.csv", results_csv(results));
  write_file(out_dir / "report.html", report_html(results));
  std::fprintf(stderr, "keel bench: wrote %s/{results.json,results.csv,report.html}\n",
               out_dir.c_str());
  if (interrupted) {
    std::fprintf(stderr, "keel bench: interrupted; the results hold the levels run so far\n");
    return 130;
  }
  if (failed > 0) {
    std::fprintf(stderr, "keel bench: %d of %d requests failed\n", failed, total);
    return 1;
  }
  return 0;
}

}  // namespace keel::cli
