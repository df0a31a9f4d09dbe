// Sampling on the device. Greedy (argmax) for now; the stochastic samplers follow.
#include <cfloat>

#include "exec/cuda/cuda_check.h"
#include "exec/cuda/kernels.h"

namespace keel::cuda {

namespace {
constexpr int kThreads = 1024;

// Larger value wins; on equal values the lower index (HF's torch.argmax picks the first).
// NaN never wins over a number.
__device__ void better(float &v, int &i, float v2, int i2) {
  if (v2 > v || (v2 == v && i2 < i) || (v != v && v2 == v2)) {
    v = v2;
    i = i2;
  }
}

__global__ void __launch_bounds__(kThreads)
    argmax_kernel(const float *logits, int V, std::int32_t *out) {
  __shared__ float sv[kThreads / 32];
  __shared__ int si[kThreads / 32];
  const float *row = logits + std::int64_t(blockIdx.x) * V;
  float v = -FLT_MAX;
  int idx = 0x7fffffff;
  for (int i = threadIdx.x; i < V; i += kThreads) better(v, idx, row[i], i);
  for (int o = 16; o > 0; o >>= 1)
    better(v, idx, __shfl_xor_sync(0xffffffffu, v, o), __shfl_xor_sync(0xffffffffu, idx, o));
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  if (lane == 0) {
    sv[warp] = v;
    si[warp] = idx;
  }
  __syncthreads();
  if (warp == 0) {
    v = sv[lane];
    idx = si[lane];
    for (int o = 16; o > 0; o >>= 1)
      better(v, idx, __shfl_xor_sync(0xffffffffu, v, o), __shfl_xor_sync(0xffffffffu, idx, o));
    if (lane == 0) out[blockIdx.x] = idx == 0x7fffffff ? 0 : idx;
  }
}
}  // namespace

void launch_argmax(cudaStream_t s, const float *logits, int R, int V, std::int32_t *out) {
  require_stream(s, "argmax");
  if (R <= 0) return;
  argmax_kernel<<<R, kThreads, 0, s>>>(logits, V, out);
  KEEL_CUDA_CHECK_LAUNCH("argmax");
}

}  // namespace keel::cuda
