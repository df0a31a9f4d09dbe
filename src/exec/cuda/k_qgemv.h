// Integer-dot GEMV over GGUF blocks (issue #29): y = W x for M <= kQgemvMaxM rows with W
// in Q8_0 / Q4_0 / Q4_K / Q5_K / Q6_K blocks as stored. Each block stages its M input rows
// in shared memory quantized to int8 in blocks of 32 (a scale and the block's sum, as
// GGML's q8_1, but the sum of the int8 codes so the K-quant min term cancels exactly), so the inner
// loop is dp4a on the weights' integer codes, one per 4 weights and row, with the block scales
// applied once per 32: a fraction of the float GEMV's (k_quant.h) arithmetic, which made it
// compute-bound. The prologue and epilogue are the fused decode GEMV's (k_decode_fused.h: RMSNorm
// of the residual stream in, bf16 / f32 out, the residual add, SwiGLU of [gate; up]), so the fused
// decode path keeps its launches with quantized weights; launched as a programmatic dependent when
// `pdl`. Accuracy: the input's int8 rounding (half a step of max|x| / 127 per 32 values) bounds the
// error, about 5e-3 of the dot's norm for Gaussian inputs (tests/cuda/qgemv_test.cpp): the kernel
// computes the exact dot of the dequantized weights with the rounded input.
// QgemvParams::mma picks a tensor-core kernel for the same product (k_qgemv_mma.cu,
// formats qgemv_mma_supported): 16 weight rows x 32 (Q6_K: 16) codes of one scale as the A
// operand of mma.sync s8, the staged input as B, so a weight costs the same instructions
// whatever M is; the dp4a kernel's cost grows with M. Same staged input (int8 per 32, the
// scales applied per 32-value unit, the K-quant min and Q4_0's offset through the staged
// sums), so both kernels compute the same dot up to float summation order.
#pragma once

#include <cstddef>
#include <cstdint>

#include "exec/cuda/k_decode_fused.h"
#include "exec/cuda/k_quant.h"

