// Elementwise adds into a bf16 activation: a bias broadcast over rows (o_proj bias), or
// another activation of the same shape (a shared expert's output).
#include <algorithm>

#include "exec/cuda/cuda_check.h"
#include "exec/cuda/kernels.h"

namespace keel::cuda {

namespace {
__global__ void add_bf16_kernel(bf16 *__restrict__ y, const bf16 *__restrict__ x, std::int64_t n,
                                int cols, bool broadcast) {
  for (std::int64_t i = blockIdx.x * std::int64_t(blockDim.x) + threadIdx.x; i < n;
       i += std::int64_t(gridDim.x) * blockDim.x) {
    const float a = __bfloat162float(y[i]), b = __bfloat162float(x[broadcast ? i % cols : i]);
    y[i] = __float2bfloat16(a + b);
  }
}
}  // namespace

void launch_add_bf16(StreamRef s_ref, bf16 *y, const bf16 *x, int rows, int cols, bool broadcast) {
  const cudaStream_t s = s_ref.get("launch_add_bf16");
  if (rows < 0 || cols <= 0) throw Error(ErrorCode::kInvalidArgument, "add_bf16: bad shape");
  const std::int64_t n = std::int64_t(rows) * cols;
  if (n == 0) return;
  const int threads = 256;
  const std::int64_t blocks = std::min<std::int64_t>((n + threads - 1) / threads, 4096);
  add_bf16_kernel<<<static_cast<unsigned>(blocks), threads, 0, s>>>(y, x, n, cols, broadcast);
  KEEL_CUDA_CHECK_LAUNCH("add_bf16");
}

}  // namespace keel::cuda
