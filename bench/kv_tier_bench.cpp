// Time to first token for a long prompt that is ~99% cached, served from each cache
// tier (device, host RAM, SSD, SSD after a restart) beside the cold prefill, plus the
// bandwidths that bound a restore: disk reads (page cache dropped), host-to-device and
// device-to-host block transfers (KvBlockStore begin_load/begin_save, timed on the
// engine thread that owns the store).
//
//   kv_tier_bench --model DIR [--prompt-tokens 8192] [--threads N] [--cache-dir DIR]
//   kv_tier_bench --device cuda --shape 8b      (CUDA builds: random bf16 weights on the GPU)
//
// Each measured prompt is a shared prefix (99% of the tokens, whole blocks) plus a tail
// of its own, run with max_tokens 1 against a real Engine; the cache moves between
// tiers with Engine::demote_cache(). Before each SSD run the block files are dropped
// from the page cache (fdatasync + POSIX_FADV_DONTNEED), so SSD figures read the disk.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "engine/engine.h"
#include "exec/cpu/cpu_model_runner.h"
#ifdef KEEL_WITH_CUDA
#include "exec/cuda/cuda_context.h"
#include "exec/cuda/cuda_model_runner.h"
#endif

namespace {

using namespace keel;
using Clock = std::chrono::steady_clock;

double since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

// Drops a file's pages from the page cache (dirty pages are written first).
void drop_cache(const std::filesystem::path &f) {
  const int fd = ::open(f.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return;
  ::fdatasync(fd);
  ::posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
  ::close(fd);
}

void drop_dir_cache(const std::filesystem::path &dir) {
  std::error_code ec;
  for (auto it = std::filesystem::recursive_directory_iterator(dir, ec);
       it != std::filesystem::recursive_directory_iterator(); ++it)
    if (it->is_regular_file()) drop_cache(it->path());
}

// Sequential read bandwidth of a fresh file of `bytes` after dropping it from the page
// cache, with `threads` readers of 4 MiB preads (the block reads use 2 workers).
double disk_read_gbps(const std::filesystem::path &dir, std::size_t bytes, int threads,
                      bool direct) {
  const auto path = dir / "bench-disk.tmp";
  {
    std::vector<char> buf(4 << 20, 'k');
    const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) return 0;
    for (std::size_t at = 0; at < bytes; at += buf.size())
      if (::write(fd, buf.data(), buf.size()) < 0) break;
    ::fdatasync(fd);
    ::close(fd);
  }
  drop_cache(path);
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | (direct ? O_DIRECT : 0));
  if (fd < 0) {
    std::filesystem::remove(path);
    return 0;
  }
  const std::size_t chunk = 4 << 20;
  std::atomic<std::size_t> next{0};
  std::atomic<bool> failed{false};
  const auto t0 = Clock::now();
  std::vector<std::thread> ts;
  for (int t = 0; t < threads; ++t)
    ts.emplace_back([&] {
      void *p = nullptr;
      if (::posix_memalign(&p, 4096, chunk) != 0) return;
      for (;;) {
        const std::size_t at = next.fetch_add(chunk);
        if (at >= bytes) break;
        if (::pread(fd, p, chunk, static_cast<off_t>(at)) <= 0) {
          failed = true;
          break;
        }
      }
      std::free(p);
    });
  for (auto &t : ts) t.join();
  const double s = since(t0);
  ::close(fd);
  std::filesystem::remove(path);
  return failed ? 0 : bytes / s / 1e9;
}

struct Transfer {
  double h2d_gbps = 0, d2h_gbps = 0;
  std::size_t block_bytes = 0;
};

// Times begin_load/begin_save of `n` blocks from/to allocate_host memory. Runs on the
// engine thread inside the backend factory, so the store is used by its owner.
Transfer time_transfers(KvBlockStore &kv, std::int32_t n) {
  Transfer t;
  t.block_bytes = kv.block_bytes();
  n = std::min(n, kv.num_blocks());
  const std::size_t bytes = static_cast<std::size_t>(n) * kv.block_bytes();
  auto host = kv.allocate_host(bytes);
  std::vector<std::int32_t> blocks(n);
  for (std::int32_t i = 0; i < n; ++i) blocks[i] = i;
  for (int rep = 0; rep < 2; ++rep) {  // the first round warms up
    auto t0 = Clock::now();
    kv.wait_transfer(kv.begin_load(blocks, {host.get(), bytes}));
    t.h2d_gbps = bytes / since(t0) / 1e9;
    t0 = Clock::now();
    kv.wait_transfer(kv.begin_save(blocks, {host.get(), bytes}));
    t.d2h_gbps = bytes / since(t0) / 1e9;
  }
  return t;
}

