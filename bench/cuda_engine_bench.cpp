// The whole engine (scheduler, KV cache manager, batch building, sampling, events) on
// the CUDA runner with pseudo-random weights of the Llama 3.2 1B / 3.1 8B shapes: N
// concurrent requests of P random prompt tokens and O output tokens each (ignore_eos),
// sampled at the given temperature on the GPU (forward_sample) or on the host (logits
// copied back, the CPU Sampler on the engine thread). Prints wall time, output tokens/s
// over the whole run, and decode tokens/s once every request has its first token.
//
//   cuda_engine_bench [--model 1b|8b] [--seqs 64,256] [--prompt 512] [--output 128]
//                     [--temperature 1.0] [--top-k 0] [--sampling device,host]
//                     [--constraint none|json]
// --constraint json: every request decodes under a JSON schema (structured output, the
// masks made while the forward runs and applied by the device sampler).
#include <cstdio>

#if !defined(KEEL_WITH_CUDA)
int main() {
  std::puts("cuda_engine_bench: built without CUDA");
  return 0;
}
#else
#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <mutex>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "bench_args.h"
#include "engine/engine.h"
#include "exec/cuda/cuda_engine_runner.h"
#include "formats/make_model.h"
#include "grammar/output_constraints.h"
#include "grammar/token_vocab.h"

using namespace keel;
using Clock = std::chrono::steady_clock;

namespace {

struct Options {
  std::string model = "8b";
  std::vector<int> seqs = {64, 256};
  int prompt = 512, output = 128, top_k = 0;
  float temperature = 1.0f;
  std::vector<std::string> sampling = {"device", "host"};
  std::string constraint = "none";  // or json: every request under kJsonSchema below
};

// A JSON schema no request of --output tokens completes (ignore_eos never meets a
// finished document): keys, strings and integers in turn (issue 17's decode overhead).
constexpr const char *kJsonSchema =
    R"({"type":"array","minItems":100,"items":{"type":"object","properties":{"name":)"
    R"({"type":"string","maxLength":8},"age":{"type":"integer"}},"required":["name","age"]}})";

// A synthetic vocabulary of the model's width (random weights have no tokenizer): the 256
// bytes, then pieces of JSON-ish text of 2-8 bytes, the last id EOS.
std::shared_ptr<const grammar::TokenVocab> synthetic_vocab(std::int64_t size) {
  const std::string alphabet =
      "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789 \"{}[]:,.-_\n";
  std::mt19937 rng(5);
  std::vector<std::string> bytes(size);
  for (std::int64_t i = 0; i < size - 1; ++i) {
    if (i < 256) {
      bytes[i] = std::string(1, static_cast<char>(i));
      continue;
    }
    const int len = 2 + static_cast<int>(rng() % 7);
    for (int k = 0; k < len; ++k) bytes[i] += alphabet[rng() % alphabet.size()];
  }
  const TokenId eos = static_cast<TokenId>(size - 1);
  return std::make_shared<const grammar::TokenVocab>(std::move(bytes), std::vector<TokenId>{eos},
                                                     std::vector<TokenId>{});
}

// Times the runner's part of every step (enqueue, GPU work, the wait for its results),
// so the rest of the wall time is the engine's host work while the GPU idles.
class TimingRunner final : public ModelRunner {
 public:
  explicit TimingRunner(std::unique_ptr<ModelRunner> r) : r_(std::move(r)) {}
  const ModelConfig &config() const override { return r_->config(); }
  KvBlockStore &kv() override { return r_->kv(); }
  void forward(const ForwardBatch &b, ForwardOutput &out) override {
    const auto t0 = Clock::now();
    r_->forward(b, out);
    add(t0);
  }
  bool samples_on_device() const override { return r_->samples_on_device(); }
  bool masks_on_device() const override { return r_->masks_on_device(); }
  void forward_sample(const ForwardBatch &b, std::span<const DeviceSampleRow> rows,
                      ForwardOutput &out) override {
    const auto t0 = Clock::now();
    r_->forward_sample(b, rows, out);
    add(t0);
  }
  double take_seconds() { return std::exchange(seconds_, 0.0); }

