// launch_apply_token_masks (k_token_mask.h): one thread per (row, word of 32 tokens), so
// a row of 152k tokens is 4.75k threads reading one word each and writing only the
// disallowed logits.
#include <cmath>

#include "exec/cuda/cuda_check.h"
#include "exec/cuda/k_token_mask.h"

namespace keel::cuda {

namespace {

constexpr int kThreads = 256;

__global__ void apply_token_masks_kernel(float *logits, int V, int W, const std::uint32_t *masks,
                                         const std::int32_t *row_mask) {
  const int r = blockIdx.y;
  const int w = blockIdx.x * kThreads + threadIdx.x;
  const int m = row_mask[r];
  if (m < 0 || w >= W) return;
  const std::uint32_t bits = masks[static_cast<std::size_t>(m) * W + w];
  if (bits == 0xffffffffu) return;
  float *row = logits + static_cast<std::size_t>(r) * V;
  const int end = min(V, (w + 1) * 32);
  for (int t = w * 32; t < end; ++t)
    if (!((bits >> (t & 31)) & 1u)) row[t] = -INFINITY;
}

}  // namespace

void launch_apply_token_masks(StreamRef s_ref, float *logits, int R, int V,
                              const std::uint32_t *masks, const std::int32_t *row_mask) {
  const cudaStream_t s = s_ref.get("apply_token_masks");
  if (R <= 0 || V <= 0) return;
  const int W = (V + 31) / 32;
  const dim3 grid((W + kThreads - 1) / kThreads, R);
  apply_token_masks_kernel<<<grid, kThreads, 0, s>>>(logits, V, W, masks, row_mask);
  KEEL_CUDA_CHECK_LAUNCH("apply_token_masks");
}

void apply_token_masks_reference(float *logits, int R, int V, const std::uint32_t *masks,
                                 const std::int32_t *row_mask) {
  const int W = (V + 31) / 32;
  for (int r = 0; r < R; ++r) {
    if (row_mask[r] < 0) continue;
    const std::uint32_t *mask = masks + static_cast<std::size_t>(row_mask[r]) * W;
    for (int t = 0; t < V; ++t)
      if (!((mask[t / 32] >> (t % 32)) & 1u))
        logits[static_cast<std::size_t>(r) * V + t] = -INFINITY;
  }
}

}  // namespace keel::cuda
