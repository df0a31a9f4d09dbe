// `keel engine` (internal): one engine child process. The front spawns it with a
// connected Unix socket on --fd; it loads the model, says hello, then serves the
// engine over framed messages until the front closes the socket or asks it to stop.
// It dies with the front: PR_SET_PDEATHSIG (set again here, in case an exec'ing
// wrapper cleared it) and the socket's EOF, whichever comes first.
#include <signal.h>
#include <sys/prctl.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <sstream>

#include "cli/commands.h"
#include "core/error.h"
#include "engine/engine.h"
#include "engine/ipc/progress_sender.h"
#include "engine/ipc/server.h"
#include "engine/tp/backend.h"
#include "engine/weight_prefetch.h"
#include "exec/cpu/cpu_model_runner.h"
#include "grammar/output_constraints.h"
#include "kv/kv_sizing.h"
#include "registry/log.h"
#include "registry/memory_plan.h"
#include "registry/model_registry.h"
#include "text/tokenizer.h"
#include "text/vocab_match.h"
#ifdef KEEL_WITH_CUDA
#include "exec/cuda/cuda_engine_runner.h"
#include "exec/cuda/cuda_info.h"
#endif

namespace keel::cli {

namespace {

// Names what produced the KV blocks, for cache keys that persist on SSD: the model's
// path, the size and modification time of its weight files (replaced weights at the
// same path must not hit), and the backend (CPU and CUDA kernels round differently).
// The runner adds the KV dtype and layout (block size and bytes) to the SSD directory.
std::string fingerprint_of(const std::string &model, const std::string &device) {
  std::ostringstream s;
  std::error_code ec;
  const std::filesystem::path path = std::filesystem::absolute(model, ec);
  s << "model=" << path.string() << ";backend=" << (device == "cpu" ? "cpu" : "cuda");
  auto stamp = [&](const std::filesystem::path &f) {
    std::error_code e;
    const auto size = std::filesystem::file_size(f, e);
    const auto mtime = std::filesystem::last_write_time(f, e).time_since_epoch().count();
    s << ";" << f.filename().string() << ":" << size << ":" << mtime;
  };
  if (std::filesystem::is_directory(path, ec)) {
    std::vector<std::filesystem::path> files;
    for (const auto &f : std::filesystem::directory_iterator(path, ec)) {
      const auto ext = f.path().extension();
      if (ext == ".safetensors" || ext == ".gguf" || f.path().filename() == "config.json")
        files.push_back(f.path());
    }
    std::sort(files.begin(), files.end());
    for (const auto &f : files) stamp(f);
  } else {
    stamp(path);
  }
  return s.str();
}

}  // namespace

// Where either model has no tokenizer to read, make_drafter still compares the
// vocabularies' sizes.
void check_draft_tokenizer(const std::filesystem::path &model, const std::string &method) {
  std::unique_ptr<Tokenizer> target, draft;
  try {
    target = Tokenizer::load(model);
    draft = Tokenizer::load(*draft_model_path(method));
  } catch (const Error &) {
    return;
  }
  if (const std::string diff = vocab_difference(*target, *draft); !diff.empty())
    throw Error(ErrorCode::kInvalidArgument, "--speculative " + method +
                                                 ": the draft model's tokenizer is not the "
                                                 "target's (" +
                                                 diff + ")");
}

int cmd_engine(int argc, char **argv) {
  CLI::App app{"keel engine: one engine process (started by keel serve)"};
  int fd = -1;
  std::string model, device = "cpu";
  int threads = 0, max_concurrent = 256, kv_blocks = 0, block_size = 16, heartbeat_ms = 100,
      max_model_len = 0;
  std::int64_t max_kv_tokens = 0;
  double gpu_memory_fraction = kDefaultGpuMemoryFraction;
  std::string cache_dir, hot_cache, ssd_cache;
  app.add_option("--fd", fd, "connected socket to the front")->required();
  app.add_option("--model", model, "model directory or .gguf file")->required();
  app.add_option("--device", device, "cpu or cuda[:N]");
  app.add_option("--threads", threads, "compute threads (0: all cores)");
  app.add_option("--max-concurrent", max_concurrent, "running requests at most");
  app.add_option("--kv-blocks", kv_blocks, "KV cache blocks (0: sized from memory)");
  app.add_option("--max-kv-tokens", max_kv_tokens, "KV cache tokens (0: sized from memory)");
  app.add_option("--gpu-memory-fraction", gpu_memory_fraction,
                 "CUDA: this engine's share of the device's memory (weights, buffers, KV)");
  app.add_option("--block-size", block_size, "tokens per KV block");
  app.add_option("--max-model-len", max_model_len, "longest sequence (0: the model's)");
  app.add_option("--heartbeat-ms", heartbeat_ms, "status report interval");
  int cache_io_threads = 4;
  app.add_option("--cache-dir", cache_dir,
                 "SSD cache directory (KV blocks persist across restarts)");
  app.add_option("--hot-cache-size", hot_cache,
                 "host RAM KV cache size, e.g. 8G (default 0: none)");
  app.add_option("--ssd-cache-size", ssd_cache,
                 "SSD KV cache size, e.g. 100G (default with --cache-dir: 16G)");
  app.add_option("--cache-io-threads", cache_io_threads, "SSD cache I/O threads");
  bool host_sampling = false;
  app.add_flag("--host-sampling", host_sampling,
               "sample on the CPU even where the runner can sample on its GPU");
  std::string speculative;
  int num_speculative_tokens = 4, spec_max_running = 4;
  bool spec_adaptive = true;
  app.add_option("--speculative", speculative,
                 "draft tokens to verify several per step: off, ngram, mtp, draft:PATH or "
                 "eagle3:PATH (an EAGLE-3 head); each on the CPU or CUDA runner");
  app.add_option("--num-speculative-tokens", num_speculative_tokens, "drafts per step at most")
      ->check(CLI::Range(1, 16));
  app.add_option("--speculative-max-running", spec_max_running,
                 "no drafts while this many requests run (0: no limit)")
      ->check(CLI::Range(0, 1 << 20));
  app.add_option("--speculative-adaptive", spec_adaptive,
                 "draft only where measured faster a token than without (on / off)");
  int tensor_parallel = 1;
  app.add_option("--tensor-parallel", tensor_parallel,
                 "processes that split the model (worker ranks are children of this one)")
      ->check(CLI::Range(1, 64));
  int slow_load_ms = 0;
  app.add_option("--fault-slow-load-ms", slow_load_ms,
                 "tests only (keel serve --fault-slow-load): reading the weights takes at "
                 "least this long")
      ->check(CLI::Range(0, 600000));
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError &e) {
    return app.exit(e);
  }
  ::prctl(PR_SET_PDEATHSIG, SIGKILL);
  ::signal(SIGPIPE, SIG_IGN);
  // A file-size limit makes SSD cache writes fail with EFBIG (a counted cache error)
  // instead of killing the engine.
  ::signal(SIGXFSZ, SIG_IGN);

