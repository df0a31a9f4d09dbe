// One linear layer of the fused decode path (cuda_runner_fused.cpp) over the weight
// formats that path runs: bf16 on k_decode_fused.h's GEMV, GGUF blocks (a LinearLayout's
// row ranges, quant_linear.h) on k_qgemv.h's integer-dot GEMV with the same prologue and
// epilogue, one launch per range. Kept apart from the runner so the rule for which layouts
// the fused path takes reads in one place, beside the launch that relies on it.
#pragma once

#include <cstddef>

#include "exec/cuda/k_decode_fused.h"
#include "exec/cuda/k_qgemv.h"
#include "exec/cuda/quant_linear.h"

namespace keel::cuda {

// True when launch_fused_linear runs `l` ([N, K]) at M rows with the epilogue `out`: bf16
// where fused_gemv_supported(M, K) holds; GGUF ranges (not MXFP4, not FP8) where
// qgemv_supported holds for each, and for kSwiglu only as one range (a warp computes a
// gate row and its up row N / 2 rows later, so both halves must share one format).
bool fused_linear_supported(const LinearLayout &l, int M, GemvOut out, std::size_t smem_per_block);

// y = W x(in) as launch_fused_gemv with `p` (p.w, p.N, p.K are taken from w and l), W's
// bytes at w laid out as `l`. Quantized ranges write their columns of each output row
// (rows l.N apart; kSwiglu: l.N / 2); with several ranges each stages the input again.
// Quantized ranges run the integer-dot GEMV kernel `qgemv` picks (CudaKernelChoices: the
// tensor cores from qgemv_mma_min_m rows, dp4a streamed or not). Throws
// Error(kInvalidArgument) where fused_linear_supported is false.
void launch_fused_linear(StreamRef s, const LinearLayout &l, const void *w,
                         const FusedGemvParams &p, int num_sms, const QgemvChoice &qgemv = {});

}  // namespace keel::cuda
