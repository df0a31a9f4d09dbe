// CPU prefill attention alone: one sequence of N tokens computed as one causal chunk over
// the paged KV cache, blocked path vs the per-token path, in GFLOP/s of the causal
// attention (4 * N^2 / 2 * head_dim * heads) over the wall clock, and over the process CPU
// time divided by the threads (what the rate would be with the cores to ourselves).
//   cpu_attention_bench [--tokens 512,2048] [--threads 2] [--heads 12] [--kv-heads 4]
//                       [--head-dim 64] [--reps 3]
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <random>
#include <string>

#include "bench_args.h"
#include "core/thread_pool.h"
#include "exec/cpu/attention.h"
#include "exec/cpu/kv_store.h"

namespace {

double cpu_seconds() {
  timespec ts{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
}

}  // namespace

int main(int argc, char **argv) {
  using namespace keel;
  std::vector<int> lengths = {512, 2048};
  int threads = 2, reps = 3;
  std::int64_t H = 12, G = 4, D = 64;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string a = argv[i], v = argv[i + 1];
    if (a == "--tokens")
      lengths = bench::int_list(v);
    else if (a == "--threads")
      threads = std::stoi(v);
    else if (a == "--heads")
      H = std::stoi(v);
    else if (a == "--kv-heads")
      G = std::stoi(v);
    else if (a == "--head-dim")
      D = std::stoi(v);
    else if (a == "--reps")
      reps = std::stoi(v);
    else {
      std::fprintf(stderr, "unknown argument %s\n", a.c_str());
      return 2;
    }
  }
  ThreadPool pool(threads);
  std::mt19937 rng(1);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  std::printf("heads %lld kv_heads %lld head_dim %lld threads %d (best of %d)\n",
              static_cast<long long>(H), static_cast<long long>(G), static_cast<long long>(D),
              threads, reps);
  std::printf("%8s %10s %12s %12s %12s\n", "tokens", "path", "wall ms", "GFLOP/s", "GFLOP/s cpu");
  for (const int n : lengths) {
    const std::int32_t bs = 16, blocks = (n + bs - 1) / bs;
    cpu::CpuKvStore kv(blocks, bs, 1, G, D);
    ForwardBatch batch;
    batch.seqs.push_back({0, n, 0, 0, blocks, SequenceSlice::Logits::kLast});
    for (std::int32_t b = 0; b < blocks; ++b) batch.block_table.push_back(b);
    batch.tokens.assign(n, 0);
    std::vector<std::int32_t> seq(n, 0), pos(n);
    for (int p = 0; p < n; ++p) {
      pos[p] = p;
      for (int kind = 0; kind < 2; ++kind) {
        float *row = kv.row(p / bs, 0, kind, p % bs);
        for (std::int64_t i = 0; i < G * D; ++i) row[i] = nd(rng);
      }
    }
    std::vector<float> q(n * H * D), out(q.size());
    for (auto &x : q) x = nd(rng);
    const double flops = 4.0 * n * n / 2 * static_cast<double>(D * H);
    for (const bool blocked : {false, true}) {
      cpu::AttentionShape shape{H, G, D, 1.0f / std::sqrt(static_cast<float>(D)), 0};
      shape.blocked = blocked;
      std::vector<std::vector<float>> scratch;
      double best_wall = 1e30, best_cpu = 1e30;
      for (int r = 0; r < reps; ++r) {
        const double c0 = cpu_seconds();
        const auto t0 = std::chrono::steady_clock::now();
        cpu::paged_attention(q.data(), out.data(), batch, seq.data(), pos.data(), kv, 0, shape,
                             pool, scratch);
        const double wall =
            std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        best_wall = std::min(best_wall, wall);
        best_cpu = std::min(best_cpu, cpu_seconds() - c0);
      }
      std::printf("%8d %10s %12.1f %12.2f %12.2f\n", n, blocked ? "blocked" : "per-token",
                  best_wall * 1e3, flops / best_wall * 1e-9, flops / (best_cpu / threads) * 1e-9);
    }
  }
  return 0;
}
