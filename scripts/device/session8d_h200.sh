#!/usr/bin/env bash
# Fourth session-8 call: low-bit experts past 8 E / k tokens a step on the dequantize +
# grouped GEMM path (CudaRunnerOptions::moe_lowbit_gemv_max_tokens, auto) against the slot
# GEMVs up to 256 tokens (the old bound), on gpt-oss-20b and gpt-oss-120b shapes (random
# MXFP4 experts), then the MoE tests.
#   there: bash scripts/device/session8d_h200.sh [budget_s]   (carry .devcarry: keel_test_cuda, cuda_bench)
set -uo pipefail
carry=${KEEL_CARRY:-.devcarry}
out=${OUT:-/tmp/keel-s8d}
budget=${1:-150}
here=$(cd "$(dirname "$0")" && pwd)
source "$here/budget_lib.sh"
bench() {  # bench NAME SECONDS ARGS...
  local name=$1 secs=$2
  shift 2
  stamp "cuda_bench $name"
  timeout "$(cap "$secs")" "$B/cuda_bench" --bw 4.8e12 "$@" >"$out/bench_$name.log" 2>&1
  echo "exit $?"
  grep -E '^# gpt|^\|' "$out/bench_$name.log" | grep -v '^|---' | head -12
}
one=(--seqs 32,64,256 --decode-steps 32 --no-long-prefill)
bench 20b_auto 25 --model gpt-oss-20b "${one[@]}"
bench 20b_slots256 25 --model gpt-oss-20b "${one[@]}" --moe-lowbit-gemv-max 256
bench 120b_auto 35 --model gpt-oss-120b "${one[@]}"
stamp "MoE tests"
timeout "$(cap 50)" "$B/keel_test_cuda" --gtest_filter='*Moe*:*Mxfp4*' >"$out/tests.log" 2>&1
echo "exit $?"
summary "$out/tests.log" 8
grep -E -A6 'Failure' "$out/tests.log" | head -20
stamp "done"
