#!/usr/bin/env bash
# Session 16, last call: the whole CUDA suite on the final tree (after the EAGLE-3 merge,
# which touched the engine's speculative path, and the MoE row-limit fix).
set -uo pipefail
carry=.devcarry-s16; out=${OUT:-/tmp/o}; budget=${BUDGET:-300}
source scripts/device/budget_lib.sh
nvidia-smi --query-gpu=name --format=csv,noheader
stamp "all tests"
timeout "$(cap 240)" "$B/keel_test_cuda" >"$out/all.log" 2>&1; echo "exit $?"
summary "$out/all.log" 12
stamp done
