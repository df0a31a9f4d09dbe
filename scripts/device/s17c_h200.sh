#!/usr/bin/env bash
# Session 17, call C: which setting makes a draft model on the CUDA runner change the
# target's greedy output (tests/cuda/draft_diag_test.cpp, temporary), then call B's
# served benchmark. (Run with the binaries packed before the test was renamed
# CudaDraftOnCudaDiag.DISABLED_Variants and before serve refused draft: on CUDA.)
set -uo pipefail
carry=.devcarry-s17; out=${OUT:-/tmp/o}; budget=${BUDGET:-560}
source scripts/device/budget_lib.sh
stamp "diag"
timeout "$(cap 150)" "$B/keel_test_cuda" --gtest_filter='DraftDiag.*' >"$out/diag.log" 2>&1
echo "exit $?"; grep -E '^\[ diag \]' "$out/diag.log"; summary "$out/diag.log" 4
BUDGET=$((budget - (SECONDS - start))) bash scripts/device/s17b_h200.sh
