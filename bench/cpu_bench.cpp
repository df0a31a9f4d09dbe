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
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "exec/cpu/cpu_model_runner.h"
#include "exec/single_sequence.h"
#include "read_bandwidth.h"

extern "C" void openblas_set_num_threads(int);

namespace {

using keel::bench::cpu_seconds;
using keel::bench::read_bandwidth;
using Clock = std::chrono::steady_clock;
double seconds_since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

// OpenBLAS sgemm on 2048^3 with the pool's thread count; best of 3 after a warm-up.
// Returns {wall, cpu-normalized} FLOP per second.
std::pair<double, double> gemm_rate(int threads) {
  const int n = 2048;
  std::vector<float> a(n * n), b(n * n), c(n * n);
  std::mt19937 rng(1);
  std::uniform_real_distribution<float> u(-1, 1);
  for (auto &v : a) v = u(rng);
  for (auto &v : b) v = u(rng);
  openblas_set_num_threads(threads);
  double best = 1e30, best_cpu = 1e30;
  for (int rep = 0; rep < 4; ++rep) {
    const auto t0 = Clock::now();
    const double c0 = cpu_seconds();
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, n, n, n, 1.0f, a.data(), n, b.data(), n,
                0.0f, c.data(), n);
    if (rep > 0) {
      best = std::min(best, seconds_since(t0));
      best_cpu = std::min(best_cpu, (cpu_seconds() - c0) / threads);
    }
  }
  const double flop = 2.0 * n * n * n;
  return {flop / best, flop / best_cpu};
}

