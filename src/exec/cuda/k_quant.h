// GGUF block-quantized weights kept in their file's block format on the device
// (issue #18): dequantization to bf16 / f32 (prefill scratch, tests) and a small-M GEMV
// that dequantizes in registers (decode). Block layouts are GGML's, as in
// formats/quant.h; values equal formats/quant.cpp's dequantize_row bit for bit.
#pragma once

#include <cstddef>
#include <cstdint>

#include "exec/cuda/kernels.h"

namespace keel::cuda {

// kMXFP4's kernels live in k_mxfp4.cu; these launchers forward to them.
enum class QuantFormat : std::uint8_t { kQ8_0, kQ4_0, kQ4_K, kQ5_K, kQ6_K, kMXFP4 };

// Elements and bytes of one block of `f`.
int quant_block_elems(QuantFormat f);
int quant_block_bytes(QuantFormat f);

// n elements (a multiple of the block size) from blocks at src to dst (bf16 or f32).
// Launchers take a StreamRef (kernels.h) like every other launcher.
void launch_dequantize(StreamRef s, QuantFormat f, const void *src, bf16 *dst, std::int64_t n);
void launch_dequantize_f32(StreamRef s, QuantFormat f, const void *src, float *dst, std::int64_t n);

constexpr int kQuantGemvMaxM = 8;

// y[m, n] (row stride ldy) = sum_k x[m, k] w[n, k] for m < M, n < N; w holds N rows of K
// elements in blocks of `f` (K a multiple of the block size), x [M, K] bf16 (16-byte
// aligned, K a multiple of 8), y f32 when y_f32, else bf16. 1 <= M <= kQuantGemvMaxM.
void launch_gemv_quant(StreamRef s, QuantFormat f, const bf16 *x, const void *w, void *y,
                       bool y_f32, std::int64_t ldy, int M, std::int64_t N, std::int64_t K);

// Stacked experts [experts, N, K] in blocks of `f` (MoE routed experts, issue #19; kMXFP4
// forwards to k_mxfp4.h): slot i computes y[i, :] (rows ldy apart) = x[i / slots_per_x, :]
// (rows ldx apart) . W[ids[i]]^T, W[e] at w_base + e * expert_stride bytes (a multiple of
// 16), ids on the device (outside [0, experts): a zero row). As launch_gemv_quant at M = 1.
void launch_gemv_quant_experts(StreamRef s, QuantFormat f, const bf16 *x, std::int64_t ldx,
                               int slots_per_x, const void *w_base, std::size_t expert_stride,
                               int experts, const std::int32_t *ids, int slots, void *y, bool y_f32,
                               std::int64_t ldy, std::int64_t N, std::int64_t K);
// For g < *n_active (on the device), e = active[g]: the n elements of W[e] to dst + e * n.
void launch_dequantize_quant_experts(StreamRef s, QuantFormat f, const void *w_base,
                                     std::size_t expert_stride, std::int64_t n,
                                     const std::int32_t *active, const std::int32_t *n_active,
                                     int max_active, bf16 *dst);

}  // namespace keel::cuda
