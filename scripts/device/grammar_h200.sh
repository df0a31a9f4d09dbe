#!/usr/bin/env bash
# Structured output on the GPU (issue 17): the CUDA tests of the device-side token mask
# (the mask kernel against its CPU reference; the runner sampling masked rows on the
# device exactly as the CPU Sampler samples the same rows masked on the host), memcheck on
# them, and the decode overhead: the engine on an 8B-shaped random model, batch 1, greedy,
# 128 output tokens, unconstrained and under a JSON schema (masks made while the forward
# runs, applied by the device sampler; goal: >= 95% of unconstrained decode tok/s). Builds
# nothing; same carry and budget rules as verify_h200.sh. Logs go to $OUT.
#
#   here:   cmake --build build --target keel_test_cuda cuda_engine_bench
#           KEEL_DEVCARRY=.devcarry-grammar scripts/device/package.sh build \
#             tests/keel_test_cuda bench/cuda_engine_bench
#           (cd .devcarry-grammar && tar -cJf pack.tar.xz bin lib && rm -rf bin lib)
#   there:  KEEL_CARRY=.devcarry-grammar bash scripts/device/grammar_h200.sh [budget-seconds]
set -uo pipefail
carry=${KEEL_CARRY:-.devcarry-grammar}
out=${OUT:-/tmp/keel-grammar}
budget=${1:-470}
source "$(dirname "$0")/budget_lib.sh"

stamp "device"
nvidia-smi --query-gpu=name,memory.total,clocks.max.sm,driver_version --format=csv,noheader

filter='CudaTokenMask.*:CudaSample.*:CudaEngineSampling.*'
stamp "keel_test_cuda $filter"
timeout "$(cap 120)" "$B/keel_test_cuda" --gtest_filter="$filter" >"$out/tests.log" 2>&1
echo "keel_test_cuda exit $?"
summary "$out/tests.log" 20
grep -E -A8 'Failure' "$out/tests.log" | head -40

sanitize memcheck 'CudaTokenMask.*' 90

# Decode tok/s once every request has its first token (the bench's "decode tok/s").
for c in none json; do
  stamp "engine 8B, batch 1, greedy, 128 tokens, constraint $c"
  timeout "$(cap 120)" "$B/cuda_engine_bench" --model 8b --seqs 1 --prompt 512 --output 128 \
    --temperature 0 --sampling device --constraint "$c" >"$out/engine_$c.log" 2>&1
  echo "exit $?"
  grep -E '^\||^#' "$out/engine_$c.log"
done
decode() { awk -F'|' '/device/ {gsub(/ /, "", $9); print $9}' "$out/engine_$1.log" | tail -1; }
base=$(decode none) json=$(decode json)
if [ -n "$base" ] && [ -n "$json" ]; then
  echo "json schema / unconstrained decode tok/s: $json / $base = $(awk -v a="$json" -v b="$base" \
    'BEGIN { printf "%.1f%%", 100 * a / b }') (goal >= 95%)"
fi
stamp "done"
