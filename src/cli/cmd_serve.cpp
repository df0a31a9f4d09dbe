// `keel serve`: the front process. Discovers models, starts the HTTP API, and spawns
// one `keel engine` child per loaded model. Every option also comes from an
// environment variable (KEEL_PORT, ...) or a settings file (--config / KEEL_CONFIG,
// TOML or INI: `port = 8080`); the command line wins over the environment, which wins
// over the file. Per-model settings: `--pin ID` and `--model-ttl ID=SECONDS` (both
// repeatable; in the file `pin = ["a"]`, `model-ttl = ["a=300", "b=0"]`).
//
// Memory (issue 21, kv/kv_sizing.h): with no --kv-blocks / --max-kv-tokens the KV pool
// is sized from memory. CUDA: each engine takes its share of the device
// (--gpu-memory-fraction, 0.9 by default, split evenly over the models unless given per
// model as ID=F) and fills what its weights and buffers leave of it. CPU: room for 4
// sequences of the model's full context (16,384 tokens at least, the fixed default
// before), at most the model's share (ID=F, else an even
// split) of half of MemAvailable and, under --memory-budget, of the budget after its
// weights and host tier.
//
// Shutdown (SIGTERM/SIGINT): stop accepting connections and refuse new generations,
// let the requests in flight finish for up to --shutdown-grace seconds, end the rest
// with an error, stop the engines (they flush their cache and exit; SIGKILL after a
// few seconds), and exit 0 with a line saying how it went: within the grace plus 5 s.
#include <signal.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <thread>

#include "cli/admin_bench.h"
#include "cli/commands.h"
#include "core/default_model.h"
#include "core/error.h"
#include "engine/speculative.h"
#include "hub/hub_pull.h"
#include "registry/log_ring.h"
#include "registry/model_path.h"
#include "registry/model_registry.h"
#include "server/api_server.h"
#include "server/connection_limits.h"
#include "server/http_server.h"

