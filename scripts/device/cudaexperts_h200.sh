#!/usr/bin/env bash
# Issue #19, routed experts on CUDA (cudaexperts, session 8): the MoE kernel and model
# tests (the fused decode kernels k_moe_decode.h and the experts' gpt-oss activation --
# biases, clamped SwiGLU -- against float64; tiny qwen3_moe / mixtral against the CPU
# runner), memcheck on the new kernels, then the Qwen3-30B-A3B shape (random bf16 weights
# on the device) decode at 1 / 2 / 4 / 32 sequences and prefill 512 / 8192 on the default
# path (MoE decode on the fused kernels for <= 2 rows), the old unfused decode for A/B
# (--fused-max-m 0), and the step profiler at batch 1 both ways. About 90 s.
#
#   there:  bash scripts/device/cudaexperts_h200.sh [budget-seconds]   (carry .devcarry_cx)
set -uo pipefail
carry=${KEEL_CARRY:-.devcarry_cx}
out=${OUT:-/tmp/keel-cudaexperts}
budget=${1:-100}
source "$(dirname "$0")/budget_lib.sh"
# The test binary was built in this worktree: its source path points at the tree here.
[ -e /work/wt/cudaexperts ] || { mkdir -p /work/wt && ln -s "$PWD" /work/wt/cudaexperts; } 2>/dev/null
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader
which nsys ncu compute-sanitizer 2>/dev/null

stamp "MoE tests"
timeout "$(cap 50)" "$B/keel_test_cuda" --gtest_filter='*Moe*' >"$out/tests_moe.log" 2>&1
echo "exit $?"
summary "$out/tests_moe.log" 12
grep -E -A8 'Failure' "$out/tests_moe.log" | head -40

bench() {  # bench NAME ARGS...: Qwen3-30B-A3B shape, random bf16 weights on the device
  local name=$1
  shift
  stamp "cuda_bench $name"
  timeout "$(cap 40)" "$B/cuda_bench" --model qwen3-30b-a3b --bw 4.8e12 "$@" \
    >"$out/bench_$name.log" 2>&1
  echo "exit $?"
  grep -E '^\||ms/step|profile' "$out/bench_$name.log" | head -24
}
bench fused --seqs 1,2,4,32 --decode-steps 64
bench unfused --seqs 1,2 --decode-steps 64 --no-long-prefill --fused-max-m 0
bench profile_fused --seqs 1 --decode-steps 16 --no-long-prefill --profile
bench profile_unfused --seqs 1 --decode-steps 16 --no-long-prefill --profile --fused-max-m 0

sanitize memcheck 'Shapes/MoeBlock.*:MoeDecode.*' 25
stamp done
