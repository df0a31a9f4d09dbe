// MXFP4 weights kept as GGML blocks on the device (issue #18; layout in formats/mxfp4.h:
// 17-byte blocks of an e8m0 scale and 16 bytes of e2m1 nibbles, element j in the low
// nibble of byte j, element j + 16 in its high nibble). Dequantization equals
// formats/mxfp4.cpp bit for bit (an e2m1 value times a power of two is exact); the GEMV
// decodes in registers. Portable code: no architecture-specific instructions.
#pragma once

#include <cstddef>
#include <cstdint>

#include "exec/cuda/kernels.h"

namespace keel::cuda {

// n elements (a multiple of 32) of blocks at src to dst.
void launch_dequantize_mxfp4(StreamRef s, const void *src, bf16 *dst, std::int64_t n);
void launch_dequantize_mxfp4_f32(StreamRef s, const void *src, float *dst, std::int64_t n);

// A stacked expert tensor's listed experts (MoE prefill): for g < *n_active, e = active[g],
// the n elements (a multiple of 32) of blocks at w_base + e * expert_stride bytes to
// dst + e * n (dst 16-byte aligned). active / n_active on the device (launch_moe_group's
// nonempty experts), so nothing waits on the host; max_active bounds *n_active (the grid).
void launch_dequantize_mxfp4_experts(StreamRef s, const void *w_base, std::size_t expert_stride,
                                     std::int64_t n, const std::int32_t *active,
                                     const std::int32_t *n_active, int max_active, bf16 *dst);

constexpr int kMxfp4GemvMaxM = 8;

// y[m, n] (row stride ldy) = sum_k x[m, k] w[n, k] for m < M, n < N; w: N rows of K / 32
// blocks (any alignment), x [M, K] bf16 (16-byte aligned, K a multiple of 32), y f32 when
// y_f32, else bf16. 1 <= M <= kMxfp4GemvMaxM.
void launch_gemv_mxfp4(StreamRef s, const bf16 *x, const void *w, void *y, bool y_f32,
                       std::int64_t ldy, int M, std::int64_t N, std::int64_t K);

// The same over a stacked expert tensor [experts, N, K] (GGUF's ffn_*_exps, or gpt-oss's
// fused experts): slot i computes y[i, :] = x[i / slots_per_x, :] @ W[expert_ids[i]]^T,
// with W[e] at w_base + e * expert_stride bytes. Only the chosen experts' rows are read.
// x [*, K] bf16 rows ldx elements apart (16-byte aligned), expert_ids [slots] i32 on the
// device (an id outside [0, experts) gives a zero row), y [slots, N] rows ldy apart.
void launch_gemv_mxfp4_experts(StreamRef s, const bf16 *x, std::int64_t ldx, int slots_per_x,
                               const void *w_base, std::size_t expert_stride, int experts,
                               const std::int32_t *expert_ids, int slots, void *y, bool y_f32,
                               std::int64_t ldy, std::int64_t N, std::int64_t K);

}  // namespace keel::cuda