namespace keel::cli {

int cmd_serve(int argc, char **argv) {
  CLI::App app{"keel serve: OpenAI- and Anthropic-compatible server"};
  std::vector<std::string> model_paths, pins, model_ttls, gpu_fractions;
  std::int64_t max_kv_tokens = 0;
  std::string model_dir, host = "127.0.0.1", api_key, device = "cpu", memory_budget = "0",
                         cache_dir, hot_cache, ssd_cache, log_level = "info";
  int port = 8000, threads = 0, max_concurrent = 256, kv_blocks = 0, io_threads = 2, workers = 16;
  double step_deadline_s = 0, step_deadline_floor_s = 30, heartbeat_timeout_s = 10, idle_ttl_s = 0,
         load_timeout_s = 600, sse_keepalive_s = 10, unload_grace_s = 3, shutdown_grace_s = 10;
  int tensor_parallel = 1;
  bool enable_faults = false;
  std::string speculative;
  int num_speculative_tokens = 4, spec_max_running = 4;
  bool spec_adaptive = true;
  std::string body_limit = "32M";
  std::size_t response_store_count = 1024;
  std::string response_store_bytes = "64M";
  double response_store_ttl_s = 3600;
  std::string force_tool_call;
  double fault_slow_load_s = 0;
  // Exposure (issue 31): cross-site checks, connection caps, the handler pool's deadline.
  std::vector<std::string> allowed_origins, allowed_hosts;
  std::size_t max_connections = 0, max_connections_per_client = 1024;
  double worker_deadline_s = 30;
  app.add_option("models", model_paths,
                 "model directories or .gguf files, or ORG/NAME[:REVISION][/FILE] of a Hugging "
                 "Face repository (fetched into the hub cache: see keel pull) (default: the "
                 "built-in model)");
  app.add_option("--model-dir", model_dir, "serve every model found in this directory")
      ->envname("KEEL_MODEL_DIR");
  app.add_option("--host", host, "address to bind")->envname("KEEL_HOST")->capture_default_str();
  app.add_option("--port", port, "port (0: any free port)")
      ->envname("KEEL_PORT")
      ->capture_default_str();
  app.add_option("--api-key", api_key, "require this key (Bearer or x-api-key)")
      ->envname("KEEL_API_KEY");
  app.add_option("--device", device, "cpu or cuda[:N]")
      ->envname("KEEL_DEVICE")
      ->capture_default_str();
  app.add_option("--threads", threads, "compute threads per engine (0: all cores)")
      ->envname("KEEL_THREADS");
  app.add_option("--max-concurrent", max_concurrent, "running requests per engine")
      ->envname("KEEL_MAX_CONCURRENT");
  app.add_option("--speculative", speculative,
                 "speculative decoding: off, ngram (prompt lookup: drafts copied from the "
                 "prompt and output), mtp (the checkpoint's multi-token-prediction layer: "
                 "GLM-4.5, DeepSeek-V3, GLM-5; CPU or CUDA), draft:PATH (a smaller model with the "
                 "same tokenizer, HF "
                 "directory or GGUF, drafting greedily with its own KV cache) or eagle3:PATH (an "
                 "EAGLE-3 head's directory, reading the target's hidden states; CPU or CUDA); "
                 "verified several tokens a step")
      ->envname("KEEL_SPECULATIVE");
  app.add_option("--num-speculative-tokens", num_speculative_tokens,
                 "drafted tokens verified per step at most")
      ->check(CLI::Range(1, 16))
      ->capture_default_str();
  app.add_option("--speculative-max-running", spec_max_running,
                 "no drafts while this many requests run (0: no limit)")
      ->check(CLI::Range(0, 1 << 20))
      ->capture_default_str();
  app.add_option("--speculative-adaptive", spec_adaptive,
                 "draft only at batch sizes where decoding with drafts measured faster per "
                 "token than without (on / off)")
      ->capture_default_str();
  app.add_option("--memory-budget", memory_budget,
                 "memory for loaded models, e.g. 8G (0: no limit)")
      ->envname("KEEL_MEMORY_BUDGET");
  app.add_option("--cache-dir", cache_dir, "KV cache directory (SSD tier)")
      ->envname("KEEL_CACHE_DIR");
  app.add_option("--hot-cache-size", hot_cache, "host-RAM KV cache size")
      ->envname("KEEL_HOT_CACHE_SIZE");
  app.add_option("--ssd-cache-size", ssd_cache, "SSD KV cache size")
      ->envname("KEEL_SSD_CACHE_SIZE");
  app.add_option("--log-level", log_level, "error, warn, info, debug")->envname("KEEL_LOG_LEVEL");
  app.add_option("--kv-blocks", kv_blocks,
                 "KV cache blocks (16 tokens) per engine; 0: sized from memory (CUDA: what "
                 "the weights and buffers leave of the engine's --gpu-memory-fraction share; "
                 "CPU: 4 full contexts (16,384 tokens at least), at most the model's share of "
                 "half of MemAvailable "
                 "and of --memory-budget)")
      ->envname("KEEL_KV_BLOCKS")
      ->capture_default_str();
  app.add_option("--max-kv-tokens", max_kv_tokens,
                 "KV cache tokens per engine (rounded up to blocks); 0: sized from memory")
      ->envname("KEEL_MAX_KV_TOKENS");
  app.add_option("--gpu-memory-fraction", gpu_fractions,
                 "F: the share of the GPU's memory all engines take together (default 0.9, "
                 "split evenly over the models); ID=F: this model's share (of the GPU, or on "
                 "the CPU of --memory-budget). Repeatable")
      ->envname("KEEL_GPU_MEMORY_FRACTION");
  app.add_option("--pin", pins,
                 "never evict or idle-unload this model; restart its engine after a stall");
  app.add_option(
      "--model-ttl", model_ttls,
      "ID=SECONDS: unload this model after so long idle (0: never); overrides --idle-ttl");
  app.add_option("--idle-ttl", idle_ttl_s, "unload a model idle this many seconds (0: never)")
      ->envname("KEEL_IDLE_TTL");
  app.add_option("--step-deadline", step_deadline_s,
                 "seconds one engine step may take before the engine is killed (0: "
                 "max(floor, 10 x the slowest step seen))")
      ->envname("KEEL_STEP_DEADLINE");
  app.add_option("--step-deadline-floor", step_deadline_floor_s,
                 "the least step deadline when it is scaled")
      ->envname("KEEL_STEP_DEADLINE_FLOOR")
      ->capture_default_str();
  app.add_option("--shutdown-grace", shutdown_grace_s,
                 "seconds SIGTERM lets requests in flight finish before ending them")
      ->envname("KEEL_SHUTDOWN_GRACE")
      ->capture_default_str();
  app.add_option("--tensor-parallel", tensor_parallel,
                 "ranks (processes) per engine that split the model; CPU today")
      ->envname("KEEL_TENSOR_PARALLEL");
  app.add_flag("--enable-fault-injection", enable_faults,
               "allow POST /debug/faults (tests only: it can stall or crash engines)")
      ->envname("KEEL_ENABLE_FAULT_INJECTION");
  app.add_option("--force-tool-call", force_tool_call,
                 "MODEL:TOOL or MODEL:TOOL=JSON (tests only, needs "
                 "--enable-fault-injection): a request to MODEL that offers TOOL, and whose "
                 "last turn holds no tool result, must call it (with arguments JSON, checked "
                 "against its schema)")
      ->envname("KEEL_FORCE_TOOL_CALL");
  app.add_option("--fault-slow-load", fault_slow_load_s,
                 "SECONDS (tests only, needs --enable-fault-injection): every engine takes at "
                 "least this long to read its weights, so that load progress can be watched")
      ->envname("KEEL_FAULT_SLOW_LOAD");
  app.add_option("--response-store-count", response_store_count,
                 "stored /v1/responses (store: true) kept at most; the oldest go first")
      ->envname("KEEL_RESPONSE_STORE_COUNT")
      ->capture_default_str();
  app.add_option("--response-store-bytes", response_store_bytes,
                 "bytes of stored /v1/responses (responses and their conversations) at most")
      ->envname("KEEL_RESPONSE_STORE_BYTES")
      ->capture_default_str();
  app.add_option("--response-store-ttl", response_store_ttl_s,
                 "seconds a stored /v1/responses response is kept")
      ->envname("KEEL_RESPONSE_STORE_TTL")
      ->capture_default_str();
  app.add_option("--heartbeat-timeout", heartbeat_timeout_s,
                 "seconds without any report from an engine before it is killed")
      ->envname("KEEL_HEARTBEAT_TIMEOUT");
  std::string ipc_queue_size = "64M";
  double ipc_deadline_s = 0;
  app.add_option("--ipc-queue-size", ipc_queue_size,
                 "bytes of requests queued to one engine before new ones get 503")
      ->envname("KEEL_IPC_QUEUE_SIZE")
      ->capture_default_str();
  app.add_option("--ipc-deadline", ipc_deadline_s,
                 "seconds an engine may leave a request unread before it fails with 503 and "
                 "the engine counts as stalled (0: the heartbeat timeout)")
      ->envname("KEEL_IPC_DEADLINE");
  app.add_option("--load-timeout", load_timeout_s, "seconds a model load may take")
      ->envname("KEEL_LOAD_TIMEOUT");
  app.add_option("--unload-grace", unload_grace_s, "seconds an unload waits before killing")
      ->envname("KEEL_UNLOAD_GRACE");
  app.add_option("--sse-keepalive", sse_keepalive_s,
                 "seconds between keepalive comments on a quiet stream");
  app.add_option("--io-threads", io_threads, "HTTP I/O threads")->envname("KEEL_IO_THREADS");
  app.add_option("--workers", workers, "request handler threads")->envname("KEEL_WORKERS");
  app.add_option("--body-limit", body_limit, "largest request body")->envname("KEEL_BODY_LIMIT");
  app.add_option("--allowed-origins", allowed_origins,
                 "web origins (scheme://host[:port], or *) whose pages may call the API; "
                 "other Origins get 403")
      ->delimiter(',')
      ->envname("KEEL_ALLOWED_ORIGINS");
  app.add_option("--allowed-hosts", allowed_hosts,
                 "host names (or *) accepted in the Host header besides IP addresses, "
                 "localhost, the bind address and this machine's name; others get 421")
      ->delimiter(',')
      ->envname("KEEL_ALLOWED_HOSTS");
  app.add_option("--max-connections", max_connections,
                 "open connections in all (0: from the open-files limit)")
      ->envname("KEEL_MAX_CONNECTIONS");
  app.add_option("--max-connections-per-client", max_connections_per_client,
                 "open connections from one address")
      ->envname("KEEL_MAX_CONNECTIONS_PER_CLIENT")
      ->capture_default_str();
  app.add_option("--worker-deadline", worker_deadline_s,
                 "seconds requests may wait with no handler taking one before /health "
                 "says 503 (0: off)")
      ->envname("KEEL_WORKER_DEADLINE")
      ->capture_default_str();
  app.set_config("--config", "", "settings file (TOML/INI: option = value)")
      ->envname("KEEL_CONFIG");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError &e) {
    return app.exit(e);
  }
  // keel serve ORG/NAME downloads: a file-size limit is an error (EFBIG), not a kill.
  ::signal(SIGXFSZ, SIG_IGN);
  if (port < 0 || port > 65535)
    throw Error(ErrorCode::kInvalidArgument, "--port: must be 0..65535");
  if (max_concurrent < 1)
    throw Error(ErrorCode::kInvalidArgument, "--max-concurrent: must be at least 1");
  auto ms = [](double s) { return std::chrono::milliseconds(static_cast<std::int64_t>(s * 1000)); };
  const auto level = parse_log_level(log_level);
  if (!level)
    throw Error(ErrorCode::kInvalidArgument,
                "--log-level: '" + log_level + "' is not one of error, warn, info, debug");
  // The last 1,000 lines also stay in memory for the dashboard (GET /api/logs).
  const Logger log = [&] {
    Logger l(*level);
    l.keep_in(std::make_shared<LogRing>(1000));
    return l;
  }();
  if (tensor_parallel < 1)
    throw Error(ErrorCode::kInvalidArgument, "--tensor-parallel: must be at least 1");
  for (double v : {step_deadline_s, step_deadline_floor_s, shutdown_grace_s, unload_grace_s})
    if (!(v >= 0 && v < 1e7))
      throw Error(ErrorCode::kInvalidArgument,
                  "--step-deadline/--step-deadline-floor/--shutdown-grace/--unload-grace: "
                  "seconds must be 0 or more");
  // Engines inherit the environment: the level reaches `keel engine` as KEEL_LOG_LEVEL.
  ::setenv("KEEL_LOG_LEVEL", log_level_name(*level), 1);

