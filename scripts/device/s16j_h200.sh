#!/usr/bin/env bash
# Session 16, after the review: the whole CUDA suite (the shared mma.sync header under the
# flash attention kernel and the fused GEMV) and the GEMV bench (its shared timing loop).
set -uo pipefail
carry=.devcarry-s16; out=${OUT:-/tmp/o}; budget=${BUDGET:-300}
source scripts/device/budget_lib.sh
nvidia-smi --query-gpu=name --format=csv,noheader
stamp "all tests"
timeout "$(cap 200)" "$B/keel_test_cuda" >"$out/all.log" 2>&1; echo "exit $?"
summary "$out/all.log" 8
stamp "gemv bench"
timeout "$(cap 80)" "$B/cuda_bench" --gemv-bench --model 8b >"$out/gemv.log" 2>&1; echo "exit $?"
grep -E '^\| (o_proj|down|qkv norm|gate_up norm)' "$out/gemv.log" | head -16
stamp done
