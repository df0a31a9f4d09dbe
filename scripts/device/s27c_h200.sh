#!/usr/bin/env bash
# Session 27, call C (issue 29): the bf16 GEMM's scale table only where two blocks an SM still
# fit (Q5_K at 8 column tiles back on per-lane scales): its tests, and the GEMM alone at 16 /
# 64 rows for q4_k / q5_k (call B's figures before this change: bench/RESULTS.md, session 27).
#   here:  KEEL_DEVCARRY=.devcarry-s27c scripts/device/package.sh build-cuda \
#            tests/keel_test_cuda bench/cuda_qgemv_bench   (then xz -9)
#   carry: .devcarry-s27c
set -uo pipefail
carry=.devcarry-s27c; out=${OUT:-/tmp/o}; budget=${BUDGET:-150}
here=$(cd "$(dirname "$0")" && pwd)
source "$here/budget_lib.sh"
nvidia-smi --query-gpu=name,memory.total,clocks.max.sm --format=csv,noheader
stamp "tests: the GEMMs, run_linear, dequantize"
timeout "$(cap 90)" "$B/keel_test_cuda" \
  --gtest_filter='*Qgemm*:QuantLinear.*:Formats/QuantWeights.*:CudaMoeQuant.*' >"$out/tests.log" 2>&1
echo "exit $?"
summary "$out/tests.log" 6
grep -B3 -A10 'Failure' "$out/tests.log" | grep -vE '^\s*$' | head -20
stamp "the bf16 GEMM, q4_k / q5_k, M = 16 / 64"
timeout "$(cap 50)" "$B/cuda_qgemv_bench" --formats q4_k,q5_k --m 16,64 --kernels gemm16 2>&1 |
  grep -E '^\|' | grep -vE '\-\-\-|fmt'
stamp "done"