  ipc::IpcEngineServer server(fd, std::chrono::milliseconds(heartbeat_ms));
  // Load progress goes to the front until the hello (or the load error) is sent.
  ipc::ProgressSender progress(fd);
  // keel serve passes its --log-level down through the environment.
  if (const char *lv = std::getenv("KEEL_LOG_LEVEL"))
    if (auto level = parse_log_level(lv)) server.set_log_info(*level >= LogLevel::kInfo);
  std::unique_ptr<Engine> engine;
  std::atomic<std::int64_t> kv_bytes{0}, workspace_bytes{0}, device_total{0}, device_weights{0};
  std::string kv_rule, weights_format;
  std::int64_t host_tier = 0;
  try {
#ifndef KEEL_WITH_CUDA
    if (device != "cpu")
      throw Error(ErrorCode::kUnsupported,
                  "--device " + device + ": this build has only the cpu backend");
#else
    // Parsed here, before the engine starts, so a bad spec is a load error, not a crash.
    const int cuda_device = device == "cpu" ? -1 : cuda::parse_cuda_device(device);
#endif
    if (tensor_parallel > 1 && device != "cpu")
      throw Error(ErrorCode::kUnsupported,
                  "--tensor-parallel: the CUDA runner is not sharded yet (CPU ranks only)");
    EngineConfig cfg;
    cfg.scheduler.max_num_seqs = max_concurrent;
    // Every running request must fit one decode token into a step's budget.
    cfg.scheduler.max_num_batched_tokens =
        std::max(cfg.scheduler.max_num_batched_tokens, max_concurrent);
    cfg.max_model_len = max_model_len;
    cfg.device_sampling = !host_sampling;
    cfg.speculative.method = parse_speculative_method(speculative);
    if (draft_model_path(cfg.speculative.method))
      check_draft_tokenizer(model, cfg.speculative.method);
    cfg.speculative.num_speculative_tokens = num_speculative_tokens;
    cfg.speculative.max_running = spec_max_running;
    cfg.speculative.adaptive = spec_adaptive;
    cfg.make_constraint = grammar::output_constraint_factory(model);
    cfg.model_fingerprint = fingerprint_of(model, device);
    if (!hot_cache.empty())
      cfg.tiers.host_bytes = host_tier = parse_size(hot_cache, "--hot-cache-size");
    if (!cache_dir.empty()) {
      cfg.tiers.ssd_dir = cache_dir;
      cfg.tiers.ssd_bytes =
          ssd_cache.empty() ? std::int64_t{16} << 30 : parse_size(ssd_cache, "--ssd-cache-size");
    }
    cfg.tiers.io_threads = std::max(cache_io_threads, 1);
    const std::filesystem::path path = model;
    const KvOverride kv_override{kv_blocks, max_kv_tokens};
    cfg.on_load_progress = progress.sink();
    // CPU pool: explicit, or the host rule (kv/kv_sizing.h) from the config and
    // MemAvailable. `keel serve` passes the size it budgeted as --kv-blocks.
    int cpu_blocks = kv_blocks;
    if (device == "cpu") {
      MemoryPlanOptions po;
      po.block_size = block_size;
      po.max_model_len = max_model_len;
      po.kv = kv_override;
      po.host_tier_bytes = host_tier;
      po.mem_available = host_mem_available().value_or(0);
      const ModelMemoryPlan plan =
          plan_model_memory(read_model_config(path), weight_file_bytes(path), po);
      if (!plan.refusal.empty())
        throw Error(ErrorCode::kResourceExhausted, kMemoryRefusalTag + plan.refusal);
      cpu_blocks = static_cast<int>(plan.kv_blocks);
      kv_rule = plan.rule;
    }
    {
      PrefetchOptions po;
      // Files that would not stay cached are read by the runner itself, once.
      po.max_bytes = host_mem_available().value_or(0) / 4 * 3;
      po.slow_down = std::chrono::milliseconds(slow_load_ms);
      prefetch_weights(weight_files_of(path), po, [&](std::int64_t done, std::int64_t total) {
        progress.report({"reading weights", done, total, "bytes"});
      });
    }
    engine = std::make_unique<Engine>(
        [&, path] {
          EngineBackend b;
          if (tensor_parallel > 1) {
            // Worker ranks are tied to the thread that starts them: the engine thread.
            progress.report({"starting tensor-parallel ranks", 0, 0, ""});
            tp::CpuTpBackendOptions o;
            o.model = path;
            o.tensor_parallel = tensor_parallel;
            o.threads = threads;
            o.num_blocks = cpu_blocks;
            o.block_size = block_size;
            b = tp::make_cpu_tp_backend(o);
          } else {
            // The CPU context also serves the sampler when the runner is on a GPU.
            b.context = std::make_unique<ExecContext>(threads);
#ifdef KEEL_WITH_CUDA
            if (cuda_device >= 0) {
              cuda::CudaRunnerOptions opts;
              opts.block_size = block_size;
              // Sized on the device after the weights and buffers (plan_device_kv).
              opts.num_kv_blocks = 0;
              opts.kv_blocks_for = [&](const cuda::DeviceMemory &m, std::int64_t block_bytes) {
                DeviceKvInputs in;
                in.block_size = block_size;
                in.block_bytes = block_bytes;
                in.total_bytes = m.total;
                in.free_at_open = m.free_at_open;
                in.free_now = m.free_now;
                in.fraction = gpu_memory_fraction;
                in.override_ = kv_override;
                // A model larger than its share (a mixture of experts) may take what a
                // minimal pool needs beyond it, when the device has that free.
                in.context_tokens = max_model_len > 0 ? max_model_len : kMinPoolTokens;
                const KvPlan kp = plan_device_kv(in);
                if (!kp.refusal.empty())
                  throw Error(ErrorCode::kResourceExhausted, kMemoryRefusalTag + kp.refusal);
                kv_rule = kp.rule;
                return static_cast<std::int32_t>(kp.blocks);
              };
              opts.max_model_len = max_model_len;
              opts.max_seqs = std::max(opts.max_seqs, cfg.scheduler.max_num_seqs);
              opts.max_logits_rows = std::max(opts.max_logits_rows, cfg.scheduler.max_num_seqs);
              opts.max_batch_tokens =
                  std::max(opts.max_batch_tokens, cfg.scheduler.max_num_batched_tokens);
              opts.gpu_sampling = !host_sampling;
              // GGUF blocks on the device (issue #18): KEEL_QUANTIZED_WEIGHTS=on|off|auto,
              // read here so `keel serve` passes it to its engines through the environment.
              if (const char *q = std::getenv("KEEL_QUANTIZED_WEIGHTS")) {
                const std::string v = q;
                if (v == "on")
                  opts.quantized_weights = cuda::QuantizedWeights::kOn;
                else if (v == "off")
                  opts.quantized_weights = cuda::QuantizedWeights::kOff;
                else if (v != "auto")
                  throw Error(ErrorCode::kInvalidArgument,
                              "KEEL_QUANTIZED_WEIGHTS: expected on, off or auto, got " + v);
              }
              // The share must be free before the weights load: otherwise the upload
              // runs out of memory and the load fails as a crash, not a 507.
              long long free_b = 0, total_b = 0;
              if (kv_override.blocks <= 0 && kv_override.tokens <= 0 &&
                  cuda::device_memory(cuda_device, &free_b, &total_b)) {
                const std::string refusal =
                    device_share_refusal(total_b, free_b, gpu_memory_fraction);
                if (!refusal.empty())
                  throw Error(ErrorCode::kResourceExhausted, kMemoryRefusalTag + refusal);
              }
              // Conversion, upload, buffers and CUDA graphs: not counted inside (exec/cuda).
              progress.report({"uploading to device", 0, 0, ""});
              auto runner = cuda::OwningCudaRunner::open(path, cuda_device, opts);
              device_total = runner->runner().device_total_bytes();
              device_weights = static_cast<std::int64_t>(runner->runner().weight_bytes());
              workspace_bytes = std::max<std::int64_t>(
                  runner->runner().buffer_bytes() -
                      static_cast<std::int64_t>(runner->runner().weight_bytes()),
                  0);
              b.runner = std::move(runner);
            } else
#endif
            {
              progress.report({"preparing weights", 0, 0, ""});
              b.runner = cpu::CpuModelRunner::open(path, *b.context,
                                                   cpu::KvOptions{cpu_blocks, block_size});
            }
          }
          kv_bytes =
              static_cast<std::int64_t>(b.runner->kv().block_bytes()) * b.runner->kv().num_blocks();
          weights_format = b.runner->weight_format();
          return b;
        },
        cfg);
  } catch (const std::exception &e) {
    progress.finish();
    std::fprintf(stderr, "keel engine: %s: %s\n", model.c_str(), e.what());
    server.send_load_error(std::string(model) + ": " + e.what());
    return 1;
  }
  ipc::ReadyInfo info;
  info.context_length = engine->max_model_len();
  info.vocab_size = engine->model_config().vocab_size;
  info.eos_token_ids = engine->model_config().eos_token_ids;
  // Weights as stored where they live: the mapped files on the CPU, the device copy on CUDA.
  const std::int64_t weights =
      device_weights.load() > 0 ? device_weights.load() : weight_file_bytes(model);
  info.weights_bytes = weights;
  info.weights_format = weights_format;
  info.kv_bytes = kv_bytes.load();
  info.workspace_bytes = workspace_bytes.load();
  info.host_tier_bytes = host_tier;
  info.kv_block_size = block_size;
  info.device_total_bytes = device_total.load();
  info.kv_rule = kv_rule;
  info.memory_bytes = info.weights_bytes + info.kv_bytes + info.workspace_bytes + host_tier;
  info.pid = ::getpid();
  info.backend = device;
  progress.finish();  // its last frame goes before the hello
  const int rc = server.serve(*engine, info);
  engine->stop(std::chrono::steady_clock::now() + std::chrono::seconds(5));
  return rc;
}

}  // namespace keel::cli
