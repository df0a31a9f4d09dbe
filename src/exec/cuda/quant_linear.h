// Weight-format dispatch for linear layers (issue #18): a weight is bf16 (cuBLASLt or the
// bf16 GEMV, gemm.h) or GGUF blocks kept as stored (k_quant.h). A stacked weight (q|k|v,
// gate|up) is a list of row ranges, each in its file's format: Q4_K_M files mix Q4_K and
// Q6_K even inside one layer's q, k and v. Steps of few rows run the quantized GEMV per
// range; larger steps dequantize the whole weight to a bf16 scratch buffer and call
// cuBLASLt (the first prefill path; a GEMM that dequantizes tiles in shared memory is next).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "core/tensor_view.h"
#include "exec/cuda/gemm.h"
#include "exec/cuda/k_fp8.h"
#include "exec/cuda/k_quant.h"

namespace keel::cuda {

enum class QuantizedWeights : std::uint8_t { kAuto, kOn, kOff };

// kAuto's rule: keep GGUF blocks quantized when the linear weights as bf16 would take more
// than half of the device memory free before loading (the rest is for the KV cache).
bool keep_quantized_auto(std::int64_t bf16_weight_bytes, std::int64_t free_bytes);

// The device format of a GGUF weight type, if it stays quantized on the device.
std::optional<QuantFormat> device_quant_format(DType t);

struct WeightRange {
  QuantFormat format{};
  std::int64_t rows = 0;
  std::size_t offset = 0;  // bytes from the start of the weight's buffer
  // FP8 e4m3 (`format` unused): rows x K bytes at offset, scales (k_fp8.h's grid, 128
  // columns a block) at scale_offset, in row blocks of scale_block_rows.
  bool fp8 = false;
  std::size_t scale_offset = 0;
  std::int64_t scale_block_rows = 0;
};

// How one [N, K] linear weight lies in device memory.
struct LinearLayout {
  std::int64_t N = 0, K = 0;
  std::vector<WeightRange> ranges;              // empty: bf16 [N, K]
  std::vector<std::size_t> part_offsets;        // quantized: byte offset of each planned part
  std::vector<std::size_t> part_scale_offsets;  // fp8: byte offset of each part's scale grid

  bool quantized() const { return !ranges.empty(); }
  std::size_t bytes() const;       // device bytes of the weight
  std::size_t bf16_bytes() const;  // bytes of its bf16 form (the prefill scratch)
  std::string describe() const;    // "q4_k", "q4_k+q6_k", "bf16"
};

// The layout of a stacked weight whose parts (name, file dtype, rows) are given, K columns.
// Quantized when every part's type stays quantized on the device and `keep_quantized`;
// bf16 otherwise. Throws Error(kFormat) naming the tensor when K is not a whole number of
// its type's blocks.
// FP8 parts pass their scales (`scales`, one per part; nullptr when no part is FP8): they
// stay FP8 when every part is FP8 with scales the device grid can hold (column blocks a
// multiple of 128, or whole rows) and K % 16 == 0; bf16 otherwise.
LinearLayout plan_linear(const std::vector<std::pair<std::string, DType>> &parts,
                         const std::vector<std::int64_t> &rows, std::int64_t K, bool keep_quantized,
                         const std::vector<TensorScale> *scales = nullptr);

// An FP8 part's scales as the device grid holds them: f32 [grid_rows, ceil(K / 128)],
// column blocks of the file repeated over the 128-column blocks they cover.
std::vector<float> fp8_device_scales(const TensorScale &s, std::int64_t K);

// Whether run_linear runs M rows of `layout` on the integer GEMM (k_qgemm.h) when
// gemm.qgemm_max_m() allows it: every range Q8_0 / Q4_0 (qgemm_supported), M past the GEMV's.
bool run_linear_uses_qgemm(const LinearLayout &layout, std::int64_t M);
// The same for the dequantizing bf16 tensor-core GEMM (launch_qgemm_bf16), which
// gemm.qgemm_bf16() prefers: every range a K-quant.
bool run_linear_uses_qgemm_bf16(const LinearLayout &layout, std::int64_t M);
// The scratch run_linear needs for steps of up to max_gemm_rows rows on the quantized GEMM (and
// any number on dequantize + cuBLASLt): the larger of the bf16 weight and the GEMM's int8 input.
std::size_t run_linear_scratch_bytes(const LinearLayout &layout, int max_gemm_rows);

// y[M, N] = x[M, K] @ W^T, y bf16 (or f32 when y_f32). Quantized weights with
// M <= kQuantGemvMaxM take the quantized GEMV, from gemm.qgemv_mma_min_m() rows on its
// tensor-core kernel for K-quants (qgemv_use_mma); up to gemm.qgemm_max_m() rows the quantized
// GEMM (with gemm.qgemm_bf16() and K-quant ranges the dequantizing bf16 one, its split-K
// partial sums in `scratch`; else run_linear_uses_qgemm: x quantized once into `scratch`, one
// GEMM per range); larger M
// dequantize into `scratch` and run gemm. `scratch`: run_linear_scratch_bytes(layout, M) at
// least. Like every launcher it takes a StreamRef and checks the owner thread
// (get("run_linear")) before launching.
void run_linear(Gemm &gemm, StreamRef s, const LinearLayout &layout, const void *w, const bf16 *x,
                void *y, bool y_f32, std::int64_t M, void *scratch);

}  // namespace keel::cuda
