// Device sampling time per step (launch_sample: penalties, filter or full sort, walk) for
// R rows of a 128,256-entry vocabulary, by path: greedy (argmax), stochastic rows the
// filter narrows (peaked logits, as trained models give: sigma 8), stochastic rows it
// cannot (a draw within its margin of 1: the full segmented sort, what every stochastic
// row cost before the filter), and flat rows (sigma 1: thousands of candidates; the
// filter sorts only the run of them around the draw since the multi-block rewrite, the
// single-block sampler before it sorted the whole row; bench/RESULTS.md has its figures
// beside these).
//
//   cuda_sample_bench [--rows 1,8,64,256] [--vocab 128256] [--reps 20]
#include <cstdio>

#if !defined(KEEL_WITH_CUDA)
int main() {
  std::puts("cuda_sample_bench: built without CUDA");
  return 0;
}
#else
#include <algorithm>
#include <random>
#include <string>
#include <vector>

#include "bench_args.h"
#include "exec/cuda/cuda_check.h"
#include "exec/cuda/cuda_context.h"
#include "exec/cuda/cuda_resources.h"
#include "exec/cuda/kernels.h"

using namespace keel;
using namespace keel::cuda;

namespace {

struct Case {
  const char *name;
  float sigma;
  float inv_temperature;
  double u;  // < 0: random per row
};

// Mean ms per launch_sample call.
double time_case(CudaContext &ctx, int R, int V, int reps, const Case &c) {
  std::mt19937 rng(5);
  std::normal_distribution<float> nd(0.0f, c.sigma);
  std::vector<float> logits(std::size_t(R) * V);
  for (auto &x : logits) x = nd(rng);
  std::uniform_real_distribution<double> ud(0.0, 0.999);
  std::vector<SampleRow> rows(R);
  for (auto &r : rows) {
    r.inv_temperature = c.inv_temperature;
    r.u = c.u < 0 ? ud(rng) : c.u;
  }
  DeviceBuffer d_logits(logits.size() * 4), d_rows(rows.size() * sizeof(SampleRow)),
      d_pen(sizeof(PenaltyEntry)), scratch(sample_scratch_bytes(R, V)), tokens(R * 4), lps(R * 4);
  const cuda::StreamRef s = ctx.compute();
  KEEL_CUDA_CHECK(cudaMemcpyAsync(d_logits.data(), logits.data(), logits.size() * 4,
                                  cudaMemcpyHostToDevice, s.get("bench upload")));
  KEEL_CUDA_CHECK(cudaMemcpyAsync(d_rows.data(), rows.data(), rows.size() * sizeof(SampleRow),
                                  cudaMemcpyHostToDevice, s.get("bench upload")));
  auto once = [&] {
    launch_sample(s, d_logits.as<float>(), R, V, d_rows.as<SampleRow>(), d_pen.as<PenaltyEntry>(),
                  scratch.data(), scratch.bytes(), tokens.as<std::int32_t>(), lps.as<float>());
  };
  once();  // warm-up (module load, CUB temp sizing)
  Event start(true), stop(true);
  start.record(s);
  for (int i = 0; i < reps; ++i) once();
  stop.record(s);
  stop.wait(std::chrono::seconds(60), "sample bench");
  return Event::elapsed_ms(start, stop) / reps;
}

}  // namespace

int main(int argc, char **argv) {
  std::vector<int> rows = {1, 8, 64, 256};
  int V = 128256, reps = 20;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string k = argv[i], v = argv[i + 1];
    if (k == "--rows")
      rows = bench::int_list(v);
    else if (k == "--vocab")
      V = std::stoi(v);
    else if (k == "--reps")
      reps = std::stoi(v);
    else {
      std::fprintf(stderr, "cuda_sample_bench: unknown option %s\n", k.c_str());
      return 2;
    }
  }
  try {
    CudaContext ctx;
    const Case cases[] = {
        {"greedy (argmax)", 8.0f, 0.0f, 0.0},
        {"temperature 1, peaked (filtered)", 8.0f, 1.0f, -1.0},
        {"temperature 1, peaked, u = 0.99995 (full sort)", 8.0f, 1.0f, 0.99995},
        {"temperature 1, flat (sigma 1)", 1.0f, 1.0f, -1.0},
    };
    std::printf("# launch_sample, vocab %d, ms per call (mean of %d)\n", V, reps);
    std::printf("| rows | %-48s |     ms |\n|-----:|%s|-------:|\n", "case",
                std::string(50, '-').c_str());
    for (int R : rows)
      for (const Case &c : cases) {
        std::printf("| %4d | %-48s | %.4f |\n", R, c.name, time_case(ctx, R, V, reps, c));
        std::fflush(stdout);
      }
  } catch (const std::exception &e) {
    std::fprintf(stderr, "cuda_sample_bench: %s\n", e.what());
    return 1;
  }
  return 0;
}
#endif  // KEEL_WITH_CUDA
