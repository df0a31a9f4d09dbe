// CPU tensor-parallel benchmark: one model computed by 1, 2, 4... ranks (real worker
// processes, `keel engine-tp-worker`), each rank with threads / ranks threads.
// Prefill of one prompt, then decode of `batch` sequences together; tokens/s per size,
// and the time rank 0 spends waiting in collectives (sync cost plus load imbalance).
//
// What this measures honestly: the overhead of the TP machinery (a forward broadcast
// and 2 all-reduces a layer over Unix sockets) against the compute. Whether TP speeds
// up a CPU depends on the machine: on a 2-core machine, TP=2 with one thread each
// competes for the same cores and memory bandwidth as TP=1 with two threads.
//
//   tp_bench --model PATH [--keel build/keel] [--tp 1,2,4] [--threads 2]
//            [--prompt 128] [--decode 32] [--batch 1]
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "bench_args.h"
#include "engine/tp/runner.h"
#include "exec/cpu/cpu_model_runner.h"

namespace {

using Clock = std::chrono::steady_clock;
double since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

struct Args {
  std::filesystem::path model, keel;
  std::vector<int> tp = {1, 2};
  int threads = 2, prompt = 128, decode = 32, batch = 1;
};

struct Result {
  double prefill_tps = 0, decode_tps = 0, decode_ms_per_step = 0;
};

Result measure(keel::ModelRunner &runner, const Args &a) {
  using namespace keel;
  const int bs = runner.kv().block_size();
  const int V = runner.config().vocab_size;
  const int len = a.prompt + a.decode + 1;
  const int blocks_per_seq = (len + bs - 1) / bs;
  std::vector<std::vector<TokenId>> seqs(a.batch);
  for (int s = 0; s < a.batch; ++s)
    for (int i = 0; i < a.prompt; ++i) seqs[s].push_back(3 + (i * 7919 + s * 104729) % (V - 3));
  std::vector<int> computed(a.batch, 0);
  auto step = [&](int only) {
    ForwardBatch b;
    for (int s = 0; s < a.batch; ++s) {
      if (only >= 0 && s != only) continue;
      SequenceSlice sl;
      sl.token_offset = b.total_tokens();
      sl.start_pos = computed[s];
      sl.num_tokens = static_cast<int>(seqs[s].size()) - computed[s];
      sl.block_offset = static_cast<int>(b.block_table.size());
      sl.num_blocks = (sl.start_pos + sl.num_tokens + bs - 1) / bs;
      for (int i = 0; i < sl.num_blocks; ++i) b.block_table.push_back(s * blocks_per_seq + i);
      b.tokens.insert(b.tokens.end(), seqs[s].begin() + computed[s], seqs[s].end());
      b.seqs.push_back(sl);
    }
    ForwardOutput out;
    runner.forward(b, out);
    for (std::size_t r = 0; r < out.row_seq.size(); ++r) {
      const int s = only >= 0 ? only : out.row_seq[r];
      const float *row = out.logits.data() + r * V;
      computed[s] = static_cast<int>(seqs[s].size());
      seqs[s].push_back(static_cast<TokenId>(std::max_element(row, row + V) - row));
    }
  };
  Result res;
  auto t0 = Clock::now();
  for (int s = 0; s < a.batch; ++s) step(s);
  res.prefill_tps = a.prompt * a.batch / since(t0);
  step(-1);  // first decode step: warm
  t0 = Clock::now();
  for (int i = 0; i < a.decode - 1; ++i) step(-1);
  const double dt = since(t0);
  res.decode_tps = (a.decode - 1) * a.batch / dt;
  res.decode_ms_per_step = dt * 1000 / (a.decode - 1);
  return res;
}

}  // namespace

int main(int argc, char **argv) {
  Args a;
  a.keel = std::filesystem::read_symlink("/proc/self/exe").parent_path().parent_path() / "keel";
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string k = argv[i], v = argv[i + 1];
    if (k == "--model")
      a.model = v;
    else if (k == "--keel")
      a.keel = v;
    else if (k == "--threads")
      a.threads = std::stoi(v);
    else if (k == "--prompt")
      a.prompt = std::stoi(v);
    else if (k == "--decode")
      a.decode = std::max(2, std::stoi(v));
    else if (k == "--batch")
      a.batch = std::stoi(v);
    else if (k == "--tp") {
      a.tp = keel::bench::int_list(v);
    } else {
      std::fprintf(stderr, "unknown option %s\n", k.c_str());
      return 2;
    }
  }
  if (a.model.empty()) {
    std::fprintf(stderr, "usage: tp_bench --model PATH [--keel PATH] [--tp 1,2,4] [--threads N]\n");
    return 2;
  }
  std::printf("model %s, %d threads in all, prompt %d, decode %d, batch %d\n", a.model.c_str(),
              a.threads, a.prompt, a.decode, a.batch);
  std::printf("%4s %8s %14s %14s %14s\n", "tp", "threads", "prefill tok/s", "decode tok/s",
              "ms/decode step");
  try {
    for (int tp : a.tp) {
      const int per_rank = keel::tp::threads_per_rank(a.threads, tp);
      keel::ExecContext ctx(per_rank);
      const int bs = 16;
      keel::cpu::KvOptions kv{(a.prompt + a.decode + bs) / bs * a.batch + 1, bs};
      std::unique_ptr<keel::ModelRunner> runner;
      if (tp == 1) {
        runner = keel::cpu::CpuModelRunner::open(a.model, ctx, kv);
      } else {
        keel::tp::TpRunnerOptions o;
        o.model = a.model;
        o.size = tp;
        o.threads_per_rank = per_rank;
        o.kv = kv;
        o.launch = keel::tp::TpLaunch{a.keel, {"engine-tp-worker", "--fd", "3"}, {}};
        runner = std::make_unique<keel::tp::TpCpuRunner>(o, ctx);
      }
      const Result r = measure(*runner, a);
      std::printf("%4d %8d %14.1f %14.2f %14.2f\n", tp, per_rank, r.prefill_tps, r.decode_tps,
                  r.decode_ms_per_step);
      std::fflush(stdout);
    }
  } catch (const std::exception &e) {
    std::fprintf(stderr, "tp_bench: %s\n", e.what());
    return 1;
  }
  return 0;
}