 private:
  void add(Clock::time_point t0) {
    seconds_ += std::chrono::duration<double>(Clock::now() - t0).count();
  }
  std::unique_ptr<ModelRunner> r_;
  double seconds_ = 0;  // engine thread only; read after the run has finished
};

struct Result {
  double wall_s = 0, first_all_s = 0, runner_s = 0;
  std::int64_t tokens = 0, decode_tokens = 0, steps = 0;
  int errors = 0;
};

// Counts what the engine emits; wakes the waiter when every request has finished.
class Tally {
 public:
  explicit Tally(int n) : first_(n, 0), left_(n) {}
  EventSink sink(Clock::time_point start) {
    return [this, start](const RequestEvent &ev) {
      std::lock_guard lk(mu_);
      tokens_ += static_cast<std::int64_t>(ev.tokens.size());
      const auto i = static_cast<std::size_t>(ev.id.value - 1);
      if (!ev.tokens.empty() && !first_[i]) {
        first_[i] = 1;
        if (++with_first_ == static_cast<int>(first_.size())) {
          first_all_s_ = std::chrono::duration<double>(Clock::now() - start).count();
          tokens_at_first_all_ = tokens_;
        }
      }
      if (ev.finish) {
        if (*ev.finish == FinishReason::kError) ++errors_;
        if (--left_ == 0) cv_.notify_all();
      }
    };
  }
  bool wait(std::chrono::seconds timeout) {
    std::unique_lock lk(mu_);
    return cv_.wait_for(lk, timeout, [&] { return left_ == 0; });
  }
  std::int64_t tokens() const { return tokens_; }
  double first_all_s() const { return first_all_s_; }
  std::int64_t tokens_at_first_all() const { return tokens_at_first_all_; }
  int errors() const { return errors_; }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<char> first_;
  int left_, with_first_ = 0, errors_ = 0;
  std::int64_t tokens_ = 0, tokens_at_first_all_ = 0;
  double first_all_s_ = 0;
};

Result run(const Options &o, int seqs, bool device) {
  MakeModelOptions mo;
  mo.shape = o.model;
  const ModelConfig cfg = make_model_config(mo);
  const int block = 16;
  const int per_seq = (o.prompt + o.output + block - 1) / block + 1;
  EngineConfig ec;
  ec.device_sampling = device;
  ec.enable_prefix_caching = false;
  ec.scheduler.max_num_seqs = seqs;
  ec.scheduler.max_num_batched_tokens = std::max(8192, seqs);
  if (o.constraint == "json")
    ec.make_constraint = grammar::output_constraint_factory(synthetic_vocab(cfg.vocab_size));
  TimingRunner *timing = nullptr;
  Engine engine(
      [&] {
        cuda::CudaRunnerOptions ro;
        ro.block_size = block;
        ro.num_kv_blocks = seqs * per_seq + 64;
        ro.max_model_len = o.prompt + o.output + block;
        ro.max_seqs = seqs;
        ro.max_logits_rows = seqs;
        ro.max_batch_tokens = ec.scheduler.max_num_batched_tokens;
        ro.gpu_sampling = true;
        EngineBackend b;
        auto t = std::make_unique<TimingRunner>(cuda::OwningCudaRunner::random(cfg, 0, 7, ro));
        timing = t.get();
        b.runner = std::move(t);
        return b;
      },
      ec);
  auto submit_all = [&](Tally &t, Clock::time_point start, int n, int prompt, int output) {
    std::mt19937 rng(11);
    for (int i = 0; i < n; ++i) {
      GenerationRequest r;
      r.id = RequestId{static_cast<std::uint64_t>(i + 1)};
      r.prompt.resize(prompt);
      for (auto &tok : r.prompt) tok = static_cast<TokenId>(rng() % (cfg.vocab_size - 1000));
      r.sampling.max_tokens = output;
      r.sampling.ignore_eos = true;
      r.sampling.temperature = o.temperature;
      r.sampling.top_k = o.top_k;
      r.sampling.seed = 100 + i;
      if (o.constraint == "json") {
        r.sampling.constraint_kind = "json_schema";
        r.sampling.constraint_text = kJsonSchema;
      }
      engine.submit(std::move(r), t.sink(start));
    }
  };
  {  // Warm-up: graphs for every decode bucket up to `seqs`, GEMM plans, sampling scratch.
    Tally warm(seqs);
    submit_all(warm, Clock::now(), seqs, 32, 8);
    warm.wait(std::chrono::seconds(300));
  }
  const std::uint64_t steps0 = engine.status().steps;
  timing->take_seconds();  // the engine is idle: warm-up finished
  Tally t(seqs);
  const auto start = Clock::now();
  submit_all(t, start, seqs, o.prompt, o.output);
  const bool done = t.wait(std::chrono::seconds(600));
  Result r;
  r.wall_s = std::chrono::duration<double>(Clock::now() - start).count();
  r.first_all_s = t.first_all_s();
  r.tokens = t.tokens();
  r.decode_tokens = t.tokens() - t.tokens_at_first_all();
  r.errors = t.errors() + (done ? 0 : seqs);
  r.steps = static_cast<std::int64_t>(engine.status().steps - steps0);
  r.runner_s = timing->take_seconds();
  return r;
}

}  // namespace

