// Tensor-core GEMMs over GGUF blocks for batched decode (issue #29): y[M, N] = x[M, K]
// W[N, K]^T for 8 < M <= a few hundred rows with W in its blocks as stored, so a model kept
// quantized needs no bf16 copy of its weights for those steps: the integer GEMM for Q8_0 / Q4_0
// (launch_qgemm), the dequantizing bf16 GEMM for Q4_K / Q5_K / Q6_K (launch_qgemm_bf16, below).
//
// Two launches. launch_qgemm_quantize_input writes x once, quantized to int8 per 32 values
// (k_qgemv's q8 with the sum of the int8 codes), into a scratch buffer in the tensor-core
// GEMV's record layout; launch_qgemm then runs one GEMM per weight range over it (a stacked
// weight of several ranges quantizes its input once). Each block owns 64 (or 32) weight
// rows and 64 input columns: its warps hold a 16-row tile's integer codes as the A operand of
// mma.sync m16n8k32 s8 and loop over the column tiles of 8, the block's input chunk staged in
// shared memory by cp.async (double-buffered); each int32 dot is scaled by weight scale x input
// scale per 32 values in f32, Q4_0's offset of 8 through the staged block sums, as the GEMVs
// (k_qgemv.h). The error is theirs: the input's int8 rounding, ~5e-3 of the
// output's norm for Gaussian inputs.
#pragma once

#include <cstddef>
#include <cstdint>

#include "exec/cuda/k_quant.h"

namespace keel::cuda {

// The runner's default largest M for the GEMM (CudaKernelChoices::qgemm_max_m); larger steps
// (prefill, large decode batches) dequantize to bf16 and run cuBLASLt. Measured on the H200
// (session 19, bench/RESULTS.md, the integer GEMM then also ran K-quants): the GEMM alone
// against dequantize + cuBLAS, q6_k down 4096x14336 at M = 16 / 64 / 256: 85.5 / 129.5 / 297 us
// against 80.5 / 83.7 / 93.7; the q6_k lm_head 382 / 663 / 2,392 against 629 / 659 / 768. Past
// 64 rows the dequantizing path is faster, below it the GEMMs (8B Q4_K_M at 16 seqs 2,038 tok/s
// where the dequantizing path gave 869 on an H100; the bf16 GEMM since: 2,932).
constexpr int kQgemmDefaultMaxM = 64;
// A qgemm_max_m of this: run_linear never takes the GEMM (Gemm's default, so a Gemm made
// outside a runner keeps dequantize + cuBLASLt).
constexpr int kQgemmOff = 0;

// Bytes launch_qgemm_quantize_input writes for M rows of K (columns padded to 8):
// int8 [K / 32][Mp][32], then float2 (scale, scale x sum of codes) [K / 32][Mp].
std::size_t qgemm_input_bytes(int M, std::int64_t K);

// x [M, K] bf16 (rows ldx apart, 0: K; 16-byte aligned, ldx % 8 == 0), K % 32 == 0, to
// `staged` (qgemm_input_bytes(M, K), 16-byte aligned).
void launch_qgemm_quantize_input(StreamRef s, const bf16 *x, std::int64_t ldx, int M,
                                 std::int64_t K, void *staged);

struct QgemmParams {
  QuantFormat format = QuantFormat::kQ8_0;  // kQ8_0 or kQ4_0
  const void *w = nullptr;                  // N rows of K in blocks, 16-byte aligned
  std::int64_t N = 0, K = 0;
  int M = 0;
  const void *staged = nullptr;  // launch_qgemm_quantize_input's output for these M and K
  bool y_f32 = false;            // y f32, else bf16
  void *y = nullptr;             // element (m, n) at m * ldy + n
  std::int64_t ldy = 0;          // 0: N
  // Warps of a block that split K (each takes every k_groups-th super-block): 2 (64 rows a
  // block) or 4 (32 rows: twice the blocks, for weights of few rows); 0: launch_qgemm's choice
  // (4 when 2 would leave SMs without a block). For the benchmark's comparisons.
  int k_groups = 0;
};

// True when launch_qgemm runs the shape: Q8_0 or Q4_0, M >= 1, K a positive multiple of the
// format's block, and the block's staging fits smem_per_block.
bool qgemm_supported(QuantFormat f, int M, std::int64_t K, std::size_t smem_per_block);
// num_sms: CudaContext::num_sms() (0: the current device's). Throws Error(kInvalidArgument)
// on a shape qgemm_supported rejects or a misaligned pointer.
void launch_qgemm(StreamRef s, const QgemmParams &p, int num_sms);

// The dequantizing tensor-core GEMM (k_qgemm_bf16.cu): y[M, N] = x[M, K] W[N, K]^T for the
// K-quants (Q4_K / Q5_K / Q6_K), reading the bf16 input as it is -- no quantized copy, no
// second launch for it. A lane decodes its weight codes to bf16 in registers, scale and min
// folded in (value = d sc q - dmin m per 32 / 16 values, the codes exact in bf16, two bf16
// roundings past the one a bf16 copy has), and runs them as the A operand of mma.sync m16n8k16
// bf16 against the input staged in shared memory; a decoded A fragment serves every 8-column
// tile of the block (up to 8), so the decode's cost falls as M grows, where the integer GEMM
// scales every product per 32 values. Error: the weights' bf16 rounding, not the input's int8
// rounding (Formats/QgemmBf16 on an H100: 0.0054-0.0058 of the output's norm at K = 14,336
// against the integer GEMM's bound of 0.015). Split-K over blocks where N gives too few: each split
// writes f32 partial sums to `workspace`, a second launch adds them in split order
// (deterministic).
struct QgemmBf16Params {
  QuantFormat format = QuantFormat::kQ4_K;  // a K-quant
  const void *w = nullptr;                  // N rows of K in blocks, 16-byte aligned
  std::int64_t N = 0, K = 0;
  int M = 0;
  const bf16 *x = nullptr;  // [M, K], rows ldx apart (0: K), 16-byte aligned, ldx % 8 == 0
  std::int64_t ldx = 0;
  bool y_f32 = false;    // y f32, else bf16
  void *y = nullptr;     // element (m, n) at m * ldy + n
  std::int64_t ldy = 0;  // 0: N
  // f32 partial sums of the splits (16-byte aligned); a split count that needs more than
  // workspace_bytes is lowered to what fits (1: none needed).
  void *workspace = nullptr;
  std::size_t workspace_bytes = 0;
  int splits = 0;  // K splits over blocks; 0: launch_qgemm_bf16's choice (the benchmark's knob)
};

// True for the K-quants at M >= 1 and K a positive multiple of 256.
bool qgemm_bf16_supported(QuantFormat f, int M, std::int64_t K);
// Workspace that lets launch_qgemm_bf16 take any split count it would choose for M x N.
std::size_t qgemm_bf16_workspace_bytes(int M, std::int64_t N);
// num_sms: CudaContext::num_sms() (0: the current device's). Throws Error(kInvalidArgument)
// on an unsupported shape or a misaligned pointer.
void launch_qgemm_bf16(StreamRef s, const QgemmBf16Params &p, int num_sms);

}  // namespace keel::cuda
