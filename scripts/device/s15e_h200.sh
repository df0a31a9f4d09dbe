#!/usr/bin/env bash
# Session 15: Q6_K at M = 2 with registers capped for two blocks an SM (k_qgemv), its tests,
# the microbench at M 1 / 2, and 8B Q4_K_M decode at 1 / 2 / 8 seqs.
#   here:  KEEL_DEVCARRY=.devcarry-s15 scripts/device/package.sh build-cuda tests/keel_test_cuda \
#            bench/cuda_bench bench/cuda_qgemv_bench
#   there: (carry .devcarry-s15) bash scripts/device/s15e_h200.sh
set -uo pipefail
carry=.devcarry-s15; out=${OUT:-/tmp/o}; budget=200
source scripts/device/budget_lib.sh
nvidia-smi --query-gpu=name --format=csv,noheader
stamp "qgemv tests"
timeout "$(cap 60)" "$B/keel_test_cuda" --gtest_filter='*Qgemv*:*Quantized*:*Gguf*' >"$out/qt.log" 2>&1; echo "exit $?"
summary "$out/qt.log" 4
stamp "bench"
timeout "$(cap 60)" "$B/cuda_qgemv_bench" --formats q6_k,q4_k --m 1,2 --waves 0 >"$out/qb.log" 2>&1; echo "exit $?"
grep -E '^\|' "$out/qb.log"
timeout "$(cap 70)" "$B/cuda_bench" --model 8b --make-gguf /tmp/q4km.gguf --gguf-dtype q4_k_m --no-long-prefill --decode-steps 32 --seqs 1,2,8 >"$out/q4.log" 2>&1; echo "exit $?"
grep -E '^\| 8b.*decode' "$out/q4.log"
stamp done