int main(int argc, char **argv) {
  Options o;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string k = argv[i], v = argv[i + 1];
    if (k == "--model")
      o.model = v;
    else if (k == "--seqs") {
      o.seqs = bench::int_list(v);
    } else if (k == "--prompt")
      o.prompt = std::stoi(v);
    else if (k == "--output")
      o.output = std::stoi(v);
    else if (k == "--temperature")
      o.temperature = std::stof(v);
    else if (k == "--top-k")
      o.top_k = std::stoi(v);
    else if (k == "--sampling")
      o.sampling = bench::comma_list(v);
    else if (k == "--constraint")
      o.constraint = v;
    else {
      std::fprintf(stderr, "cuda_engine_bench: unknown option %s\n", k.c_str());
      return 2;
    }
  }
  try {
    std::printf(
        "# engine on CUDA, %s shape, prompt %d, output %d, temperature %g, top_k %d, "
        "constraint %s\n",
        o.model.c_str(), o.prompt, o.output, o.temperature, o.top_k, o.constraint.c_str());
    std::printf(
        "| seqs | sampling | wall s | steps | ms/step | runner ms/step | output tok/s | decode "
        "tok/s | errors |\n");
    std::printf(
        "|-----:|----------|-------:|------:|--------:|---------------:|-------------:|---------"
        "----:|-------:|\n");
    for (int seqs : o.seqs)
      for (const auto &mode : o.sampling) {
        const Result r = run(o, seqs, mode == "device");
        const double decode_tokens = static_cast<double>(r.decode_tokens);
        const double decode_s = r.wall_s - r.first_all_s;
        const double steps = static_cast<double>(std::max<std::int64_t>(r.steps, 1));
        std::printf("| %4d | %-8s | %6.2f | %5lld | %7.2f | %14.2f | %12.0f | %12.0f | %6d |\n",
                    seqs, mode.c_str(), r.wall_s, static_cast<long long>(r.steps),
                    1e3 * r.wall_s / steps, 1e3 * r.runner_s / steps, r.tokens / r.wall_s,
                    decode_s > 0 ? decode_tokens / decode_s : 0.0, r.errors);
        std::fflush(stdout);
      }
  } catch (const std::exception &e) {
    std::fprintf(stderr, "cuda_engine_bench: %s\n", e.what());
    return 1;
  }
  return 0;
}
#endif  // KEEL_WITH_CUDA
