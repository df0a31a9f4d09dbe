// CPU time per step of the scheduler and KV cache manager with 256 running sequences,
// excluding the forward pass and sampling: schedule(), on_step_done() (computed counts,
// caching of newly full blocks) and appending the sampled tokens, with requests
// finishing and new ones (sharing prompt prefixes) admitted to keep 256 running.
// Second part: the whole engine loop over a null model (logits of a 32-token vocab),
// which adds batch building, sampling, events and status publishing.
//
//   sched_bench [--steps N]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <random>
#include <string>
#include <vector>

#include "engine/engine.h"
#include "sched/scheduler.h"

using namespace keel;
using Clock = std::chrono::steady_clock;

// CPU time of the calling thread (or process), in microseconds: the machine is shared,
// so wall time would count other processes' turns on the cores.
double cpu_us(clockid_t clock = CLOCK_THREAD_CPUTIME_ID) {
  timespec ts;
  clock_gettime(clock, &ts);
  return ts.tv_sec * 1e6 + ts.tv_nsec * 1e-3;
}

namespace {

struct Stats {
  double median_us, p99_us, mean_us;
};

Stats summarize(std::vector<double> us) {
  std::sort(us.begin(), us.end());
  double sum = 0;
  for (double v : us) sum += v;
  return {us[us.size() / 2], us[us.size() * 99 / 100], sum / us.size()};
}

std::vector<TokenId> make_prompt(std::mt19937 &rng, const std::vector<std::vector<TokenId>> &sys) {
  std::vector<TokenId> p = sys[rng() % sys.size()];  // a shared system prompt
  const int tail = 32 + static_cast<int>(rng() % 480);
  for (int i = 0; i < tail; ++i) p.push_back(static_cast<TokenId>(rng() % 32000));
  return p;
}

void bench_scheduler(int steps) {
  const int kSeqs = 256, kBs = 16;
  KvCacheConfig kc;
  kc.block_size = kBs;
  kc.num_blocks = kSeqs * (1024 + 512) / kBs;  // room for every sequence's longest life
  kc.model = ModelFingerprint::of("bench");
  KvCacheManager kv(kc);
  SchedulerConfig sc;
  sc.max_num_batched_tokens = 2048;
  sc.max_num_seqs = kSeqs;
  sc.max_chunk_tokens = 512;
  Scheduler sched(sc, kv);
  std::mt19937 rng(1);
  std::vector<std::vector<TokenId>> sys(8);
  for (auto &s : sys)
    for (int i = 0; i < 256; ++i) s.push_back(static_cast<TokenId>(rng() % 32000));
  // Prompts and lengths are made before timing; admission moves them in.
  std::vector<std::vector<TokenId>> prompts(kSeqs + 4 * steps + 1024);
  std::vector<std::int32_t> max_out(prompts.size());
  for (std::size_t i = 0; i < prompts.size(); ++i) {
    prompts[i] = make_prompt(rng, sys);
    max_out[i] = 64 + static_cast<int>(rng() % 448);
  }
  std::uint64_t next_id = 0;
  auto add = [&] {
    const RequestId id{next_id++};
    sched.add_request(id, std::move(prompts.at(id.value)));
  };
  for (int i = 0; i < kSeqs; ++i) add();

  std::vector<double> sched_us, total_us;
  std::int64_t tokens = 0, prefill_steps = 0;
  std::vector<RequestId> done;
  const int warmup = 200;
  for (int step = 0; step < warmup + steps; ++step) {
    const double t0 = cpu_us();
    StepPlan plan = sched.schedule();
    const double t1 = cpu_us();
    sched.on_step_done(plan);
    done.clear();
    for (const ScheduledSeq &s : plan.seqs) {
      if (!s.samples) continue;
      sched.append_token(s.id, static_cast<TokenId>(rng() % 32000));
      const SchedRequest *r = sched.find(s.id);
      if (r->num_output_tokens() >= max_out[s.id.value]) done.push_back(s.id);
    }
    for (RequestId id : done) {
      sched.finish(id, RequestState::kFinishedLength);
      add();
    }
    const double t2 = cpu_us();
    if (step >= warmup) {
      sched_us.push_back(t1 - t0);
      total_us.push_back(t2 - t0);
      tokens += plan.total_tokens;
      prefill_steps += plan.total_tokens > static_cast<std::int32_t>(plan.seqs.size()) ? 1 : 0;
    }
  }
  const Stats s = summarize(sched_us), t = summarize(total_us);
  std::printf(
      "scheduler+kv, %d running seqs, block 16, %d steps (%lld with a prefill chunk), "
      "%.0f tokens/step, prefix hit %.0f%%, preemptions %lld\n",
      kSeqs, steps, static_cast<long long>(prefill_steps), static_cast<double>(tokens) / steps,
      100.0 * kv.stats().hit_tokens / std::max<std::int64_t>(1, kv.stats().query_tokens),
      static_cast<long long>(sched.total_preemptions()));
  std::printf("  schedule() only          : median %7.1f us  p99 %7.1f us  mean %7.1f us\n",
              s.median_us, s.p99_us, s.mean_us);
  std::printf("  schedule + step bookkeeping: median %7.1f us  p99 %7.1f us  mean %7.1f us\n",
              t.median_us, t.p99_us, t.mean_us);
}

// A model that costs nothing: tiny vocab, constant-time logits.
class NullRunner final : public ModelRunner {
 public:
  class Kv final : public KvBlockStore {
   public:
    std::int32_t num_blocks() const override { return 256 * 192; }
    std::int32_t block_size() const override { return 16; }
    std::size_t block_bytes() const override { return 0; }
    void copy_block(std::int32_t, std::int32_t) override {}
    void save_block(std::int32_t, std::span<std::byte>) override {}
    void load_block(std::int32_t, std::span<const std::byte>) override {}
  };
  NullRunner() {
    cfg_.vocab_size = 32;
    cfg_.max_position_embeddings = 1 << 16;
  }
  const ModelConfig &config() const override { return cfg_; }
  KvBlockStore &kv() override { return kv_; }
  void forward(const ForwardBatch &batch, ForwardOutput &out) override {
    out.vocab_size = cfg_.vocab_size;
    out.logits.clear();
    out.row_seq.clear();
    out.row_pos.clear();
    for (std::int32_t i = 0; i < static_cast<std::int32_t>(batch.seqs.size()); ++i) {
      const auto &s = batch.seqs[i];
      if (s.logits == SequenceSlice::Logits::kNone) continue;
      const std::size_t at = out.logits.size();
      out.logits.resize(at + cfg_.vocab_size, 0.0f);
      out.logits[at + (s.start_pos + s.num_tokens) % cfg_.vocab_size] = 1.0f;
      out.row_seq.push_back(i);
      out.row_pos.push_back(s.start_pos + s.num_tokens - 1);
    }
  }

