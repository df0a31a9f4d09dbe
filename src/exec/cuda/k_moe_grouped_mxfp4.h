// The experts' grouped GEMM over MXFP4 blocks with the weights as the MMA's A operand
// (k_moe_grouped_mxfp4.cu): what launch_moe_grouped_gemm_lowbit runs for MXFP4. Internal to
// k_moe_grouped_lowbit.cu, which checks the shapes (moe_grouped_lowbit_supported) first.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "exec/cuda/k_moe.h"

namespace keel::cuda::moe_mxfp4 {

// C[r] = A[r] . W_e^T over the grouped rows (launch_moe_grouped_gemm's contract), W expert e's
// N x K MXFP4 rows (17-byte blocks, any alignment) at w + e * stride; N % 8 == 0, K % 32 == 0,
// tile_rows 16, 32 or 64.
void launch(cudaStream_t s, const bf16 *A, const std::uint8_t *w, std::size_t stride, int N, int K,
            const std::int32_t *group, const MoeGroupLayout &L, bf16 *C, int tile_rows);

}  // namespace keel::cuda::moe_mxfp4
