#!/usr/bin/env bash
# Session 19, call A (written without a GPU, first run of all of it): GLM-5's DSA on CUDA,
# MLA's split-K tensor-core decode path, the quantized GEMM for 9-256 rows, the MoE grouped
# GEMM decoding low-bit expert tiles: their CUDA
# tests, then the latent attention alone at long contexts, the 128k-context GLM-5 decode
# step with DSA against dense, the GEMM per 8B shape, and 8B Q4_K_M kept quantized at
# 16 / 64 / 256 seqs with the GEMM against the old dequantize + cuBLAS path.
#   here:  KEEL_DEVCARRY=.devcarry-s19 scripts/device/package.sh build-cuda tests/keel_test_cuda \
#            bench/cuda_bench bench/cuda_mla_bench bench/cuda_qgemv_bench keel
set -uo pipefail
carry=.devcarry-s19; out=${OUT:-/tmp/o}; budget=${BUDGET:-570}
source scripts/device/budget_lib.sh
nvidia-smi --query-gpu=name --format=csv,noheader
bw=$(nvidia-smi --query-gpu=name --format=csv,noheader | grep -q H200 && echo 4.8e12 || echo 3.35e12)
stamp "new tests"
timeout "$(cap 240)" "$B/keel_test_cuda" --gtest_filter='*MlaSplit*:*MlaKernel*:CudaAttentionPlan.*:CudaMlaVsCpu.*:CudaMla.*:CudaMlaEngine.*:CudaDsaVsCpu.*:DsaTopk.*:DsaScores.*:*CudaMlaVsTransformers*:*Qgemm*:QuantLinear.*:*Qgemv*:CudaFusedRunner.Quantized*:*QuantWeights*:*MoeGroupedLowbit*:*CudaMoeLowbitGemm*:MoeGroupedGemm*:*CudaMoeArchVsCpu*:*CudaMoeMxfp4*' \
  >"$out/tests.log" 2>&1; echo "exit $?"
summary "$out/tests.log" 40
grep -B2 -A12 'Failure' "$out/tests.log" | head -60
stamp "mla attention alone"
timeout "$(cap 60)" "$B/cuda_mla_bench" --model deepseek-v3 --contexts 2048,32768,131072 --queries 1,64 --bw $bw \
  >"$out/mla_bench.log" 2>&1; echo "exit $?"; tail -12 "$out/mla_bench.log"
stamp "glm-5 128k dsa vs dense"
timeout "$(cap 100)" "$B/cuda_bench" --model glm-5 --layers 3 --context 131072 --decode-steps 16 \
  >"$out/glm5_128k.log" 2>&1; echo "exit $?"; tail -12 "$out/glm5_128k.log"
stamp "qgemm per shape"
timeout "$(cap 45)" "$B/cuda_qgemv_bench" --formats q4_k,q6_k --m 16,32,64,128,256 --kernels gemm,deq,bf16 \
  >"$out/qgemm_bench.log" 2>&1; echo "exit $?"; tail -30 "$out/qgemm_bench.log"
q4() {  # label, flags
  stamp "$1"
  timeout "$(cap 100)" "$B/cuda_bench" --model 8b --make-gguf /tmp/q4km.gguf --gguf-dtype q4_k_m \
    --keep-quantized on --no-long-prefill --decode-steps 32 --seqs 16,64,256 $2 >"$out/$1.log" 2>&1
  echo "exit $?"; grep -E '^\| 8b' "$out/$1.log" | grep -E 'decode' | head -6
}
q4 q4_qgemm "--qgemm-max-m 256"
q4 q4_deq "--qgemm-max-m 0"
stamp "bf16 same seqs"
timeout "$(cap 70)" "$B/cuda_bench" --model 8b --no-long-prefill --decode-steps 32 --seqs 16,64,256 \
  >"$out/bf16.log" 2>&1; echo "exit $?"; grep -E '^\| 8b' "$out/bf16.log" | grep -E 'decode' | head -6
stamp done
