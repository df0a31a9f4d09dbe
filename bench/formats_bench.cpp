// Model-format figures: how fast a model opens (mmap + header parse + shape checks),
// how fast its weights page in through the mapping, against a plain read() of the same
// file, and the reference dequantizers' rate.
//   formats_bench MODEL_PATH   (an HF directory or a .gguf, e.g. from keel make-model)
#include <fcntl.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <random>
#include <vector>

#include "formats/model_weights.h"
#include "formats/quant.h"

namespace {

double now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// read() the whole file into a small buffer: the machine's sequential file read rate.
double read_rate(const std::filesystem::path &p) {
  const int fd = ::open(p.c_str(), O_RDONLY);
  if (fd < 0) return 0;
  std::vector<char> buf(1 << 20);
  std::size_t total = 0;
  const double t0 = now();
  for (ssize_t n; (n = ::read(fd, buf.data(), buf.size())) > 0;)
    total += static_cast<std::size_t>(n);
  const double dt = now() - t0;
  ::close(fd);
  return static_cast<double>(total) / dt / 1e9;
}

}  // namespace

int main(int argc, char **argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: formats_bench MODEL_PATH\n");
    return 2;
  }
  const double t0 = now();
  auto w = keel::ModelWeights::open(argv[1]);
  const double t_open = now() - t0;
  // Touch one byte per 4 KiB page of every tensor: pages come in through the mapping.
  const double t1 = now();
  unsigned sum = 0;
  for (const auto &name : w->names()) {
    const auto &t = w->get(name);
    for (std::size_t i = 0; i < t.nbytes; i += 4096) sum += static_cast<unsigned>(t.data[i]);
  }
  const double t_touch = now() - t1;
  const double gb = static_cast<double>(w->total_bytes()) / 1e9;
  std::printf("model %s: %zu tensors, %.2f GB\n", argv[1], w->names().size(), gb);
  std::printf("open (mmap, parse, shape checks): %.1f ms\n", t_open * 1e3);
  std::printf("page in through mmap: %.2f GB/s (checksum %u)\n", gb / t_touch, sum & 1);
  const auto file = w->format() == keel::ModelWeights::Format::kGguf
                        ? w->path()
                        : w->path() / "model.safetensors";
  std::printf("read() of the same file afterwards (page cache warm): %.2f GB/s\n", read_rate(file));

  // Reference dequantizers, single thread, 16M elements.
  const std::int64_t n = 1 << 24;
  std::vector<float> x(n), y(n);
  std::mt19937 rng(1);
  std::normal_distribution<float> dist(0, 0.02f);
  for (auto &v : x) v = dist(rng);
  for (keel::DType t : {keel::DType::kF16, keel::DType::kBF16, keel::DType::kQ8_0,
                        keel::DType::kQ4_0, keel::DType::kQ4_K, keel::DType::kQ6_K}) {
    std::vector<std::byte> q(static_cast<std::size_t>(keel::dtype_bytes(t, n)));
    double tq = now();
    keel::quantize_row(t, x.data(), q.data(), n);
    tq = now() - tq;
    double td = now();
    keel::dequantize_row(t, q.data(), y.data(), n);
    td = now() - td;
    std::printf("%-5s quantize %.0f Melem/s, dequantize (reference) %.0f Melem/s\n",
                std::string(keel::dtype_name(t)).c_str(), n / tq / 1e6, n / td / 1e6);
  }
  return 0;
}
