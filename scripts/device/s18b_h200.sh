#!/usr/bin/env bash
# Session 18, call B (one call for what matters most, then what the budget leaves):
# 1. the CUDA draft model's greedy output up to near ties (engine_speculative_test.cpp)
#    and the settings diagnosis; 2. the quantized GEMV's tensor-core kernel (k_qgemv_mma,
#    written without a GPU): its tests, the kernel bench against dp4a, and 8B Q4_K_M
#    decode with it from 2 and 4 rows against without; 3. s17b's served benchmark.
#   here:  KEEL_DEVCARRY=.devcarry-s18 scripts/device/package.sh build-cuda \
#            tests/keel_test_cuda keel bench/cuda_bench bench/cuda_qgemv_bench
set -uo pipefail
carry=.devcarry-s18; out=${OUT:-/tmp/o}; budget=${BUDGET:-570}
source scripts/device/budget_lib.sh
nvidia-smi --query-gpu=name --format=csv,noheader
stamp "spec tests"
timeout "$(cap 150)" "$B/keel_test_cuda" --gtest_also_run_disabled_tests \
  --gtest_filter='CudaEngineSpeculative.*:CudaDraftOnCudaDiag.*' >"$out/spec.log" 2>&1
echo "exit $?"; grep -E '^\[ (spec|diag) \]' "$out/spec.log"; summary "$out/spec.log" 12
stamp "qgemv tests"
timeout "$(cap 90)" "$B/keel_test_cuda" \
  --gtest_filter='Formats/Qgemv.*:Qgemv.*:QuantLinear.*:CudaFusedRunner.QuantizedDecodeMatchesUnfusedPath' \
  >"$out/qgemv.log" 2>&1
echo "exit $?"; summary "$out/qgemv.log" 12
stamp "qgemv bench"
timeout "$(cap 60)" "$B/cuda_qgemv_bench" --formats q4_k,q6_k,q8_0 --m 1,2,4,8 --waves 0 \
  --kernels dp4a,mma --norm on >"$out/qbench.log" 2>&1; echo "exit $?"
grep -vE '^\s*$' "$out/qbench.log" | tail -60
q4() {  # name, flags
  stamp "$1"
  timeout "$(cap 90)" "$B/cuda_bench" --model 8b --make-gguf /tmp/q4km.gguf --gguf-dtype q4_k_m \
    --no-long-prefill --decode-steps 32 --seqs 1,2,4,8 $2 >"$out/$1.log" 2>&1; echo "exit $?"
  grep -E '^\| 8b' "$out/$1.log" | grep -E 'decode' | head -8
}
q4 q4_dp4a ""
q4 q4_mma2 "--qgemv-mma-min-m 2"
q4 q4_mma4 "--qgemv-mma-min-m 4"
q4 q4_dp4a_again ""
CARRY=$carry BUDGET=$((budget - (SECONDS - start))) bash scripts/device/s17b_h200.sh
stamp done
