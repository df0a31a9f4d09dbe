// CPU inference benchmark: batch-1 decode and 512-token prefill of a model, each beside
// its roofline measured in the same process:
//   decode roofline  = memory read bandwidth / bytes read per token (all weight
//                      matrices + the KV cache read by attention),
//   prefill roofline = GEMM rate (OpenBLAS sgemm, large square) / FLOPs per token.
// Peak RSS is compared with weights + KV cache.
//
//   cpu_bench --model PATH [--threads N] [--prompt 512] [--decode 32]
#include <cblas.h>
#include <immintrin.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "exec/cpu/cpu_model_runner.h"
#include "exec/single_sequence.h"

extern "C" void openblas_set_num_threads(int);

namespace {

using Clock = std::chrono::steady_clock;
double seconds_since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

// Multi-threaded streaming read of a buffer far larger than the caches; best of 5.
double read_bandwidth(keel::ThreadPool &pool) {
  const std::size_t bytes = std::size_t{1} << 30;
  auto *buf = static_cast<float *>(std::aligned_alloc(64, bytes));
  const std::size_t n = bytes / sizeof(float);
  pool.parallel_for(static_cast<std::int64_t>(n), [&](std::int64_t a, std::int64_t b) {
    for (std::int64_t i = a; i < b; ++i) buf[i] = static_cast<float>(i & 7);
  });
  std::vector<float> sink(pool.size() * 16);
  double best = 1e30;
  for (int rep = 0; rep < 5; ++rep) {
    const auto t0 = Clock::now();
    pool.run([&](int t, int nt) {
      const std::size_t a = n * t / nt / 64 * 64, b = n * (t + 1) / nt / 64 * 64;
#if defined(__AVX512F__)
      __m512 s0 = _mm512_setzero_ps(), s1 = s0, s2 = s0, s3 = s0;
      for (std::size_t i = a; i < b; i += 64) {
        s0 = _mm512_add_ps(s0, _mm512_load_ps(buf + i));
        s1 = _mm512_add_ps(s1, _mm512_load_ps(buf + i + 16));
        s2 = _mm512_add_ps(s2, _mm512_load_ps(buf + i + 32));
        s3 = _mm512_add_ps(s3, _mm512_load_ps(buf + i + 48));
      }
      sink[t * 16] =
          _mm512_reduce_add_ps(_mm512_add_ps(_mm512_add_ps(s0, s1), _mm512_add_ps(s2, s3)));
#else
      float s = 0;
      for (std::size_t i = a; i < b; ++i) s += buf[i];
      sink[t * 16] = s;
#endif
    });
    best = std::min(best, seconds_since(t0));
  }
  std::free(buf);
  return static_cast<double>(bytes) / best;
}

// OpenBLAS sgemm on 2048^3 with the pool's thread count; best of 3.
double gemm_rate(int threads) {
  const int n = 2048;
  std::vector<float> a(n * n), b(n * n), c(n * n);
  std::mt19937 rng(1);
  std::uniform_real_distribution<float> u(-1, 1);
  for (auto &v : a) v = u(rng);
  for (auto &v : b) v = u(rng);
  openblas_set_num_threads(threads);
  double best = 1e30;
  for (int rep = 0; rep < 4; ++rep) {
    const auto t0 = Clock::now();
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, n, n, n, 1.0f, a.data(), n, b.data(), n,
                0.0f, c.data(), n);
    if (rep > 0) best = std::min(best, seconds_since(t0));
  }
  return 2.0 * n * n * n / best;
}

long status_kb(const char *key) {
  std::ifstream f("/proc/self/status");
  std::string line;
  while (std::getline(f, line))
    if (line.rfind(key, 0) == 0) return std::stol(line.substr(std::strlen(key)));
  return -1;
}

}  // namespace

