// FP8 e4m3 linear weights kept as stored on the device (issue #18): the [N, K] e4m3 bytes
// and an f32 scale grid [ceil(N / block_rows), ceil(K / 128)] (a row block of block_rows
// rows: 128 for the releases' 128 x 128 blocks, 1 per channel, N per tensor; columns always
// in blocks of 128, per-tensor and per-channel scales repeated across them,
// quant_linear.cpp). Values equal formats/quant.cpp's dequantize_fp8_row bit for bit.
#pragma once

#include <cstddef>
#include <cstdint>

#include "exec/cuda/kernels.h"

namespace keel::cuda {

constexpr int kFp8ScaleCols = 128;  // columns per scale-grid column on the device
constexpr int kFp8GemvMaxM = 8;

// How e4m3 becomes f16: the sm_89+ conversion instruction (cvt.rn.f16x2.e4m3x2), or the
// portable bit placement sm_80 / sm_86 run; kAuto picks by the compiled architecture.
// Tests force kPortable on newer GPUs so the fallback runs somewhere.
enum class Fp8Convert : std::uint8_t { kAuto, kPortable };

struct Fp8Weight {
  const void *w = nullptr;        // [N, K] e4m3, 16-byte aligned
  const float *scales = nullptr;  // [ceil(N / block_rows), ceil(K / 128)]
  std::int64_t block_rows = 0;
  std::int64_t N = 0, K = 0;  // K a multiple of 16
};

// dst[n, k] = e4m3(w[n, k]) * scale(n, k), as bf16 (rounded once) or f32.
void launch_dequantize_fp8(StreamRef s, const Fp8Weight &w, bf16 *dst,
                           Fp8Convert cvt = Fp8Convert::kAuto);
void launch_dequantize_fp8_f32(StreamRef s, const Fp8Weight &w, float *dst,
                               Fp8Convert cvt = Fp8Convert::kAuto);

// y[m, n] (row stride ldy) = sum_k x[m, k] w[n, k] for m < M; x [M, K] bf16 16-byte aligned;
// y f32 when y_f32, else bf16; 1 <= M <= kFp8GemvMaxM. One warp per output row, converting
// 16 weights a load in registers.
void launch_gemv_fp8(StreamRef s, const Fp8Weight &w, const bf16 *x, void *y, bool y_f32,
                     std::int64_t ldy, int M, Fp8Convert cvt = Fp8Convert::kAuto);

// A stacked expert tensor in FP8 (MoE routed experts, issue #19): expert e's [N, K] e4m3
// at w + e * stride bytes, its scale grid (as Fp8Weight's) at scales + e * stride bytes.
struct Fp8Experts {
  const void *w = nullptr;        // expert 0's weights, 16-byte aligned
  const float *scales = nullptr;  // expert 0's scale grid
  std::size_t stride = 0;         // bytes per expert, a multiple of 16
  std::int64_t block_rows = 0;
  std::int64_t N = 0, K = 0;  // K a multiple of 16
  int experts = 0;
};

// Slot i (< slots): y[i, :] (row stride ldy) = x[i / slots_per_x, :] . W[ids[i]]^T, ids on
// the device (an id outside [0, experts) gives a zero row); x rows ldx apart, 16-byte
// aligned. One warp per output row, as launch_gemv_fp8 at M = 1.
void launch_gemv_fp8_experts(StreamRef s, const Fp8Experts &w, const bf16 *x, std::int64_t ldx,
                             int slots_per_x, const std::int32_t *ids, int slots, void *y,
                             bool y_f32, std::int64_t ldy);
// For g < *n_active (on the device), e = active[g]: W[e] dequantized to dst + e * dst_stride
// elements (16-byte aligned), as launch_dequantize_fp8 would. max_active bounds *n_active.
void launch_dequantize_fp8_experts(StreamRef s, const Fp8Experts &w, const std::int32_t *active,
                                   const std::int32_t *n_active, int max_active, bf16 *dst,
                                   std::int64_t dst_stride);

}  // namespace keel::cuda
