// SwiGLU activation over a fused gate|up projection.
#include "exec/cuda/cuda_check.h"
#include "exec/cuda/kernels.h"

namespace keel::cuda {

namespace {
__global__ void swiglu_kernel(const bf16 *gate_up, bf16 *out, int I, std::int64_t n) {
  for (std::int64_t idx = blockIdx.x * std::int64_t(blockDim.x) + threadIdx.x; idx < n;
       idx += std::int64_t(gridDim.x) * blockDim.x) {
    const std::int64_t t = idx / I, i = idx % I;
    const float g = __bfloat162float(gate_up[t * 2 * I + i]);
    const float u = __bfloat162float(gate_up[t * 2 * I + I + i]);
    out[idx] = __float2bfloat16(g / (1.0f + __expf(-g)) * u);
  }
}
}  // namespace

void launch_swiglu(StreamRef s_ref, const bf16 *gate_up, bf16 *out, int T, int I) {
  const cudaStream_t s = s_ref.get("launch_swiglu");
  const std::int64_t n = std::int64_t(T) * I;
  if (n <= 0) return;
  const int blocks = static_cast<int>(std::min<std::int64_t>((n + 255) / 256, 65536));
  swiglu_kernel<<<blocks, 256, 0, s>>>(gate_up, out, I, n);
  KEEL_CUDA_CHECK_LAUNCH("swiglu");
}

}  // namespace keel::cuda