namespace keel::cuda {

constexpr int kQgemvMaxM = 8;
// A qgemv_mma_min_m (CudaRunnerOptions) past kQgemvMaxM: the tensor-core kernel never runs.
constexpr int kQgemvMmaOff = kQgemvMaxM + 1;
// The runner's default qgemv_mma_min_m, and the formats it applies to. Measured on an H100
// (session 18, cuda_qgemv_bench and cuda_bench, bench/RESULTS.md): the K-quants' tensor-core
// kernel is the faster from 4 rows (Q6_K lm_head at M = 4 / 8: 281 / 286 us against dp4a's
// 491 / 534; 8B Q4_K_M decode at 4 / 8 seqs 821 / 1,254 tok/s against 669 / 896, the same
// at 1-2); Q8_0's is slower at every M (qkv at M = 4: 38.8 against 21.4 us), so Q8_0 and
// Q4_0 keep dp4a. Q5_K follows Q4_K, whose layout it shares (not measured alone).
constexpr int kQgemvMmaDefaultMinM = 4;
constexpr bool qgemv_mma_format(QuantFormat f) {
  return f == QuantFormat::kQ4_K || f == QuantFormat::kQ5_K || f == QuantFormat::kQ6_K;
}
// Whether the runner's GEMV of M rows in format f runs on the tensor-core kernel.
constexpr bool qgemv_use_mma(QuantFormat f, int M, int min_m) {
  return qgemv_mma_format(f) && M >= min_m;
}

struct QgemvParams {
  QuantFormat format = QuantFormat::kQ8_0;  // not kMXFP4
  const void *w = nullptr;                  // N rows of K elements in blocks, 16-byte aligned
  std::int64_t N = 0, K = 0;                // K a multiple of the format's block
  int M = 0;
  GemvIn in = GemvIn::kBf16;
  const bf16 *x = nullptr;          // kBf16: [M, K], rows ldx apart (16-byte aligned, ldx % 8 == 0)
  std::int64_t ldx = 0;             // 0: K
  const float *residual = nullptr;  // kRmsNorm: [*, K] f32
  const std::int32_t *rows = nullptr;  // kRmsNorm: residual row of input m (nullable: m)
  const bf16 *norm_weight = nullptr;   // kRmsNorm: [K]
  float eps = 1e-5f;
  GemvOut out = GemvOut::kBf16;  // as k_decode_fused.h; kSwiglu: N = 2I, y [M, I]
  void *y = nullptr;             // element (m, n) at m * ldy + n
  std::int64_t ldy = 0;          // 0: N (N / 2 for kSwiglu)
  bool pdl = false;
  // Grid: one output row per warp, capped at max_waves times the blocks that fit at once
  // (then warps loop over rows, and the per-block staging is paid fewer times); 0: 1.
  int max_waves = 0;
  // The tensor-core kernel where qgemv_mma_supported(format); the dp4a kernel otherwise.
  // It is launched as a plain dependent even with `pdl` (as the bf16 tensor-core GEMV,
  // k_decode_fused.cu: under PDL that one was 30% slower in the model), but still lets the
  // kernel after it start early.
  bool mma = false;
  // The dp4a kernel with its weights streamed through a ring of this many chunks a warp in
  // shared memory (k_qgemv_stream.cu) where qgemv_stream_supported holds; 0 (or a shape it
  // does not take): the register kernel. Not under `mma`.
  int stream_stages = 0;
  // Expert slots (the MoE decode's routed experts, k_moe.h): when set, M = 1, in kBf16, out
  // kF32 / kBf16, no pdl; blockIdx.y = slot s < slots runs expert expert_ids[s]'s weights (at
  // w + expert_ids[s] * expert_stride bytes) on input row s / slots_per_x (rows ldx apart)
  // into output row s (ldy apart); an id outside [0, experts) gives a zero row.
  const std::int32_t *expert_ids = nullptr;
  std::int64_t expert_stride = 0;
  int experts = 0, slots = 1, slots_per_x = 1;
};

// The runner's ring depth for the streamed dp4a kernel, and the formats it streams. Measured
// on an H100 (session 25, cuda_qgemv_bench at the 8B shapes, M = 1-3, bench/RESULTS.md):
// streamed through 2 slots Q6_K and Q8_0 are faster at every shape (Q6_K lm_head 232 -> 155
// us at M = 1, 414 -> 207 at 3; Q8_0 lm_head 233 -> 193): their 2-byte aligned blocks cost
// the register kernel two 2-byte loads a word from global memory, the streamed one 16-byte
// copies and 2-byte loads from shared memory. Q4_K, whose blocks the register kernel loads
// as 16-byte words, is as fast or slower streamed below the LM head (qkv 10.6 -> 12.7 us), so
// Q4_K / Q5_K stay on registers. Q4_0 has Q8_0's 2-byte aligned blocks.
constexpr int kQgemvStreamDefaultStages = 2;
constexpr bool qgemv_stream_format(QuantFormat f) {
  return f == QuantFormat::kQ8_0 || f == QuantFormat::kQ4_0 || f == QuantFormat::kQ6_K;
}

// Which of the kernels runs a GEMV (CudaKernelChoices -> Gemm, the fused decode path): the
// tensor-core kernel for K-quants from mma_min_m rows (qgemv_use_mma), else the dp4a kernel,
// streamed through `stream_stages` ring slots for the qgemv_stream_format formats where the
// shape allows (0: never).
struct QgemvChoice {
  int mma_min_m = kQgemvMmaOff;
  int stream_stages = 0;
  void apply(QgemvParams &p) const {
    p.mma = qgemv_use_mma(p.format, p.M, mma_min_m);
    p.stream_stages = qgemv_stream_format(p.format) ? stream_stages : 0;
  }
};

// Shared memory the kernel stages its input in: M x K int8 and M x K / 32 (scale, sum).
std::size_t qgemv_smem_bytes(int M, std::int64_t K);
// True when launch_qgemv runs the shape: a GGUF format other than MXFP4, 1 <= M <=
// kQgemvMaxM, K a positive multiple of the block whose staged input fits smem_per_block.
bool qgemv_supported(QuantFormat f, int M, std::int64_t K, std::size_t smem_per_block);
// True for the formats the tensor-core kernel implements (QgemvParams::mma).
bool qgemv_mma_supported(QuantFormat f);
// The streamed dp4a kernel (QgemvParams::stream_stages): at most this many ring slots a warp.
constexpr int kQgemvMaxStreamStages = 8;
// Bytes of one ring slot (a chunk: 4,096 weights of a row in format f), and the streamed
// kernel's shared memory (8 warps' rings, then the staged input).
std::size_t qgemv_stream_slot_bytes(QuantFormat f);
std::size_t qgemv_stream_smem_bytes(QuantFormat f, int M, std::int64_t K, int stages);
// True where the streamed kernel runs the shape: qgemv_supported, 2 <= stages <=
// kQgemvMaxStreamStages, rows a multiple of 16 bytes (cp.async), and its shared memory fits.
bool qgemv_stream_supported(QuantFormat f, int M, std::int64_t K, int stages,
                            std::size_t smem_per_block);
// The shared memory a block may opt into on the current device: the smem_per_block
// launch_qgemv checks shapes against, for callers without a CudaContext (device_weight.h).
std::size_t qgemv_device_smem();
// num_sms sizes the persistent grid (CudaContext::num_sms(); 0: the current device's); throws
// Error(kInvalidArgument) on a shape qgemv_supported rejects or a misaligned pointer.
void launch_qgemv(StreamRef s, const QgemvParams &p, int num_sms);

}  // namespace keel::cuda
