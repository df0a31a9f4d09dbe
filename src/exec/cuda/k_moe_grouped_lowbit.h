// The experts' grouped GEMM over weights kept in their stored low-bit format (issue #29):
// as launch_moe_grouped_gemm (k_moe.h), but each 128-row B tile is copied to shared memory
// in its stored bytes (cp.async, three stages in flight) and decoded there to bf16 just
// before the tensor-core MMA, so a MoE step above the GEMV threshold reads every active
// expert's blocks once and writes no bf16 copy of them (MXFP4: decoded in registers into the
// MMA's fragments instead, k_moe_grouped_mxfp4.h). Values decoded equal the dequantize kernels'
// (k_mxfp4.h, k_fp8.h, k_quant.h) bit for bit.
#pragma once

#include <cstddef>
#include <cstdint>

#include "exec/cuda/k_fp8.h"
#include "exec/cuda/k_moe.h"
#include "exec/cuda/k_quant.h"

namespace keel::cuda {

// B: each expert's N x K matrix, in one of
// - blocks (`format`: MXFP4, Q8_0, Q4_K, Q5_K, Q6_K): expert e's rows at w + e * stride
//   bytes, K / block elements blocks a row;
// - FP8 (`fp8_parts` 1 or 2): rows [0, fp8[0].N) from fp8[0], the next fp8[1].N rows from
//   fp8[1] (the runner's gate | up, whose scale grids are separate); each part's stride,
//   block rows and K as Fp8Experts says.
struct MoeLowbitWeights {
  QuantFormat format = QuantFormat::kMXFP4;
  const void *w = nullptr;
  std::size_t stride = 0;
  int fp8_parts = 0;  // > 0: FP8, the parts below; `format`, w, stride unused
  Fp8Experts fp8[2];
};

// Whether launch_moe_grouped_gemm_lowbit runs W as an N x K matrix: N % 8 == 0, K % 32 ==
// 0 (K % 256 for the K-quants), a supported format, FP8 parts adding up to N.
bool moe_grouped_lowbit_supported(const MoeLowbitWeights &W, int N, int K);

// C[r] = A[r] . W_e^T for every grouped row r below the total (launch_moe_grouped_gemm's
// contract: groups padded to tile_rows, one of 16 / 32 / 64, rows_cap a multiple of it;
// sizes from device memory, no host wait, a fixed launch shape for graphs).
void launch_moe_grouped_gemm_lowbit(StreamRef s, const bf16 *A, const MoeLowbitWeights &W, int N,
                                    int K, const std::int32_t *group, const MoeGroupLayout &layout,
                                    bf16 *C, int tile_rows = kMoeGemmRows);

}  // namespace keel::cuda
