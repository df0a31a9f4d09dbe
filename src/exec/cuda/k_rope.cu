// Rotary position embedding, in place on the q and k heads of a fused qkv activation.
#include "exec/cuda/cuda_check.h"
#include "exec/cuda/kernels.h"

namespace keel::cuda {

namespace {
// One block per token; threads walk (head, pair). Angles in f32 like the HF reference.
// Only the first rot_dim dimensions of a head rotate (a partial rotary factor, GLM-4.5);
// the rest pass through.
__global__ void rope_kernel(bf16 *qkv, int row_stride, int num_heads, int head_dim, int rot_dim,
                            const std::int32_t *positions, const float *inv_freq, float mscale,
                            bool interleaved) {
  const int t = blockIdx.x;
  const int half = rot_dim / 2;
  const float pos = static_cast<float>(positions[t]);
  bf16 *row = qkv + std::int64_t(t) * row_stride;
  for (int idx = threadIdx.x; idx < num_heads * half; idx += blockDim.x) {
    const int h = idx / half, i = idx % half;
    float sn, cs;
    sincosf(pos * inv_freq[i], &sn, &cs);
    cs *= mscale;
    sn *= mscale;
    bf16 *head = row + std::int64_t(h) * head_dim;
    const int a = interleaved ? 2 * i : i, b = interleaved ? 2 * i + 1 : i + half;
    const float x1 = __bfloat162float(head[a]), x2 = __bfloat162float(head[b]);
    head[a] = __float2bfloat16(x1 * cs - x2 * sn);
    head[b] = __float2bfloat16(x2 * cs + x1 * sn);
  }
}
}  // namespace

void launch_rope(StreamRef s_ref, bf16 *qkv, int T, int row_stride, int num_q_heads,
                 int num_kv_heads, int head_dim, const std::int32_t *positions,
                 const float *inv_freq, float mscale, bool interleaved, int rot_dim) {
  const cudaStream_t s = s_ref.get("launch_rope");
  if (rot_dim == 0) rot_dim = head_dim;
  if (rot_dim < 0 || rot_dim > head_dim || rot_dim % 2 != 0)
    throw Error(ErrorCode::kInvalidArgument, "launch_rope: rot_dim " + std::to_string(rot_dim) +
                                                 " not even within head_dim " +
                                                 std::to_string(head_dim));
  if (T <= 0) return;
  // q heads and k heads are adjacent in a row, so one pass covers both.
  rope_kernel<<<T, 256, 0, s>>>(qkv, row_stride, num_q_heads + num_kv_heads, head_dim, rot_dim,
                                positions, inv_freq, mscale, interleaved);
  KEEL_CUDA_CHECK_LAUNCH("rope");
}

}  // namespace keel::cuda
