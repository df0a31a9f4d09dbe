// Deterministic pseudo-random fill of bf16 tensors on the device (benchmark weights,
// test data): a hash of (seed, index), so the result does not depend on the launch shape.
#include <algorithm>
#include <cmath>

#include "exec/cuda/cuda_check.h"
#include "exec/cuda/k_fill.h"

namespace keel::cuda {

namespace {
__device__ std::uint32_t mix(std::uint64_t x) {
  x ^= x >> 33;
  x *= 0xff51afd7ed558ccdull;
  x ^= x >> 33;
  x *= 0xc4ceb9fe1a85ec53ull;
  x ^= x >> 33;
  return static_cast<std::uint32_t>(x);
}

__global__ void fill_uniform_kernel(bf16 *out, std::int64_t n, std::uint64_t seed, float lo,
                                    float hi) {
  for (std::int64_t i = blockIdx.x * std::int64_t(blockDim.x) + threadIdx.x; i < n;
       i += std::int64_t(gridDim.x) * blockDim.x) {
    const float u = (mix(seed * 0x9e3779b97f4a7c15ull + static_cast<std::uint64_t>(i)) >> 8) *
                    (1.0f / 16777216.0f);
    out[i] = __float2bfloat16(lo + (hi - lo) * u);
  }
}
// MXFP4 block b: scale byte `scale`, 16 random nibble bytes (codes uniform over all 16).
__global__ void fill_mxfp4_kernel(std::uint8_t *out, std::int64_t blocks, std::uint64_t seed,
                                  std::uint8_t scale) {
  for (std::int64_t b = blockIdx.x * std::int64_t(blockDim.x) + threadIdx.x; b < blocks;
       b += std::int64_t(gridDim.x) * blockDim.x) {
    std::uint8_t *p = out + b * 17;
    p[0] = scale;
    for (int w = 0; w < 4; ++w) {
      const std::uint32_t r =
          mix(seed * 0x9e3779b97f4a7c15ull + static_cast<std::uint64_t>(b * 4 + w));
      for (int j = 0; j < 4; ++j) p[1 + 4 * w + j] = static_cast<std::uint8_t>(r >> (8 * j));
    }
  }
}
}  // namespace

void launch_fill_mxfp4(StreamRef s_ref, void *out, std::int64_t blocks, std::uint64_t seed,
                       std::int64_t fan_in) {
  const cudaStream_t s = s_ref.get("launch_fill_mxfp4");
  if (blocks <= 0) return;
  // Random codes have an rms of ~2.93 (e2m1 magnitudes 0 .. 6): a power-of-two scale near
  // 1 / (2.93 sqrt(fan_in)) keeps the variance ~1 / fan_in like launch_fill_uniform's weights.
  const double want =
      1.0 / (2.93 * std::sqrt(static_cast<double>(std::max<std::int64_t>(fan_in, 1))));
  const int e = std::clamp(127 + static_cast<int>(std::lround(std::log2(want))), 1, 254);
  const int grid = static_cast<int>(std::min<std::int64_t>((blocks + 255) / 256, 8192));
  fill_mxfp4_kernel<<<grid, 256, 0, s>>>(static_cast<std::uint8_t *>(out), blocks, seed,
                                         static_cast<std::uint8_t>(e));
  KEEL_CUDA_CHECK_LAUNCH("fill_mxfp4");
}

void launch_fill_uniform(StreamRef s_ref, bf16 *out, std::int64_t n, std::uint64_t seed, float lo,
                         float hi) {
  const cudaStream_t s = s_ref.get("launch_fill_uniform");
  if (n <= 0) return;
  const int blocks = static_cast<int>(std::min<std::int64_t>((n + 255) / 256, 8192));
  fill_uniform_kernel<<<blocks, 256, 0, s>>>(out, n, seed, lo, hi);
  KEEL_CUDA_CHECK_LAUNCH("fill_uniform");
}

}  // namespace keel::cuda
