#!/usr/bin/env bash
# Session 19, call C (s19a and s19b in one call, the device time being short): the whole
# CUDA suite on the merged tree (DSA, MLA split-K, quantized GEMM, low-bit MoE grouped
# GEMM, grouped-GEMM MoE steps in graphs), then 8B Q4_K_M kept quantized at 16 / 64 / 256
# seqs on the quantized GEMM against bf16, the 128k-context GLM-5 decode step with DSA
# against dense, and gpt-oss-20b with the low-bit grouped GEMM against the old path.
#   here:  KEEL_DEVCARRY=.devcarry-s19 scripts/device/package.sh build-cuda tests/keel_test_cuda \
#            bench/cuda_bench bench/cuda_mla_bench bench/cuda_qgemv_bench keel
set -uo pipefail
carry=.devcarry-s19; out=${OUT:-/tmp/o}; budget=${BUDGET:-575}
source scripts/device/budget_lib.sh
nvidia-smi --query-gpu=name --format=csv,noheader
stamp "all tests"
timeout "$(cap 330)" "$B/keel_test_cuda" >"$out/all.log" 2>&1; echo "exit $?"
summary "$out/all.log" 30
grep -B3 -A12 'Failure' "$out/all.log" | head -50
grep -E '^\[       OK \] .*(Dsa|MlaSplit|Qgemm|Lowbit)' "$out/all.log" | head -12
dec() {  # label, cap, flags
  stamp "$1"
  timeout "$(cap $2)" "$B/cuda_bench" --no-long-prefill --decode-steps 32 $3 >"$out/$1.log" 2>&1
  echo "exit $?"; grep -E '^\| (8b|gpt|glm)' "$out/$1.log" | grep -vE 'prefill' | head -6
}
dec q4_qgemm 90 "--model 8b --make-gguf /tmp/q4km.gguf --gguf-dtype q4_k_m --keep-quantized on --seqs 16,64,256"
dec bf16 50 "--model 8b --seqs 16,64,256"
dec glm5_128k 80 "--model glm-5 --layers 3 --context 131072 --decode-steps 16"
dec oss_old 60 "--model gpt-oss-20b --seqs 64,256 --moe-lowbit-gemm off"
dec oss_gemm0 60 "--model gpt-oss-20b --seqs 64,256 --moe-lowbit-gemv-max 0"
stamp done
