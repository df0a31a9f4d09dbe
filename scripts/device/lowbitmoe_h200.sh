#!/usr/bin/env bash
# Issue #19, routed experts kept MXFP4 / FP8 on CUDA (lowbitmoe, 2026-12-03; written
# without a GPU): the low-bit expert tests (listed experts dequantized bit for bit, the
# FP8 and GGUF-block experts GEMVs, the slot activation and combine vs float64, weight bytes counted at
# the stored size, the gpt-oss-120b shape fitting with >= 40 GB left for KV; tiny
# qwen3_moe (MXFP4 safetensors and GGUF, FP8, GGUF Q8_0 / Q4_0) and gpt_oss (MXFP4) vs the CPU runner alone
# and batched with 31, graphs on, on the slot GEMVs, the dequantize + grouped GEMM path
# and both), the bf16 MoE cases beside them as a regression check, memcheck on the new kernels, then cuda_bench on the gpt-oss-120b
# shape (random MXFP4 experts made on the device: no 65 GB file to write): batch-1 and
# 32-sequence decode, prefill 512 / 8192, and the memory left for the KV cache. About
# 100 s of GPU time after the unpack.
#
#   here:   KEEL_DEVCARRY=.devcarry_lbm scripts/device/package.sh build tests/keel_test_cuda \
#             bench/cuda_bench keel   (then pack as the other scripts do)
#   there:  bash scripts/device/lowbitmoe_h200.sh [budget-seconds]   (carry .devcarry_lbm)
set -uo pipefail
carry=${KEEL_CARRY:-.devcarry_lbm}
out=${OUT:-/tmp/keel-lowbitmoe}
budget=${1:-120}
source "$(dirname "$0")/budget_lib.sh"
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader

stamp "MXFP4 expert tests"
timeout "$(cap 45)" "$B/keel_test_cuda" \
  --gtest_filter='CudaMoeMxfp4.*:CudaMoeFp8.*:CudaMoeQuant.*:*CudaMoeArchVsCpu.*:CudaMxfp4.Expert*' \
  >"$out/tests_lowbitmoe.log" 2>&1
echo "exit $?"
summary "$out/tests_lowbitmoe.log" 20
grep -E 'gpt-oss-120b shape|vs cpu:' "$out/tests_lowbitmoe.log"
grep -E -A8 'Failure' "$out/tests_lowbitmoe.log" | head -40
sanitize memcheck 'CudaMoeMxfp4.Dequant*:CudaMoeMxfp4.Slot*:CudaMoeMxfp4.Combine*:CudaMoeFp8.*:CudaMoeQuant.*:*CudaMoeArchVsCpu.*gpt_oss_mxfp4_mixed:*CudaMoeArchVsCpu.*qwen3_moe_fp8_mixed' 25

bench() {  # bench NAME SECONDS ARGS...: the gpt-oss-120b shape, random MXFP4 experts
  local name=$1 secs=$2
  shift 2
  stamp "cuda_bench $name"
  timeout "$(cap "$secs")" "$B/cuda_bench" --model gpt-oss-120b --bw 4.8e12 "$@" \
    >"$out/bench_$name.log" 2>&1
  echo "exit $?"
  grep -E '^\||^# (gpt|mixture|device)' "$out/bench_$name.log" | head -24
}
# Goal: batch-1 decode >= 450 tok/s (roofline ~850 at 4.8 TB/s of active bytes), and
# ">= 40 GB left for the KV cache" on the "# device memory" line.
bench 120b 40 --seqs 1,32 --decode-steps 64
stamp done
