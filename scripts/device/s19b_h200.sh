#!/usr/bin/env bash
# Session 19, call B: the whole CUDA suite on the merged tree (DSA, MLA split-K, quantized
# GEMM, low-bit MoE grouped GEMM, graph capture of grouped-GEMM MoE steps), then gpt-oss-20b
# (MXFP4 experts) decode at 32 / 64 / 256 seqs with the low-bit grouped GEMM from 0 / 8
# tokens against the old bound (per-slot GEMVs to 64 tokens, dequantize + bf16 GEMM above),
# and the DeepSeek-V3 shape's decode on MLA's split path.
#   here:  KEEL_DEVCARRY=.devcarry-s19 scripts/device/package.sh build-cuda tests/keel_test_cuda \
#            bench/cuda_bench bench/cuda_mla_bench bench/cuda_qgemv_bench keel
set -uo pipefail
carry=.devcarry-s19; out=${OUT:-/tmp/o}; budget=${BUDGET:-570}
source scripts/device/budget_lib.sh
nvidia-smi --query-gpu=name --format=csv,noheader
stamp "all tests"
timeout "$(cap 300)" "$B/keel_test_cuda" >"$out/all.log" 2>&1; echo "exit $?"
summary "$out/all.log" 14
grep -B2 -A10 'Failure' "$out/all.log" | head -40
oss() {  # label, flags
  stamp "$1"
  timeout "$(cap 80)" "$B/cuda_bench" --model gpt-oss-20b --seqs 32,64,256 --decode-steps 32 \
    --no-long-prefill $2 >"$out/$1.log" 2>&1
  echo "exit $?"; grep -E '^\| gpt' "$out/$1.log" | grep -E 'decode' | head -4
}
oss oss_old "--moe-lowbit-gemm off"
oss oss_gemm0 "--moe-lowbit-gemv-max 0"
oss oss_gemm8 "--moe-lowbit-gemv-max 8"
stamp "deepseek-v3"
timeout "$(cap 80)" "$B/cuda_bench" --model deepseek-v3 --layers 5 --no-long-prefill --decode-steps 32 \
  --seqs 1,8,64 >"$out/dsv3.log" 2>&1; echo "exit $?"
grep -E '^\| deepseek' "$out/dsv3.log" | head -6
stamp done
