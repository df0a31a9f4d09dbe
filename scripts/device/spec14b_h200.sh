#!/usr/bin/env bash
# Session 14's second device call: the merged tree's new CUDA tests (MLA kernels and the
# deepseek_v3 CUDA runner vs CPU, graphs incl. verify steps, speculative engine), the
# verify-step bench (cuda_bench --verify 3 on the 8B shape) and the whole CUDA suite.
#   here:  KEEL_DEVCARRY=.devcarry-spec14 scripts/device/package.sh build-cuda \
#            tests/keel_test_cuda bench/cuda_bench
#          (cd .devcarry-spec14 && tar -cf - bin lib | xz -9 >pack.tar.xz && rm -r bin lib)
#   there: (carry .devcarry-spec14) bash scripts/device/spec14b_h200.sh
set -uo pipefail
carry=.devcarry-spec14; out=${OUT:-/tmp/o}; budget=500
source scripts/device/budget_lib.sh
nvidia-smi --query-gpu=name --format=csv,noheader
stamp "new tests"
timeout "$(cap 150)" "$B/keel_test_cuda" --gtest_filter='*MlaKernel*:*CudaMla*:CudaGraphs.*:CudaEngineSpeculative*' >"$out/new.log" 2>&1; echo "exit $?"
grep -E '^\[ spec \]|^\[       OK|^\[  FAILED|max|worst' "$out/new.log" | head -40
grep -E -A12 'Failure' "$out/new.log" | head -60
stamp "verify bench"
timeout "$(cap 100)" "$B/cuda_bench" --model 8b --no-long-prefill --decode-steps 64 --seqs 8,64 --verify 3 --bw 4.8e12 >"$out/bench.log" 2>&1; echo "exit $?"
grep -E '^\| 8b' "$out/bench.log"
stamp "all"
timeout "$(cap 220)" "$B/keel_test_cuda" >"$out/all.log" 2>&1; echo "exit $?"
summary "$out/all.log" 20
stamp done
