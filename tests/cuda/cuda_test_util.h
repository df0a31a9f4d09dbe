// Helpers for the CUDA tests: skip without a device, move data through a context's
// copy streams with bounded waits, bf16 conversions and error norms.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include "core/half.h"
#include "exec/cuda/cuda_check.h"
#include "exec/cuda/cuda_context.h"
#include "exec/cuda/cuda_resources.h"

#define KEEL_REQUIRE_CUDA_DEVICE()                                           \
  do {                                                                       \
    if (::keel::cuda::device_count() == 0) GTEST_SKIP() << "no CUDA device"; \
  } while (0)

namespace keel::cuda::test {

inline std::vector<std::uint16_t> to_bf16(const std::vector<float> &v) {
  std::vector<std::uint16_t> out(v.size());
  for (std::size_t i = 0; i < v.size(); ++i) out[i] = f32_to_bf16(v[i]);
  return out;
}
inline std::vector<float> from_bf16(const std::vector<std::uint16_t> &v) {
  std::vector<float> out(v.size());
  for (std::size_t i = 0; i < v.size(); ++i) out[i] = bf16_to_f32(v[i]);
  return out;
}
// Values already rounded to bf16, so CPU references see exactly what the device sees.
inline std::vector<float> random_bf16_values(std::size_t n, std::mt19937 &rng, float lo = -1.0f,
                                             float hi = 1.0f) {
  std::uniform_real_distribution<float> d(lo, hi);
  std::vector<float> v(n);
  for (auto &x : v) x = bf16_to_f32(f32_to_bf16(d(rng)));
  return v;
}

template <typename T>
DeviceBuffer upload(const CudaContext &ctx, const std::vector<T> &host) {
  DeviceBuffer d(host.size() * sizeof(T));
  if (!host.empty())
    KEEL_CUDA_CHECK(cudaMemcpyAsync(d.data(), host.data(), d.bytes(), cudaMemcpyHostToDevice,
                                    ctx.copy_h2d().get("cudaMemcpyAsync")));
  Event e;
  e.record(ctx.copy_h2d());
  e.make_wait(ctx.compute());  // kernels launched next on compute see the data
  e.wait(std::chrono::seconds(30), "test upload");
  return d;
}

// Waits for the compute stream, then copies `n` elements back.
template <typename T>
std::vector<T> download(const CudaContext &ctx, const DeviceBuffer &d, std::size_t n) {
  std::vector<T> host(n);
  Event computed;
  computed.record(ctx.compute());
  computed.make_wait(ctx.copy_d2h());
  if (n)
    KEEL_CUDA_CHECK(cudaMemcpyAsync(host.data(), d.data(), n * sizeof(T), cudaMemcpyDeviceToHost,
                                    ctx.copy_d2h().get("cudaMemcpyAsync")));
  Event e;
  e.record(ctx.copy_d2h());
  e.wait(std::chrono::seconds(30), "test download");
  return host;
}

// Poisons a buffer (0xFF bytes: bf16/f32 NaN) so unwritten outputs show up.
inline void poison(const CudaContext &ctx, const DeviceBuffer &d) {
  KEEL_CUDA_CHECK(cudaMemsetAsync(d.data(), 0xFF, d.bytes(), ctx.compute().get("cudaMemsetAsync")));
}

// ||a - b|| / ||b||; NaN anywhere gives infinity.
inline double rel_err(const std::vector<float> &a, const std::vector<float> &b) {
  double num = 0, den = 0;
  for (std::size_t i = 0; i < a.size(); ++i) {
    if (!std::isfinite(a[i]) || !std::isfinite(b[i])) return INFINITY;
    num += (double(a[i]) - b[i]) * (double(a[i]) - b[i]);
    den += double(b[i]) * b[i];
  }
  return std::sqrt(num / std::max(den, 1e-30));
}

}  // namespace keel::cuda::test