 private:
  ModelConfig cfg_;
  Kv kv_;
};

void bench_engine(int steps) {
  EngineConfig cfg;
  cfg.scheduler.max_num_seqs = 256;
  cfg.scheduler.max_num_batched_tokens = 2048;
  Engine engine(
      [] {
        EngineBackend b;
        b.runner = std::make_unique<NullRunner>();
        return b;
      },
      cfg);
  std::mt19937 rng(2);
  std::atomic<int> finished{0};
  for (int i = 0; i < 256; ++i) {
    GenerationRequest r;
    r.id = RequestId{static_cast<std::uint64_t>(i + 1)};
    r.prompt.resize(256 + rng() % 256);
    for (auto &t : r.prompt) t = static_cast<TokenId>(rng() % 32);
    r.sampling.temperature = 0;
    r.sampling.max_tokens = steps + 64;
    engine.submit(std::move(r), [&](const RequestEvent &ev) {
      if (ev.finish) finished.fetch_add(1);
    });
  }
  // Let every prompt be computed, then time a window of pure decode steps. Process CPU
  // time: the engine thread's, plus this thread's polling (sleeps, about nothing).
  while (engine.status().decode_tokens < 256 * 8) std::this_thread::yield();
  const auto s0 = engine.status();
  const double c0 = cpu_us(CLOCK_PROCESS_CPUTIME_ID);
  const auto w0 = Clock::now();
  while (engine.status().steps < s0.steps + static_cast<std::uint64_t>(steps))
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  const double c1 = cpu_us(CLOCK_PROCESS_CPUTIME_ID);
  const auto w1 = Clock::now();
  const auto s1 = engine.status();
  const double n = static_cast<double>(s1.steps - s0.steps);
  std::printf(
      "engine loop over a null model, 256 decoding seqs: %.1f us CPU per step, %.1f us "
      "wall (%.0f tokens/step; batch build, sampling, events, status)\n",
      (c1 - c0) / n, std::chrono::duration<double, std::micro>(w1 - w0).count() / n,
      static_cast<double>(s1.decode_tokens - s0.decode_tokens) / n);
  engine.stop(Clock::now() + std::chrono::seconds(10));
}

}  // namespace

int main(int argc, char **argv) {
  int steps = 2000;
  for (int i = 1; i + 1 < argc; ++i)
    if (std::strcmp(argv[i], "--steps") == 0) steps = std::max(10, std::atoi(argv[i + 1]));
  bench_scheduler(steps);
  bench_engine(steps);
  return 0;
}