  RegistryOptions ro;
  std::error_code ec;
  ro.keel_executable = std::filesystem::read_symlink("/proc/self/exe", ec);
  if (ec) throw Error(ErrorCode::kInternal, "cannot find the keel executable: " + ec.message());
  ro.engine_args = {"--device",         device,
                    "--threads",        std::to_string(threads),
                    "--max-concurrent", std::to_string(max_concurrent)};
  if (kv_blocks < 0 || max_kv_tokens < 0)
    throw Error(ErrorCode::kInvalidArgument, "--kv-blocks/--max-kv-tokens: must be 0 or more");
  ro.plan.cuda = device != "cpu";
  ro.plan.kv = {kv_blocks, max_kv_tokens};
  if (!hot_cache.empty()) ro.plan.host_tier_bytes = parse_size(hot_cache, "--hot-cache-size");
  std::vector<std::pair<std::string, double>> model_fractions;
  for (const auto &spec : gpu_fractions) {
    const auto eq = spec.rfind('=');
    const std::string value = eq == std::string::npos ? spec : spec.substr(eq + 1);
    double f = -1;
    try {
      std::size_t used = 0;
      f = std::stod(value, &used);
      if (used != value.size()) f = -1;
    } catch (const std::exception &) {
    }
    if (!(f > 0 && f <= 1))
      throw Error(ErrorCode::kInvalidArgument,
                  "--gpu-memory-fraction: '" + spec + "': must be F or ID=F with F in (0, 1]");
    if (eq == std::string::npos)
      ro.gpu_memory_fraction = f;
    else
      model_fractions.emplace_back(spec.substr(0, eq), f);
  }
  if (!parse_speculative_method(speculative).empty())
    ro.engine_args.insert(
        ro.engine_args.end(),
        {"--speculative", parse_speculative_method(speculative), "--num-speculative-tokens",
         std::to_string(num_speculative_tokens), "--speculative-max-running",
         std::to_string(spec_max_running), "--speculative-adaptive", spec_adaptive ? "on" : "off"});
  if (!cache_dir.empty()) ro.engine_args.insert(ro.engine_args.end(), {"--cache-dir", cache_dir});
  if (!hot_cache.empty())
    ro.engine_args.insert(ro.engine_args.end(), {"--hot-cache-size", hot_cache});
  if (!ssd_cache.empty())
    ro.engine_args.insert(ro.engine_args.end(), {"--ssd-cache-size", ssd_cache});
  if (tensor_parallel > 1)
    ro.engine_args.insert(ro.engine_args.end(),
                          {"--tensor-parallel", std::to_string(tensor_parallel)});
  if (fault_slow_load_s != 0) {
    if (!enable_faults)
      throw Error(ErrorCode::kInvalidArgument,
                  "--fault-slow-load: tests only, needs --enable-fault-injection");
    if (!(fault_slow_load_s > 0 && fault_slow_load_s <= 600))
      throw Error(ErrorCode::kInvalidArgument, "--fault-slow-load: seconds in (0, 600]");
    ro.engine_args.insert(
        ro.engine_args.end(),
        {"--fault-slow-load-ms", std::to_string(static_cast<int>(fault_slow_load_s * 1000))});
  }
  ro.memory_budget_bytes = parse_size(memory_budget, "--memory-budget");
  ro.step_deadline = ms(step_deadline_s);
  ro.step_deadline_floor = ms(step_deadline_floor_s);
  ro.log = log;
  ro.idle_ttl = ms(idle_ttl_s);
  ro.heartbeat_timeout = ms(heartbeat_timeout_s);
  ro.ipc_queue_bytes = static_cast<std::size_t>(parse_size(ipc_queue_size, "--ipc-queue-size"));
  ro.ipc_frame_deadline = ms(ipc_deadline_s);
  ro.load_timeout = ms(load_timeout_s);
  ro.unload_grace = ms(unload_grace_s);