std::string loadavg() {
  std::ifstream f("/proc/loadavg");
  std::string a, b, c;
  f >> a >> b >> c;
  return a + " " + b + " " + c;
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
  // The rooflines run in a child process, so that their 1 GiB buffer and OpenBLAS's
  // thread buffers do not count in this process's peak RSS.
  double roof[4] = {0, 0, 0, 0};  // bw, bw_cpu, gemm, gemm_cpu
  {
    int fds[2];
    if (pipe(fds) != 0) return 1;
    const pid_t pid = fork();
    if (pid == 0) {
      keel::ThreadPool pool(nt);
      const auto [b, bc] = read_bandwidth(pool);
      const auto [g, gc] = gemm_rate(nt);
      const double r[4] = {b, bc, g, gc};
      if (write(fds[1], r, sizeof r) != static_cast<ssize_t>(sizeof r)) _exit(1);
      _exit(0);
    }
    close(fds[1]);
    if (read(fds[0], roof, sizeof roof) != static_cast<ssize_t>(sizeof roof)) return 1;
    close(fds[0]);
    waitpid(pid, nullptr, 0);
  }
  const double bw = roof[0], bw_cpu = roof[1], gemm = roof[2], gemm_cpu = roof[3];

  const std::int32_t block = 16;
  const std::int32_t blocks = (prompt + decode + block) / block + 1;
  auto runner = keel::cpu::CpuModelRunner::open(model, ctx, {blocks, block});
  const auto &cfg = runner->config();
  const double weight_bytes = static_cast<double>(runner->decode_weight_bytes());
  const double kv_bytes = static_cast<double>(runner->kv().block_bytes()) * blocks;

  std::mt19937 rng(3);
  std::vector<keel::TokenId> ids(prompt);
  for (auto &t : ids) t = static_cast<keel::TokenId>(rng() % cfg.vocab_size);
  keel::SingleSequence seq(*runner, prompt);

  // Prefill: best of 2 (the first also pages the weights in).
  double prefill_s = 1e30, prefill_cpu = 1e30;
  std::vector<float> logits;
  for (int rep = 0; rep < 2; ++rep) {
    seq.reset();
    const auto t0 = Clock::now();
    const double c0 = cpu_seconds();
    logits = seq.append(ids, false);
    prefill_s = std::min(prefill_s, seconds_since(t0));
    prefill_cpu = std::min(prefill_cpu, (cpu_seconds() - c0) / nt);
  }
  // Decode from the end of the prompt: the mean over all tokens, and the best token.
  const auto t0 = Clock::now();
  const double c0 = cpu_seconds();
  double best_token = 1e30;
  for (int i = 0; i < decode; ++i) {
    const auto next =
        static_cast<keel::TokenId>(std::max_element(logits.begin(), logits.end()) - logits.begin());
    const auto ti = Clock::now();
    logits = seq.append(std::span<const keel::TokenId>(&next, 1), false);
    best_token = std::min(best_token, seconds_since(ti));
  }
  const double decode_s = seconds_since(t0) / decode;
  const double decode_cpu = (cpu_seconds() - c0) / nt / decode;

  // Rooflines.
  const double L = static_cast<double>(cfg.num_layers), H = static_cast<double>(cfg.num_heads),
               G = static_cast<double>(cfg.num_kv_heads), D = static_cast<double>(cfg.head_dim);
  const double ctx_mid = prompt + decode / 2.0;
  const double kv_read = L * 2 * G * D * 4 * ctx_mid;  // f32 K and V of every position, per token
  const double decode_roof = bw / (weight_bytes + kv_read);
  const double decode_roof_cpu = bw_cpu / (weight_bytes + kv_read);
  // Matmul parameters (lm_head once per prefill, for the last row only).
  const double hidden = static_cast<double>(cfg.hidden_size),
               inter = static_cast<double>(cfg.intermediate_size);
  // A MoE layer computes its router and top_k experts (per token), not all experts.
  double ffn_params = 0;
  for (std::int64_t l = 0; l < cfg.num_layers; ++l)
    ffn_params +=
        cfg.moe && cfg.moe->sparse(l)
            ? hidden * (cfg.moe->num_experts + 3.0 * cfg.moe->top_k * cfg.moe->expert_intermediate)
            : 3 * hidden * inter;
  const double layer_params = hidden * (H * D) * 2 + hidden * (G * D) * 2 + ffn_params / L;
  const double head = static_cast<double>(cfg.vocab_size) * hidden;
  const double attn_flops = 4.0 * L * H * D * (static_cast<double>(prompt) * (prompt + 1) / 2);
  const double prefill_flops = 2.0 * L * layer_params * prompt + 2.0 * head + attn_flops;
  const double prefill_tps = prompt / prefill_s;
  const double prefill_roof = prompt / (prefill_flops / gemm);
  const double prefill_roof_cpu = prompt / (prefill_flops / gemm_cpu);

  const double rss = status_kb("VmHWM:") * 1024.0;
  // The weights on disk: the file, or a directory's safetensors shards (an ifstream opens a
  // directory too, and its tellg() is not a size).
  double file_bytes = 0.0;
  std::error_code ec;
  if (std::filesystem::is_regular_file(model, ec)) {
    file_bytes = static_cast<double>(std::filesystem::file_size(model, ec));
  } else if (std::filesystem::is_directory(model, ec)) {
    for (const auto &e : std::filesystem::directory_iterator(model, ec))
      if (e.is_regular_file(ec) && e.path().extension() == ".safetensors")
        file_bytes += static_cast<double>(e.file_size(ec));
  }
  if (file_bytes <= 0.0) file_bytes = weight_bytes;

  std::printf("model %s  threads %d  load %s\n", model.c_str(), nt, loadavg().c_str());
  std::printf("                          wall clock (best)        cpu time / threads\n");
  std::printf("  read bandwidth GB/s     %8.2f                 %8.2f\n", bw / 1e9, bw_cpu / 1e9);
  std::printf("  sgemm 2048^3 GFLOP/s    %8.2f                 %8.2f\n", gemm / 1e9,
              gemm_cpu / 1e9);
  std::printf("  decode tok/s            %8.2f (best %6.2f)   %8.2f\n", 1.0 / decode_s,
              1.0 / best_token, 1.0 / decode_cpu);
  std::printf("    roofline tok/s        %8.2f                 %8.2f   (%.3f GB/token)\n",
              decode_roof, decode_roof_cpu, (weight_bytes + kv_read) / 1e9);
  std::printf("    of roofline           %7.1f%% (best %5.1f%%)   %7.1f%%\n",
              100.0 / decode_s / decode_roof, 100.0 / best_token / decode_roof,
              100.0 / decode_cpu / decode_roof_cpu);
  std::printf("  prefill tok/s           %8.2f                 %8.2f   (%d-token prompt)\n",
              prefill_tps, prompt / prefill_cpu, prompt);
  std::printf("    roofline tok/s        %8.2f                 %8.2f\n", prefill_roof,
              prefill_roof_cpu);
  std::printf("    of roofline           %7.1f%%                 %7.1f%%\n",
              100.0 * prefill_tps / prefill_roof,
              100.0 * (prompt / prefill_cpu) / prefill_roof_cpu);
  std::printf("  peak RSS %.3f GB  weights file %.3f GB + KV %.3f GB  (ratio %.3f)\n", rss / 1e9,
              file_bytes / 1e9, kv_bytes / 1e9, rss / (file_bytes + kv_bytes));
  return 0;
}
