// Small-M linear layers (decode with few sequences) as a bandwidth-bound GEMV: y[M, N] =
// x[M, K] @ W[N, K]^T, bf16 operands, f32 accumulation, bf16 or f32 output. One warp per
// output column n reads W's row n once with 16-byte loads (several in flight) and keeps
// the M <= kGemvMaxM input rows' partial sums in registers. See k_gemv.cu.
#pragma once

#include <cstdint>

#include "exec/cuda/kernels.h"

namespace keel::cuda {

constexpr int kGemvMaxM = 8;

// True when launch_gemv handles the shape: 1 <= M <= kGemvMaxM, K a multiple of 8, and
// x, w 16-byte aligned (rows of K bf16 then stay 16-byte aligned too).
bool gemv_supported(std::int64_t M, std::int64_t K, const void *x, const void *w);

// x [M, K] bf16, w [N, K] bf16, y [M, N] (f32 when y_f32, else bf16).
void launch_gemv(StreamRef s, const bf16 *x, const bf16 *w, void *y, bool y_f32, std::int64_t M,
                 std::int64_t N, std::int64_t K);

}  // namespace keel::cuda
