#!/usr/bin/env bash
set -uo pipefail
# Session 19, call E: the whole CUDA suite after s19c fixes and the DSA top-k rewrite, with
# what was left of the device time (H100; it ran out at 162 tests, all passed; the rest were
# run as one filtered command).
carry=.devcarry-s19; out=${OUT:-/tmp/o}; budget=${BUDGET:-90}
source scripts/device/budget_lib.sh
nvidia-smi --query-gpu=name --format=csv,noheader
stamp "all tests"
timeout "$(cap 88)" "$B/keel_test_cuda" >"$out/all.log" 2>&1; echo "exit $?"
summary "$out/all.log" 16
grep -B3 -A6 'Failure' "$out/all.log" | head -30
grep -E 'vs transformers|: \|logprob error|dsa|top-k' "$out/all.log" | head -20
