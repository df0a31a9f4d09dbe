// Deterministic pseudo-random fill of bf16 tensors on the device (benchmark weights,
// test data): a hash of (seed, index), so the result does not depend on the launch shape.
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
}  // namespace

void launch_fill_uniform(StreamRef s_ref, bf16 *out, std::int64_t n, std::uint64_t seed, float lo,
                         float hi) {
  const cudaStream_t s = s_ref.get("launch_fill_uniform");
  if (n <= 0) return;
  const int blocks = static_cast<int>(std::min<std::int64_t>((n + 255) / 256, 8192));
  fill_uniform_kernel<<<blocks, 256, 0, s>>>(out, n, seed, lo, hi);
  KEEL_CUDA_CHECK_LAUNCH("fill_uniform");
}

}  // namespace keel::cuda