  // Signals are taken by sigwait below; block them before any thread starts so that
  // every thread inherits the mask. SIGPIPE: a client gone mid-write is an error code.
  sigset_t stop_signals;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGINT);
  sigaddset(&stop_signals, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);
  ::signal(SIGPIPE, SIG_IGN);

  ModelRegistry registry(ro);
  std::string first_model;
  for (const auto &p : model_paths) {
    // A path on disk is a model; else ORG/NAME[:REV][/FILE] names a hub repository,
    // fetched (or found in the cache) before the server starts.
    std::string id;
    if (std::filesystem::exists(p)) {
      check_model_path(p);  // a folder that is not a model fails here, not on first use
      id = registry.add_model(p);
    } else if (auto spec = hub::parse_repo_spec(p)) {
      hub::PullOptions popt;
      hub::apply_environment(popt);
      const hub::PullResult pulled = hub::pull(*spec, popt);
      const std::string name = spec->repo.substr(spec->repo.find('/') + 1);
      id = registry.add_model(
          pulled.path, false,
          spec->file.empty() ? name : std::filesystem::path(spec->file).stem().string());
    } else {
      id = registry.add_model(p);  // names the missing path in its error
    }
    if (first_model.empty()) first_model = id;
  }
  if (!model_dir.empty()) registry.discover(model_dir);
  if (model_paths.empty() && model_dir.empty()) {
    auto def = default_model_dir();
    if (!def)
      throw Error(ErrorCode::kNotFound,
                  "no model given and the built-in default model was not found");
    first_model = registry.add_model(*def);
  }
  if (first_model.empty() && !registry.ids().empty()) first_model = registry.ids().front();
  for (const auto &id : pins) {
    if (!registry.has(id))
      throw Error(ErrorCode::kNotFound, "--pin: '" + id + "' is not a model this server knows");
    registry.set_pinned(id, true);
  }
  for (const auto &spec : model_ttls) {
    const auto eq = spec.rfind('=');
    if (eq == std::string::npos || eq == 0)
      throw Error(ErrorCode::kInvalidArgument, "--model-ttl: '" + spec + "' is not ID=SECONDS");
    const std::string id = spec.substr(0, eq);
    double secs = -1;
    try {
      std::size_t used = 0;
      secs = std::stod(spec.substr(eq + 1), &used);
      if (used != spec.size() - eq - 1) secs = -1;
    } catch (const std::exception &) {
    }
    if (!(secs >= 0 && secs < 1e9))
      throw Error(ErrorCode::kInvalidArgument,
                  "--model-ttl: '" + spec + "': SECONDS must be a number, 0 or more");
    if (!registry.has(id))
      throw Error(ErrorCode::kNotFound,
                  "--model-ttl: '" + id + "' is not a model this server knows");
    ModelSettings ms_settings;
    ms_settings.idle_ttl = ms(secs);
    registry.configure(id, ms_settings);
  }
  for (const auto &[id, f] : model_fractions) {
    if (!registry.has(id))
      throw Error(ErrorCode::kNotFound,
                  "--gpu-memory-fraction: '" + id + "' is not a model this server knows");
    ModelSettings share;
    share.memory_fraction = f;
    registry.configure(id, share);
  }

  server::ApiOptions ao;
  ao.api_key = api_key;
  ao.workers = workers;
  ao.load_timeout = ro.load_timeout;
  ao.heartbeat_timeout = ro.heartbeat_timeout;
  ao.default_model = first_model;
  ao.enable_fault_injection = enable_faults;
  if (!force_tool_call.empty()) {
    if (!enable_faults)
      throw Error(ErrorCode::kInvalidArgument,
                  "--force-tool-call: tests only, needs --enable-fault-injection");
    ao.forced_tool = server::parse_forced_tool_option(force_tool_call);
  }
  if (!(response_store_ttl_s > 0 && response_store_ttl_s < 1e9))
    throw Error(ErrorCode::kInvalidArgument, "--response-store-ttl: must be more than 0 seconds");
  ao.response_store.max_entries = response_store_count;
  ao.response_store.max_bytes =
      static_cast<std::size_t>(parse_size(response_store_bytes, "--response-store-bytes"));
  ao.response_store.ttl = std::chrono::seconds(
      std::max<std::int64_t>(1, static_cast<std::int64_t>(response_store_ttl_s)));
  ao.log = log;
  if (!(worker_deadline_s >= 0 && worker_deadline_s < 1e7))
    throw Error(ErrorCode::kInvalidArgument, "--worker-deadline: seconds must be 0 or more");
  ao.worker_deadline = ms(worker_deadline_s);
  ao.guard.allowed_origins = allowed_origins;
  ao.guard.allowed_hosts = allowed_hosts;
  ao.guard.bind_host = host;
  if (char name[256] = {}; ::gethostname(name, sizeof name - 1) == 0) ao.guard.machine_name = name;
  std::atomic<unsigned> bound_port{0};  // known once the listener is up
  const std::string bench_host =
      host == "0.0.0.0" || host == "::" || host.empty()
          ? "127.0.0.1"
          : (host.find(':') != std::string::npos ? "[" + host + "]" : host);
  ao.run_bench = [&bound_port, bench_host, api_key](const std::string &model) {
    return run_dashboard_bench("http://" + bench_host + ":" + std::to_string(bound_port.load()),
                               api_key, model);
  };
  server::ApiServer api(ao, registry);

  server::HttpOptions ho;
  ho.host = host;
  ho.port = static_cast<std::uint16_t>(port);
  ho.io_threads = io_threads;
  ho.body_limit = static_cast<std::size_t>(parse_size(body_limit, "--body-limit"));
  ho.sse_keepalive = ms(sse_keepalive_s);
  // Every connection is a descriptor: raise the open-files limit to its hard maximum and
  // size the connection cap from it (unless --max-connections says).
  const server::OpenFilesLimit files = server::raise_open_files_limit();
  if (!files.error.empty())
    log.log(LogLevel::kWarn, "open-files limit stays %llu: %s",
            static_cast<unsigned long long>(files.before), files.error.c_str());
  ho.max_connections =
      max_connections > 0 ? max_connections : server::connections_for_open_files(files.now);
  if (max_connections_per_client < 1)
    throw Error(ErrorCode::kInvalidArgument, "--max-connections-per-client: must be at least 1");
  ho.max_connections_per_client = max_connections_per_client;
  log.log(LogLevel::kInfo,
          "connections: at most %zu (%zu per client address); open-files limit %llu (was %llu)",
          ho.max_connections, ho.max_connections_per_client,
          static_cast<unsigned long long>(files.now),
          static_cast<unsigned long long>(files.before));
  server::HttpServer http(
      ho,
      [&api](server::HttpRequest req, std::shared_ptr<server::ResponseChannel> ch) {
        api.handle(std::move(req), std::move(ch));
      },
      [&api](const server::HttpRequest &req) { return api.refuses_on_headers(req); });
  http.start();
  api.set_http_counters(&http.counters());
  bound_port = http.port();
  std::string ids;
  for (const auto &id : registry.ids()) ids += (ids.empty() ? "" : ", ") + id;
  log.log(LogLevel::kInfo, "models: %s", ids.c_str());
  if (enable_faults)
    log.log(LogLevel::kWarn, "fault injection is on (/debug/faults): not for production");
  // Always printed (tests and scripts wait for it), whatever the level.
  std::fprintf(stderr, "keel serve: listening on http://%s:%u\n", host.c_str(),
               static_cast<unsigned>(http.port()));
  std::fflush(stderr);

  int sig = 0;
  sigwait(&stop_signals, &sig);
  using Clock = std::chrono::steady_clock;
  const auto t0 = Clock::now();
  const std::size_t at_signal = registry.requests_in_flight();
  log.log(LogLevel::kWarn,
          "%s: shutting down: no new connections; %zu request(s) in flight get %.1f s",
          sig == SIGINT ? "SIGINT" : "SIGTERM", at_signal, shutdown_grace_s);
  // Order: stop admission, drain within the grace, end what is left, stop the engines,
  // then close connections (after the error events went out) and the handlers.
  http.stop_accepting();
  api.set_draining();
  const auto grace_end = t0 + ms(shutdown_grace_s);
  while (registry.requests_in_flight() > 0 && Clock::now() < grace_end)
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  const std::size_t aborted = registry.requests_in_flight();
  if (aborted > 0)
    log.log(LogLevel::kWarn, "grace period over: ending %zu request(s) with an error", aborted);
  // Engines get a few seconds to flush and exit; past that they are killed.
  registry.shutdown(std::min(ro.unload_grace, std::chrono::milliseconds(3000)),
                    "server is shutting down");
  std::this_thread::sleep_for(std::chrono::milliseconds(aborted > 0 ? 200 : 0));
  http.stop();
  api.stop();
  std::fprintf(stderr,
               "keel serve: exited cleanly in %.1f s (%zu request(s) in flight at the signal, "
               "%zu ended at the grace period; engines stopped)\n",
               std::chrono::duration<double>(Clock::now() - t0).count(), at_signal, aborted);
  std::fflush(stderr);
  return 0;
}

}  // namespace keel::cli
