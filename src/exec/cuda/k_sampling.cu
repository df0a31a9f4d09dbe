// Greedy decoding on the device: the argmax of each logits row (stochastic sampling is
// k_sample.cu).
#include "exec/cuda/cuda_check.h"
#include "exec/cuda/k_block_argmax.cuh"
#include "exec/cuda/kernels.h"

namespace keel::cuda {

namespace {
constexpr int kThreads = 1024;

__global__ void __launch_bounds__(kThreads)
    argmax_kernel(const float *logits, int V, std::int32_t *out) {
  __shared__ float sv[kThreads / 32];
  __shared__ int si[kThreads / 32];
  const int idx = block_argmax<kThreads>(logits + std::int64_t(blockIdx.x) * V, V, sv, si);
  if (threadIdx.x == 0) out[blockIdx.x] = idx;
}
}  // namespace

void launch_argmax(cudaStream_t s, const float *logits, int R, int V, std::int32_t *out) {
  require_stream(s, "argmax");
  if (R <= 0) return;
  argmax_kernel<<<R, kThreads, 0, s>>>(logits, V, out);
  KEEL_CUDA_CHECK_LAUNCH("argmax");
}

}  // namespace keel::cuda
