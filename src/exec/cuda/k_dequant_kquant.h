// Dequantization of Q4_K / Q5_K super-blocks a warp a super-block, with whole-sector stores
// (k_dequant_kquant.cu): what k_quant.h's launch_dequantize runs for those formats. Values
// equal formats/quant.cpp's dequantize_row bit for bit.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "exec/cuda/k_quant.h"

namespace keel::cuda {

// Whether the kernels below take format f with these addresses (Q4_K or Q5_K, the blocks and
// the output 16-byte aligned).
bool dequantize_kquant_runs(QuantFormat f, const void *src, const void *dst);

// n elements (a multiple of 256) of the blocks at src to dst; false, launching nothing,
// where dequantize_kquant_runs is false.
bool launch_dequantize_kquant(cudaStream_t s, QuantFormat f, const void *src, bf16 *dst,
                              std::int64_t n);
bool launch_dequantize_kquant(cudaStream_t s, QuantFormat f, const void *src, float *dst,
                              std::int64_t n);
// launch_dequantize_quant_experts' contract (k_quant.h) for Q4_K / Q5_K: the stride a multiple
// of 16 bytes, experts' outputs n elements apart.
bool launch_dequantize_kquant_experts(cudaStream_t s, QuantFormat f, const void *w,
                                      std::size_t stride, std::int64_t n,
                                      const std::int32_t *active, const std::int32_t *n_active,
                                      int max_active, bf16 *dst);

}  // namespace keel::cuda
