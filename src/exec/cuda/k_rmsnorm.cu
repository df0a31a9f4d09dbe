// Fused residual add + RMSNorm (and an f32-out RMSNorm): one block per row, the residual
// stream kept in f32.
#include "exec/cuda/cuda_check.h"
#include "exec/cuda/kernels.h"

namespace keel::cuda {

namespace {
constexpr int kThreads = 256;

__device__ float block_sum(float v, float *shared) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  if (lane == 0) shared[warp] = v;
  __syncthreads();
  v = lane < kThreads / 32 ? shared[lane] : 0.0f;
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

__global__ void __launch_bounds__(kThreads)
    add_rmsnorm_kernel(const bf16 *x, float *residual, const bf16 *weight, bf16 *out, int H,
                       float eps) {
  __shared__ float partial[kThreads / 32];
  const std::int64_t base = std::int64_t(blockIdx.x) * H;
  float *r = residual + base;
  float ss = 0.0f;
  for (int i = threadIdx.x; i < H; i += kThreads) {
    float v = r[i];
    if (x) {
      v += __bfloat162float(x[base + i]);
      r[i] = v;
    }
    ss += v * v;
  }
  const float inv = rsqrtf(block_sum(ss, partial) / H + eps);
  // Each thread rereads only the elements it wrote itself: no barrier needed.
  for (int i = threadIdx.x; i < H; i += kThreads)
    out[base + i] = __float2bfloat16(r[i] * inv * __bfloat162float(weight[i]));
}

__global__ void __launch_bounds__(kThreads)
    rmsnorm_f32_kernel(const float *in, const bf16 *weight, float *out, int H, float eps) {
  __shared__ float partial[kThreads / 32];
  const std::int64_t base = std::int64_t(blockIdx.x) * H;
  float ss = 0.0f;
  for (int i = threadIdx.x; i < H; i += kThreads) ss += in[base + i] * in[base + i];
  const float inv = rsqrtf(block_sum(ss, partial) / H + eps);
  // Each thread writes only the elements it read itself: in and out may alias.
  for (int i = threadIdx.x; i < H; i += kThreads)
    out[base + i] = in[base + i] * inv * __bfloat162float(weight[i]);
}
}  // namespace

void launch_rmsnorm_f32(StreamRef s_ref, const float *in, const bf16 *weight, float *out, int rows,
                        int H, float eps) {
  const cudaStream_t s = s_ref.get("launch_rmsnorm_f32");
  if (rows <= 0) return;
  rmsnorm_f32_kernel<<<rows, kThreads, 0, s>>>(in, weight, out, H, eps);
  KEEL_CUDA_CHECK_LAUNCH("rmsnorm_f32");
}

void launch_add_rmsnorm(StreamRef s_ref, const bf16 *x, float *residual, const bf16 *weight,
                        bf16 *out, int rows, int H, float eps) {
  const cudaStream_t s = s_ref.get("launch_add_rmsnorm");
  if (rows <= 0) return;
  add_rmsnorm_kernel<<<rows, kThreads, 0, s>>>(x, residual, weight, out, H, eps);
  KEEL_CUDA_CHECK_LAUNCH("add_rmsnorm");
}

}  // namespace keel::cuda