struct Options {
  std::string model, device = "cpu", shape = "8b", cache_dir;
  int prompt_tokens = 8192, threads = 0, blocks = 0, io_threads = 8;
  double cached = 0.99;
};

#ifdef KEEL_WITH_CUDA
ModelConfig llama_shape(const std::string &name) {
  ModelConfig c;
  c.arch_name = "llama";
  c.vocab_size = 128256;
  c.rope_theta = 500000.0;
  c.rms_norm_eps = 1e-5;
  c.max_position_embeddings = 131072;
  c.num_heads = 32;
  c.num_kv_heads = 8;
  c.torch_dtype = "bfloat16";
  if (name == "1b") {
    c.hidden_size = 2048, c.intermediate_size = 8192, c.num_layers = 16, c.head_dim = 64;
    c.tie_word_embeddings = true;
  } else {
    c.hidden_size = 4096, c.intermediate_size = 14336, c.num_layers = 32, c.head_dim = 128;
  }
  return c;
}

// A CUDA runner with random weights that owns its context (destroyed after the runner).
class RandomCudaRunner final : public ModelRunner {
 public:
  RandomCudaRunner(const ModelConfig &cfg, const cuda::CudaRunnerOptions &o)
      : ctx_(std::make_unique<cuda::CudaContext>()),
        runner_(std::make_unique<cuda::CudaModelRunner>(*ctx_, cfg, 1234, o)) {}
  ~RandomCudaRunner() override { runner_.reset(); }
  const ModelConfig &config() const override { return runner_->config(); }
  KvBlockStore &kv() override { return runner_->kv(); }
  void forward(const ForwardBatch &b, ForwardOutput &out) override { runner_->forward(b, out); }

 private:
  std::unique_ptr<cuda::CudaContext> ctx_;
  std::unique_ptr<cuda::CudaModelRunner> runner_;
};
#endif

BackendFactory make_backend(const Options &o, Transfer *transfer) {
  return [o, transfer] {
    EngineBackend b;
    b.context = std::make_unique<ExecContext>(o.threads);
    if (o.device == "cpu") {
      b.runner = cpu::CpuModelRunner::open(o.model, *b.context, cpu::KvOptions{o.blocks, 16});
    } else {
#ifdef KEEL_WITH_CUDA
      cuda::CudaRunnerOptions co;
      co.block_size = 16;
      co.num_kv_blocks = o.blocks;
      co.max_model_len = o.prompt_tokens + 64;
      co.max_batch_tokens = 2048;
      b.runner = std::make_unique<RandomCudaRunner>(llama_shape(o.shape), co);
#else
      throw Error(ErrorCode::kUnsupported, "kv_tier_bench: built without CUDA");
#endif
    }
    // Also touches every KV block once, so no run below pays first-touch page faults of
    // a fresh KV arena (a long-running server has touched it long ago).
    const Transfer t = time_transfers(b.runner->kv(), b.runner->kv().num_blocks());
    if (transfer) *transfer = t;
    return b;
  };
}

struct Ttft {
  double seconds = 0;
  std::int32_t cached = 0;
  bool ok = false;
  double restore_seconds = 0;  // in LOADING_CACHE
  std::int64_t restore_blocks = 0;
};

Ttft run(Engine &e, std::uint64_t id, std::vector<TokenId> prompt) {
  const auto before = e.restore_totals();
  std::mutex mu;
  std::condition_variable cv;
  bool done = false;
  Ttft r;
  const auto t0 = Clock::now();
  GenerationRequest req;
  req.id = RequestId{id};
  req.prompt = std::move(prompt);
  req.sampling.temperature = 0;
  req.sampling.max_tokens = 1;
  req.sampling.ignore_eos = true;
  e.submit(std::move(req), [&](const RequestEvent &ev) {
    std::lock_guard lk(mu);
    if (!ev.tokens.empty() && r.seconds == 0) {
      r.seconds = since(t0);
      r.cached = ev.cached_prompt_tokens;
      r.ok = true;
    }
    if (ev.finish) {
      if (!ev.error.empty())
        std::fprintf(stderr, "request %llu: %s\n", static_cast<unsigned long long>(id),
                     ev.error.c_str());
      done = true;
      cv.notify_all();
    }
  });
  std::unique_lock lk(mu);
  cv.wait(lk, [&] { return done; });
  const auto after = e.restore_totals();
  r.restore_seconds = after.seconds - before.seconds;
  r.restore_blocks = after.blocks - before.blocks;
  return r;
}

}  // namespace

