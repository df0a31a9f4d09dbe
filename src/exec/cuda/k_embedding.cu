// Token embedding lookup (bf16 table -> f32 residual stream) and row gather.
#include "exec/cuda/cuda_check.h"
#include "exec/cuda/kernels.h"

namespace keel::cuda {

namespace {
__global__ void embedding_kernel(const std::int32_t *tokens, const bf16 *table, std::int64_t vocab,
                                 int H, float *out) {
  const int t = blockIdx.x;
  const std::int32_t tok = tokens[t];
  float *o = out + std::int64_t(t) * H;
  const bool valid = tok >= 0 && tok < vocab;
  const bf16 *row = table + (valid ? std::int64_t(tok) * H : 0);
  for (int i = threadIdx.x; i < H; i += blockDim.x) o[i] = valid ? __bfloat162float(row[i]) : 0.0f;
}

// 16-byte copies when the row width allows (H % 8 == 0), else element by element.
__global__ void gather_rows_kernel(const bf16 *in, const std::int32_t *rows, int H, bf16 *out) {
  const std::int64_t src = std::int64_t(rows[blockIdx.x]) * H, dst = std::int64_t(blockIdx.x) * H;
  if (H % 8 == 0) {
    const uint4 *i4 = reinterpret_cast<const uint4 *>(in + src);
    uint4 *o4 = reinterpret_cast<uint4 *>(out + dst);
    for (int i = threadIdx.x; i < H / 8; i += blockDim.x) o4[i] = i4[i];
  } else {
    for (int i = threadIdx.x; i < H; i += blockDim.x) out[dst + i] = in[src + i];
  }
}
}  // namespace

void launch_embedding(StreamRef s_ref, const std::int32_t *tokens, int T, const bf16 *table,
                      std::int64_t vocab, int H, float *out) {
  const cudaStream_t s = s_ref.get("launch_embedding");
  if (T <= 0) return;
  embedding_kernel<<<T, 256, 0, s>>>(tokens, table, vocab, H, out);
  KEEL_CUDA_CHECK_LAUNCH("embedding");
}

void launch_gather_rows(StreamRef s_ref, const bf16 *in, const std::int32_t *rows, int R, int H,
                        bf16 *out) {
  const cudaStream_t s = s_ref.get("launch_gather_rows");
  if (R <= 0) return;
  gather_rows_kernel<<<R, 256, 0, s>>>(in, rows, H, out);
  KEEL_CUDA_CHECK_LAUNCH("gather_rows");
}

}  // namespace keel::cuda
