#!/usr/bin/env bash
# Session 15's MLA diagnosis: the deepseek_v3 q-LoRA fixture with one config setting changed
# at a time (halves rope, no YaRN, unnormalized top-k, one group) and the no-q-LoRA fixture,
# CUDA against the CPU runner; then the transformers fixture test that fails.
#   here:  KEEL_DEVCARRY=.devcarry-s15 scripts/device/package.sh build-cuda tests/keel_test_cuda
#   there: (carry .devcarry-s15) bash scripts/device/s15c_h200.sh
set -uo pipefail
carry=.devcarry-s15; out=${OUT:-/tmp/o}; budget=200
source scripts/device/budget_lib.sh
nvidia-smi --query-gpu=name --format=csv,noheader
stamp "variants"
timeout "$(cap 120)" "$B/keel_test_cuda" --gtest_filter='*CudaMlaConfigVariants*:*CudaMlaVsTransformers*' >"$out/var.log" 2>&1; echo "exit $?"
grep -E '^\[       OK|^\[  FAILED|vs cpu|vs transformers' "$out/var.log" | head -30
grep -E -A3 'Failure' "$out/var.log" | head -40
stamp done
