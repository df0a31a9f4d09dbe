// The weight format as a type (docs/ARCHITECTURE.md, "Seams for the open work"): one
// device weight -- bf16, GGUF blocks, FP8 with its scale grid, or MXFP4 -- and one GEMV /
// dequantize dispatch over it, so a caller (a linear layer's range, MLA's projections, an
// MTP head) names the weight, not a per-format entry point. The kernels stay per format
// (k_qgemv.h, k_quant.h, k_fp8.h, k_mxfp4.h, gemm.h); this file picks them.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "exec/cuda/k_fp8.h"
#include "exec/cuda/k_qgemv.h"
#include "exec/cuda/k_quant.h"

namespace keel::cuda {

enum class WeightFormat : std::uint8_t { kBf16, kGguf, kFp8, kMxfp4 };

struct DeviceWeight {
  WeightFormat format = WeightFormat::kBf16;
  QuantFormat blocks = QuantFormat::kQ8_0;  // kGguf: the block type
  std::int64_t rows = 0, cols = 0;          // [rows, cols], y = x W^T
  const void *data = nullptr;               // 16-byte aligned
  const float *scales = nullptr;            // kFp8: the scale grid (k_fp8.h)
  std::int64_t scale_block_rows = 0;        // kFp8: rows per scale-grid row
  std::size_t expert_stride = 0;            // stacked experts: bytes from one to the next

  std::size_t bytes() const;  // of one matrix on the device (scales included)
  std::string name() const;   // "bf16", "q4_k", "fp8", "mxfp4"
};

// The largest M gemv() takes for `w`'s format (bf16: any; the GEMM is the caller's).
int device_weight_gemv_max_m(const DeviceWeight &w);

// y[m, n] (row stride ldy) = sum_k x[m, k] W[n, k], m < M <= device_weight_gemv_max_m, x
// [M, cols] bf16 rows cols apart (16-byte aligned), y f32 when y_f32 else bf16. Each
// format's GEMV: GGUF blocks on k_qgemv.h's integer-dot GEMV where qgemv_supported says so
// (its error is the input's int8 rounding, ~5e-3 of the output's norm), else on k_quant.h's
// float GEMV; bf16 throws (the bf16 GEMV / cuBLASLt live behind gemm.h). `qgemv`: which of
// the integer-dot GEMV's kernels runs it (tensor cores, dp4a streamed or not).
void device_weight_gemv(StreamRef s, const DeviceWeight &w, const bf16 *x, void *y, bool y_f32,
                        std::int64_t ldy, int M, const QgemvChoice &qgemv = {});

// W as bf16 [rows, cols] to dst (16-byte aligned), equal to the CPU reference's
// dequantization rounded once to bf16.
void device_weight_dequantize(StreamRef s, const DeviceWeight &w, bf16 *dst);

struct LinearLayout;
struct WeightRange;
// Range r of a linear weight (quant_linear.h) whose device bytes start at w, as this type.
DeviceWeight range_weight(const LinearLayout &l, const WeightRange &r, const void *w);

}  // namespace keel::cuda
