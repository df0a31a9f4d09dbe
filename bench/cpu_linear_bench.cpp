// Micro-benchmark of the CPU linear kernels: effective weight bandwidth of decode
// matvecs (T = 1) and the GFLOP/s of prefill tiles (T = 64), per weight dtype; best of
// several runs, so that a shared machine's noise shows less.
//
//   cpu_linear_bench [--threads N] [--rows 8192] [--cols 2048] [--tokens 1,64] [--dtypes all]
//                    [--isa portable|avx2] (a lower kernel family than the CPU's best)
// (--rows 151936 --cols 64 --tokens 256 --dtypes f32: a tiny model's lm_head over a
// batch of 256 streams)
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "bench_args.h"
#include "exec/cpu/linear.h"
#include "formats/quant.h"
#include "read_bandwidth.h"

int main(int argc, char **argv) {
  int threads = 0;
  std::string tokens = "1,64", dtypes = "all", isa_name;
  std::int64_t N = 8192, K = 2048;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string a = argv[i];
    if (a == "--threads") threads = std::stoi(argv[i + 1]);
    if (a == "--rows") N = std::stoll(argv[i + 1]);
    if (a == "--cols") K = std::stoll(argv[i + 1]);
    if (a == "--tokens") tokens = argv[i + 1];
    if (a == "--dtypes") dtypes = argv[i + 1];
    if (a == "--isa") isa_name = argv[i + 1];
  }
  std::vector<std::int64_t> token_counts;
  for (const std::string &t : keel::bench::comma_list(tokens))
    token_counts.push_back(std::stoll(t));
  keel::ThreadPool pool(threads);
  std::mt19937 rng(1);
  std::normal_distribution<float> nd(0, 1);
  std::vector<float> w(N * K);
  for (auto &v : w) v = nd(rng) * 0.02f;
  for (keel::DType dt : {keel::DType::kF32, keel::DType::kF16, keel::DType::kBF16,
                         keel::DType::kQ8_0, keel::DType::kQ4_0, keel::DType::kQ4_K,
                         keel::DType::kQ6_K, keel::DType::kMXFP4, keel::DType::kF8_E4M3}) {
    const std::string name(keel::dtype_name(dt));
    if (dtypes != "all" && ("," + dtypes + ",").find("," + name + ",") == std::string::npos)
      continue;
    std::vector<std::byte> q(static_cast<std::size_t>(keel::dtype_bytes(dt, N * K)));
    std::vector<float> scales, row(K);  // FP8: one scale a row (amax / 448)
    for (std::int64_t r = 0; r < N; ++r) {
      const float *src = w.data() + r * K;
      if (dt == keel::DType::kF8_E4M3) {
        float amax = 0;
        for (std::int64_t k = 0; k < K; ++k) amax = std::max(amax, std::fabs(src[k]));
        scales.push_back(amax / 448);
        for (std::int64_t k = 0; k < K; ++k) row[k] = src[k] / scales.back();
        src = row.data();
      }
      keel::quantize_row(dt, src, q.data() + r * keel::dtype_bytes(dt, K), K);
    }
    keel::TensorView tv{"w", dt, {N, K}, q.data(), q.size()};
    if (dt == keel::DType::kF8_E4M3) tv.scale = {scales.data(), N, 1, 1, K};
    keel::cpu::LinearScratch s;
    if (isa_name == "portable") s.isa = keel::cpu::LinearIsa::kPortable;
    if (isa_name == "avx2") s.isa = keel::cpu::LinearIsa::kAvx2;
    for (std::int64_t T : token_counts) {
      std::vector<float> x(T * K), y(T * N);
      for (auto &v : x) v = nd(rng);
      // Best wall time, and best CPU time / threads (the reading on a shared, loaded machine).
      double best = 1e30, best_cpu = 1e30;
      for (int rep = 0; rep < (T == 1 ? 30 : 5); ++rep) {
        const auto t0 = std::chrono::steady_clock::now();
        const double c0 = keel::bench::cpu_seconds();
        keel::cpu::linear(tv, x.data(), T, y.data(), pool, s);
        best_cpu = std::min(best_cpu, (keel::bench::cpu_seconds() - c0) / pool.size());
        best = std::min(
            best, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
      }
      if (T == 1)
        std::printf("%-5s matvec  %7.2f GB/s of weights  (%.3f ms); CPU time: %7.2f GB/s\n",
                    name.c_str(), q.size() / best / 1e9, best * 1e3, q.size() / best_cpu / 1e9);
      else
        std::printf("%-5s T=%-3lld  %7.2f GFLOP/s  (%.3f ms); CPU time: %7.2f GFLOP/s\n",
                    name.c_str(), (long long)T, 2.0 * N * K * T / best / 1e9, best * 1e3,
                    2.0 * N * K * T / best_cpu / 1e9);
    }
  }
  return 0;
}
