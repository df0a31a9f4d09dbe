#!/usr/bin/env bash
# Session 18, call A: is the CUDA draft's parting from the greedy output a near tie?
# tests/cuda/engine_speculative_test.cpp (draft model on the device, compare_at_ties; no
# drafts batched against alone) and the settings diagnosis of session 17, then
# s17b's served benchmark (default model at batch 1 on held-out English: off / trained
# draft / n-gram, on the GPU and the CPU).
set -uo pipefail
carry=.devcarry-s18; out=${OUT:-/tmp/o}; budget=${BUDGET:-560}
source scripts/device/budget_lib.sh
stamp "tests"
timeout "$(cap 200)" "$B/keel_test_cuda" --gtest_also_run_disabled_tests \
  --gtest_filter='CudaEngineSpeculative.*:CudaDraftOnCudaDiag.*' >"$out/spec.log" 2>&1
echo "exit $?"; grep -E '^\[ (spec|diag) \]' "$out/spec.log"; summary "$out/spec.log" 12

CARRY=$carry BUDGET=$((budget - (SECONDS - start))) bash scripts/device/s17b_h200.sh
# The 8B bf16 one-token step against the 1 + 3 verify step (issue 30's goals are on the H200).
nvidia-smi --query-gpu=name --format=csv,noheader
stamp "8b verify"
timeout "$(cap 120)" "$B/cuda_bench" --model 8b --no-long-prefill --decode-steps 64 --seqs 1,8 \
  --verify 3 >"$out/8b.log" 2>&1; echo "exit $?"
grep -E '^\| 8b' "$out/8b.log" | grep -E 'decode|verify' | head -8
stamp done