int main(int argc, char **argv) {
  CLI::App app{"kv_tier_bench: TTFT of a ~99% cached long prompt from each KV cache tier"};
  Options o;
  app.add_option("--model", o.model, "model directory (CPU)");
  app.add_option("--device", o.device, "cpu or cuda");
  app.add_option("--shape", o.shape, "CUDA random-weight shape: 1b or 8b");
  app.add_option("--prompt-tokens", o.prompt_tokens, "prompt length");
  app.add_option("--cached", o.cached, "fraction of the prompt that is cached");
  app.add_option("--threads", o.threads, "CPU compute threads (0: all)");
  app.add_option("--blocks", o.blocks, "device KV blocks (0: prompt + margin)");
  app.add_option("--cache-dir", o.cache_dir, "SSD tier directory (default: a temp dir)");
  app.add_option("--io-threads", o.io_threads, "SSD tier I/O workers (and disk-test readers)");
  CLI11_PARSE(app, argc, argv);
  if (o.device == "cpu" && o.model.empty()) {
    std::fprintf(stderr, "kv_tier_bench: --model is required on the CPU\n");
    return 2;
  }
  const int bs = 16;
  const std::int32_t prompt_blocks = (o.prompt_tokens + bs - 1) / bs;
  if (o.blocks == 0) o.blocks = prompt_blocks + 64;
  const int prefix = static_cast<int>(o.prompt_tokens * o.cached) / bs * bs;
  std::filesystem::path dir = o.cache_dir;
  bool own_dir = false;
  if (dir.empty()) {
    char tmpl[] = "/tmp/keel-tier-bench-XXXXXX";
    if (::mkdtemp(tmpl) == nullptr) return 1;
    dir = tmpl;
    own_dir = true;
  }
  std::filesystem::create_directories(dir);

  Transfer tr;
  EngineConfig cfg;
  cfg.scheduler.max_num_batched_tokens = 2048;
  cfg.scheduler.max_chunk_tokens = 2048;
  cfg.scheduler.max_num_seqs = 8;
  cfg.model_fingerprint = o.device + ":" + (o.device == "cpu" ? o.model : o.shape);
  cfg.max_model_len = o.prompt_tokens + 64;
  cfg.tier_flush_timeout = std::chrono::seconds(120);
  auto t0 = Clock::now();
  auto engine = std::make_unique<Engine>(make_backend(o, &tr), cfg);
  const double load_s = since(t0);
  const std::size_t prompt_bytes = static_cast<std::size_t>(prefix / bs) * tr.block_bytes;
  // Host RAM holds the prompt twice over; the SSD tier 4 times.
  cfg.tiers.host_bytes = static_cast<std::int64_t>(2 * prompt_bytes + (64 << 20));
  cfg.tiers.ssd_dir = dir;
  cfg.tiers.ssd_bytes = static_cast<std::int64_t>(4 * prompt_bytes + (64 << 20));
  cfg.tiers.io_threads = o.io_threads;
  std::mt19937 rng(7);
  const int vocab =
      static_cast<int>(std::max<std::int64_t>(engine->model_config().vocab_size - 3, 1));
  auto tokens = [&](int n) {
    std::vector<TokenId> v(n);
    for (auto &t : v) t = static_cast<TokenId>(3 + rng() % vocab);
    return v;
  };
  const auto shared = tokens(prefix);
  auto prompt = [&] {
    auto p = shared;
    auto tail = tokens(o.prompt_tokens - prefix);
    p.insert(p.end(), tail.begin(), tail.end());
    return p;
  };
  engine.reset();  // reopened with tiers now that the block size is known
  engine = std::make_unique<Engine>(make_backend(o, nullptr), cfg);
  engine->clear_cache();  // a clean start: nothing from an earlier run

  const std::size_t disk_bytes = std::max<std::size_t>(prompt_bytes, 256 << 20);
  const double disk_2 = disk_read_gbps(dir, disk_bytes, 2, false);
  const double disk_buffered = disk_read_gbps(dir, disk_bytes, o.io_threads, false);
  const double disk_direct = disk_read_gbps(dir, disk_bytes, o.io_threads, true);

  std::printf(
      "# kv_tier_bench: device %s, model %s, prompt %d tokens, %d cached (%.1f%%), "
      "block %zu bytes, restored bytes %.1f MB; engine load %.1f s\n",
      o.device.c_str(), o.device == "cpu" ? o.model.c_str() : o.shape.c_str(), o.prompt_tokens,
      prefix, 100.0 * prefix / o.prompt_tokens, tr.block_bytes, prompt_bytes / 1e6, load_s);
  std::printf(
      "# disk read (page cache dropped, 4 MiB preads): %.2f GB/s with 2 readers; with %d "
      "readers %.2f GB/s buffered, %.2f GB/s O_DIRECT; host->device %.2f GB/s, device->host "
      "%.2f GB/s (all %d blocks, one batched transfer)\n",
      disk_2, o.io_threads, disk_buffered, disk_direct, tr.h2d_gbps, tr.d2h_gbps, o.blocks);

  std::uint64_t id = 1;
  struct Row {
    const char *tier;
    Ttft t;
  };
  std::vector<Row> rows;
  // Warm-up (not reported): a prompt as long as the uncached tail, so the first
  // measured cache hit does not pay first-use costs of that batch shape.
  run(*engine, id++, tokens(o.prompt_tokens - prefix));
  rows.push_back({"cold prefill", run(*engine, id++, prompt())});
  rows.push_back({"device", run(*engine, id++, prompt())});
  engine->demote_cache(false).get();
  rows.push_back({"host RAM", run(*engine, id++, prompt())});
  engine->demote_cache(true).get();
  drop_dir_cache(dir);
  rows.push_back({"SSD", run(*engine, id++, prompt())});
  const auto st1 = engine->status();
  engine.reset();  // flushes to SSD; a restart reads only the directory listing
  drop_dir_cache(dir);
  t0 = Clock::now();
  engine = std::make_unique<Engine>(make_backend(o, nullptr), cfg);
  const double restart_s = since(t0);
  run(*engine, id++, tokens(o.prompt_tokens - prefix));  // warm-up, as above
  rows.push_back({"SSD after restart", run(*engine, id++, prompt())});
  const auto st2 = engine->status();

  std::printf("%-18s %10s %8s %14s %12s %14s\n", "tier", "TTFT ms", "cached", "restored blk",
              "restore ms", "restore GB/s");
  for (const Row &r : rows) {
    char ms[32] = "-", gbps[32] = "-";
    if (r.t.restore_blocks > 0) {
      std::snprintf(ms, sizeof ms, "%.1f", r.t.restore_seconds * 1e3);
      std::snprintf(
          gbps, sizeof gbps, "%.2f",
          r.t.restore_blocks * static_cast<double>(tr.block_bytes) / r.t.restore_seconds / 1e9);
    }
    std::printf("%-18s %10.1f %8d %14lld %12s %14s%s\n", r.tier, r.t.seconds * 1e3, r.t.cached,
                static_cast<long long>(r.t.restore_blocks), ms, gbps, r.t.ok ? "" : "  (failed)");
  }
  std::printf("# restore ms: time in LOADING_CACHE (lookup done to blocks landed on the device)\n");
  std::printf(
      "# first engine: host hits %lld blocks, SSD hits %lld, SSD stored %lld, errors %lld; "
      "after restart (engine up in %.2f s): SSD index %lld blocks, hits %lld, errors %lld\n",
      static_cast<long long>(st1.host_tier.hit_blocks),
      static_cast<long long>(st1.ssd_tier.hit_blocks),
      static_cast<long long>(st1.ssd_tier.stored_blocks),
      static_cast<long long>(st1.ssd_tier.errors), restart_s,
      static_cast<long long>(st2.ssd_tier.blocks), static_cast<long long>(st2.ssd_tier.hit_blocks),
      static_cast<long long>(st2.ssd_tier.errors));
  engine.reset();
  if (own_dir) std::filesystem::remove_all(dir);
  return 0;
}
