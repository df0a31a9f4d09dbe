// qkv bias (qwen2) and per-head q/k RMSNorm (qwen3), one warp per (token, head).
#include "exec/cuda/cuda_check.h"
#include "exec/cuda/kernels.h"

namespace keel::cuda {

namespace {
constexpr int kWarps = 8;
constexpr int kMaxPerLane = kAttnMaxHeadDim / 32;

__global__ void __launch_bounds__(kWarps * 32)
    qkv_bias_norm_kernel(bf16 *qkv, int num_q_heads, int num_kv_heads, int head_dim,
                         const bf16 *bias, const bf16 *q_norm, const bf16 *k_norm, float eps) {
  const int heads = num_q_heads + 2 * num_kv_heads;
  const int t = blockIdx.x;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  bf16 *row = qkv + std::int64_t(t) * heads * head_dim;
  for (int h = warp; h < heads; h += kWarps) {
    bf16 *x = row + std::int64_t(h) * head_dim;
    const bf16 *w = h < num_q_heads ? q_norm : (h < num_q_heads + num_kv_heads ? k_norm : nullptr);
    float v[kMaxPerLane];
    float ss = 0.0f;
#pragma unroll
    for (int j = 0; j < kMaxPerLane; ++j) {
      const int d = lane + 32 * j;
      v[j] = 0.0f;
      if (d < head_dim) {
        v[j] = __bfloat162float(x[d]);
        // Bias first, rounded like the projection output it belongs to.
        if (bias)
          v[j] =
              __bfloat162float(__float2bfloat16(v[j] + __bfloat162float(bias[h * head_dim + d])));
        ss += v[j] * v[j];
      }
    }
    float inv = 1.0f;
    if (w) {
      for (int o = 16; o > 0; o >>= 1) ss += __shfl_xor_sync(0xffffffffu, ss, o);
      inv = rsqrtf(ss / head_dim + eps);
    }
#pragma unroll
    for (int j = 0; j < kMaxPerLane; ++j) {
      const int d = lane + 32 * j;
      if (d < head_dim) x[d] = __float2bfloat16(w ? v[j] * inv * __bfloat162float(w[d]) : v[j]);
    }
  }
}
}  // namespace

void launch_qkv_bias_norm(StreamRef s_ref, bf16 *qkv, int T, int num_q_heads, int num_kv_heads,
                          int head_dim, const bf16 *bias, const bf16 *q_norm, const bf16 *k_norm,
                          float eps) {
  const cudaStream_t s = s_ref.get("launch_qkv_bias_norm");
  if (T <= 0 || (!bias && !q_norm && !k_norm)) return;
  if (head_dim <= 0 || head_dim > kAttnMaxHeadDim)
    throw Error(ErrorCode::kInvalidArgument, "qkv_bias_norm: head_dim " + std::to_string(head_dim));
  qkv_bias_norm_kernel<<<T, kWarps * 32, 0, s>>>(qkv, num_q_heads, num_kv_heads, head_dim, bias,
                                                 q_norm, k_norm, eps);
  KEEL_CUDA_CHECK_LAUNCH("qkv_bias_norm");
}

}  // namespace keel::cuda