int main(int argc, char **argv) {
  std::string model;
  int threads = 0, prompt = 512, decode = 32;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string a = argv[i];
    if (a == "--model")
      model = argv[i + 1];
    else if (a == "--threads")
      threads = std::stoi(argv[i + 1]);
    else if (a == "--prompt")
      prompt = std::stoi(argv[i + 1]);
    else if (a == "--decode")
      decode = std::stoi(argv[i + 1]);
  }
  if (model.empty()) {
    std::fprintf(stderr,
                 "usage: cpu_bench --model PATH [--threads N] [--prompt 512] [--decode 32]\n");
    return 2;
  }
  keel::ExecContext ctx(threads);
  const int nt = ctx.pool().size();
  const double bw = read_bandwidth(ctx.pool());
  const double gemm = gemm_rate(nt);
  openblas_set_num_threads(1);
  { std::ofstream("/proc/self/clear_refs") << "5"; }  // reset the peak RSS for the model part

  const std::int32_t block = 16;
  const std::int32_t blocks = (prompt + decode + block) / block + 1;
  auto runner = keel::cpu::CpuModelRunner::open(model, ctx, {blocks, block});
  const auto &cfg = runner->config();
  const double weight_bytes = static_cast<double>(runner->model().weight_bytes());
  const double kv_bytes = static_cast<double>(runner->kv().block_bytes()) * blocks;

  std::mt19937 rng(3);
  std::vector<keel::TokenId> ids(prompt);
  for (auto &t : ids) t = static_cast<keel::TokenId>(rng() % cfg.vocab_size);
  keel::SingleSequence seq(*runner, prompt);

  // Prefill: best of 2 (the first also pages the weights in).
  double prefill_s = 1e30;
  std::vector<float> logits;
  for (int rep = 0; rep < 2; ++rep) {
    seq.reset();
    const auto t0 = Clock::now();
    logits = seq.append(ids, false);
    prefill_s = std::min(prefill_s, seconds_since(t0));
  }
  // Decode from the end of the prompt.
  const auto t0 = Clock::now();
  for (int i = 0; i < decode; ++i) {
    const auto next =
        static_cast<keel::TokenId>(std::max_element(logits.begin(), logits.end()) - logits.begin());
    logits = seq.append(std::span<const keel::TokenId>(&next, 1), false);
  }
  const double decode_s = seconds_since(t0) / decode;

  // Rooflines.
  const double L = static_cast<double>(cfg.num_layers), H = static_cast<double>(cfg.num_heads),
               G = static_cast<double>(cfg.num_kv_heads), D = static_cast<double>(cfg.head_dim);
  const double ctx_mid = prompt + decode / 2.0;
  const double kv_read = L * 2 * G * D * 4 * ctx_mid;  // f32 K and V of every position, per token
  const double decode_roof = bw / (weight_bytes + kv_read);
  // Matmul parameters (lm_head once per prefill, for the last row only).
  const double hidden = static_cast<double>(cfg.hidden_size),
               inter = static_cast<double>(cfg.intermediate_size);
  const double layer_params = hidden * (H * D) * 2 + hidden * (G * D) * 2 + 3 * hidden * inter;
  const double head = static_cast<double>(cfg.vocab_size) * hidden;
  const double attn_flops = 4.0 * L * H * D * (static_cast<double>(prompt) * (prompt + 1) / 2);
  const double prefill_flops = 2.0 * L * layer_params * prompt + 2.0 * head + attn_flops;
  const double prefill_tps = prompt / prefill_s;
  const double prefill_roof = prompt / (prefill_flops / gemm);

  const double rss = status_kb("VmHWM:") * 1024.0;
  std::ifstream wf(model, std::ios::binary | std::ios::ate);
  const double file_bytes = wf ? static_cast<double>(wf.tellg()) : weight_bytes;

  std::printf("model %s  threads %d\n", model.c_str(), nt);
  std::printf("  memory read bandwidth   %8.2f GB/s\n", bw / 1e9);
  std::printf("  sgemm 2048^3            %8.2f GFLOP/s\n", gemm / 1e9);
  std::printf("  decode  %8.2f tok/s  roofline %8.2f tok/s  (%5.1f%%)  %.3f GB/token\n",
              1.0 / decode_s, decode_roof, 100.0 / decode_s / decode_roof,
              (weight_bytes + kv_read) / 1e9);
  std::printf("  prefill %8.2f tok/s  roofline %8.2f tok/s  (%5.1f%%)  %.2f GFLOP/s achieved\n",
              prefill_tps, prefill_roof, 100.0 * prefill_tps / prefill_roof,
              prefill_flops / prefill_s / 1e9);
  std::printf("  peak RSS %.3f GB  weights file %.3f GB + KV %.3f GB  (ratio %.3f)\n", rss / 1e9,
              file_bytes / 1e9, kv_bytes / 1e9, rss / (file_bytes + kv_bytes));
  return 0;
}
