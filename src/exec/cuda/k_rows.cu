// Row copies between the runner's f32 and bf16 activations: the residual stream read out
// as the hidden rows a drafter asks for (ForwardBatch::want_hidden), and the conversions and
// concatenation a drafting head's inputs need (cuda_eagle3_head.h, cuda_mtp_layer.h).
#include <algorithm>

#include "exec/cuda/cuda_check.h"
#include "exec/cuda/kernels.h"

namespace keel::cuda {

namespace {
__global__ void residual_rows_kernel(const float *residual, const bf16 *pending, int H,
                                     std::int64_t n, float *out, std::int64_t out_stride) {
  for (std::int64_t idx = blockIdx.x * std::int64_t(blockDim.x) + threadIdx.x; idx < n;
       idx += std::int64_t(gridDim.x) * blockDim.x) {
    const std::int64_t t = idx / H, i = idx % H;
    float v = residual[idx];
    if (pending) v += __bfloat162float(pending[idx]);  // as launch_add_rmsnorm adds it
    out[t * out_stride + i] = v;
  }
}

__global__ void f32_to_bf16_kernel(const float *in, bf16 *out, std::int64_t n) {
  for (std::int64_t i = blockIdx.x * std::int64_t(blockDim.x) + threadIdx.x; i < n;
       i += std::int64_t(gridDim.x) * blockDim.x)
    out[i] = __float2bfloat16(in[i]);
}

__global__ void bf16_to_f32_kernel(const bf16 *in, float *out, std::int64_t n) {
  for (std::int64_t i = blockIdx.x * std::int64_t(blockDim.x) + threadIdx.x; i < n;
       i += std::int64_t(gridDim.x) * blockDim.x)
    out[i] = __bfloat162float(in[i]);
}

int grid_for(std::int64_t n) {
  return static_cast<int>(std::min<std::int64_t>((n + 255) / 256, 65536));
}
}  // namespace

void launch_residual_rows(StreamRef s_ref, const float *residual, const bf16 *pending, int T, int H,
                          float *out, std::int64_t out_stride) {
  const cudaStream_t s = s_ref.get("launch_residual_rows");
  const std::int64_t n = std::int64_t(T) * H;
  if (n <= 0) return;
  residual_rows_kernel<<<grid_for(n), 256, 0, s>>>(residual, pending, H, n, out, out_stride);
  KEEL_CUDA_CHECK_LAUNCH("residual_rows");
}

void launch_f32_to_bf16(StreamRef s_ref, const float *in, bf16 *out, std::int64_t n) {
  const cudaStream_t s = s_ref.get("launch_f32_to_bf16");
  if (n <= 0) return;
  f32_to_bf16_kernel<<<grid_for(n), 256, 0, s>>>(in, out, n);
  KEEL_CUDA_CHECK_LAUNCH("f32_to_bf16");
}

void launch_bf16_to_f32(StreamRef s_ref, const bf16 *in, float *out, std::int64_t n) {
  const cudaStream_t s = s_ref.get("launch_bf16_to_f32");
  if (n <= 0) return;
  bf16_to_f32_kernel<<<grid_for(n), 256, 0, s>>>(in, out, n);
  KEEL_CUDA_CHECK_LAUNCH("bf16_to_f32");
}

void launch_concat_rows(StreamRef s_ref, const bf16 *a, const bf16 *b, int T, int H, bf16 *out) {
  const cudaStream_t s = s_ref.get("launch_concat_rows");
  if (T <= 0) return;
  const std::size_t row = std::size_t(H) * sizeof(bf16);
  KEEL_CUDA_CHECK(cudaMemcpy2DAsync(out, 2 * row, a, row, row, T, cudaMemcpyDeviceToDevice, s));
  KEEL_CUDA_CHECK(cudaMemcpy2DAsync(out + H, 2 * row, b, row, row, T, cudaMemcpyDeviceToDevice, s));
}

}  // namespace keel::cuda
