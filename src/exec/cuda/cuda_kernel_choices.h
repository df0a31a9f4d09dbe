// The CUDA runner's kernel choices (CudaRunnerOptions::kernels): which kernel runs which
// step, and the row counts where one kernel hands over to the next. The defaults are the
// measured choices (bench/RESULTS.md); nothing in the server sets them: cuda_bench and the
// tests do, to compare variants on the same model. A variant whose measurement lost is
// deleted rather than kept here.
#pragma once

#include "exec/cuda/k_qgemm.h"
#include "exec/cuda/k_qgemv.h"

namespace keel::cuda {

struct CudaKernelChoices {
  // Linear layers of steps with at most this many token rows on the GEMV kernel instead
  // of cuBLASLt (Gemm::set_gemv_max_m; 0: always cuBLASLt). 1: on the H200 the GEMV kernel
  // is 1.01-1.22x cuBLASLt at M = 1 on the 8B shapes, slower at M >= 2 for large N.
  int gemv_max_m = 1;
  // Decode and verify steps with at most this many token rows (capped at kFusedGemvMaxM and
  // by shared memory) run the fused kernels of k_decode_fused.h (cuda_runner_fused.cpp):
  // 6-7 launches per layer instead of 10-11. 0: off. From 2 rows on their GEMV runs on the
  // tensor cores, about as fast at 8 rows as at 1 (H100, 8B: decode 2 / 4 / 8 seqs 314 /
  // 557 / 1,078 -> 321 / 633 / 1,214 tok/s against a limit of 2; a 1 + 3 verify step
  // 1.28x -> 1.16x the one-token step; bench/RESULTS.md).
  int fused_decode_max_m = 8;
  // At most this many split-K parts for attention over the keys (decode with few
  // sequences); 0: as many as fill the GPU (up to one per 64 keys).
  int attn_split_cap = 0;
  // Mixture-of-experts layers of steps with at most this many token rows run their experts
  // as gather-GEMVs that read the expert ids from device memory (a fixed launch shape, so
  // decode graphs capture them); larger steps as one cuBLASLt GEMM per nonempty expert
  // over its grouped rows, sized from a host copy of the group starts (eager only, so
  // decode batches above this run without graphs). 0: always the GEMMs. 256 (not measured
  // yet): a decode step on the GEMMs pays a host sync and up to 2 E launches per layer,
  // while the GEMVs read an expert's weights once per 8 of its tokens.
  int moe_gemv_max_tokens = 256;
  // The same bound for low-bit experts (MXFP4, FP8, GGUF), whose slot GEMVs read an expert
  // once per (token, expert) pair, not once per 8 of its tokens: past about 8 E / k tokens a
  // step, dequantizing the step's experts to bf16 for the grouped GEMM reads fewer bytes.
  // -1: min(moe_gemv_max_tokens, E / k) where the experts run above it as the grouped GEMM
  // that decodes their blocks in shared memory (k_moe_grouped_lowbit.h), reading each
  // active expert once per step (measured: cuda_runner_moe.cpp); min(.., 8 E / k) where
  // they are dequantized to bf16 for it instead (moe_lowbit_gemm off, or shapes it does
  // not take).
  int moe_lowbit_gemv_max_tokens = -1;
  // Above moe_gemv_max_tokens, the experts run as one grouped GEMM launch per matrix
  // (launch_moe_grouped_gemm: sizes from device memory, no host wait) where the shapes
  // allow; off: one cuBLASLt GEMM per nonempty expert after a host read of the group starts.
  bool moe_grouped_gemm = true;
  // The grouped GEMM's row tile (the groups' padding): 16, 32 or 64; 0 picks per step by
  // the mean group size (moe_gemm_tile_rows: 16 up to 16 rows an expert, 32 up to 32).
  int moe_gemm_rows = 0;
  // false: low-bit experts above the GEMV bound are dequantized to a bf16 scratch and run
  // the bf16 grouped GEMM, as before the low-bit GEMM existed (cuda_bench's comparison).
  bool moe_lowbit_gemm = true;
  // GGUF routed experts' slot GEMVs (decode steps up to the GEMV bound) on the integer-dot
  // GEMV's expert slots (k_qgemv.h, QgemvParams::expert_ids) instead of the float slot GEMV
  // (k_quant.h, ~6 instructions a weight). Measured (session 26, H100, Qwen3-30B-A3B Q4_K_M of
  // 8 layers, batch 1): 1,090-1,105 tok/s against the float slot GEMV's 983-985
  // (cuda_bench --moe-gguf-qgemv on|off, scripts/device/s26b_h200.sh).
  bool moe_gguf_qgemv = true;
  // Kernel variants of the fused GEMV, for cuda_bench's comparisons only
  // (FusedGemvParams::mma and max_waves): -1 / 0 are the kernels' own choices.
  int fused_gemv_mma = -1;
  int fused_gemv_waves = 0;
  // GGUF blocks kept quantized: steps of at least this many rows (and at most kQgemvMaxM)
  // run the integer-dot GEMV of K-quant weights on its tensor-core kernel
  // (QgemvParams::mma, qgemv_use_mma), on the fused decode path and in run_linear; fewer
  // rows and Q8_0 / Q4_0 on its dp4a kernel. kQgemvMmaOff: dp4a everywhere. The default
  // was measured (k_qgemv.h: 8B Q4_K_M decode at 8 seqs 1.4x dp4a's).
  int qgemv_mma_min_m = kQgemvMmaDefaultMinM;
  // GGUF blocks kept quantized: the dp4a GEMV (steps below qgemv_mma_min_m rows, and Q8_0 /
  // Q4_0) of Q6_K / Q8_0 / Q4_0 weights streams them through a ring of this many chunks a
  // warp in shared memory (QgemvParams::stream_stages, qgemv_stream_format); 0: the register
  // kernel. The default was measured (k_qgemv.h).
  int qgemv_stream_stages = kQgemvStreamDefaultStages;
  // GGUF blocks kept quantized: steps of kQgemvMaxM < M <= this many rows run a tensor-core
  // GEMM over the blocks (k_qgemm.h) in run_linear; more rows dequantize to bf16 for cuBLASLt.
  // kQgemmOff: dequantize past the GEMV's rows, as before the GEMM (for A/B measurement).
  int qgemm_max_m = kQgemmDefaultMaxM;
  // Those steps run K-quant weights on the dequantizing bf16 tensor-core GEMM
  // (launch_qgemm_bf16); false: on dequantize + cuBLASLt (for A/B measurement; the integer
  // GEMM takes Q8_0 / Q4_0 only).
  bool qgemm_bf16 = true;
  // Multi-head latent attention: steps of at most this many token rows (decode buckets,
  // verify steps, small prefills) run the split-K tensor-core kernel (k_mla_split.cu);
  // larger steps, and 0 (for A/B measurement and tests), the simple kernel.
  int mla_split_max_rows = 256;
  // Larger steps (prefills) too run the split kernel, in chunks of mla_split_max_rows token
  // rows with one query a tile (the chunk's rows x head groups fill the device), instead of
  // the simple kernel's one CTA per (tile, head) on CUDA cores; false: the simple kernel.
  bool mla_prefill_chunks = true;
  // DSA indexer scores on the tensor cores (k_dsa_scores_mma.h, q split into bf16 hi + lo)
  // where the shape allows, else the fp32 kernel (false, for A/B measurement). Measured on
  // an H100 (session 21, cuda_mla_bench at GLM-5's dims): one query over 131,072 keys 38.3
  // us against fp32's 96.5, 8 queries 145 against 852; its tests hold it within 1e-5 of a
  // row's largest score.
  bool dsa_scores_mma = true;
};

}  // namespace keel::cuda
