#!/usr/bin/env bash
# Issue #18, FP8 part, on the GPU machine (~60-90 s of GPU time): the FP8 CUDA tests (bit-exact
# dequantization for every code and scale layout, with the sm_89+ conversion and the
# portable one forced; GEMV and prefill path against a float reference; a make-model FP8
# model's greedy tokens against the CPU runner), memcheck on the FP8 kernels, then
# `keel make-model --shape 8b --dtype fp8` (128 x 128 block scales) and cuda_bench on it:
# batch-1 decode and prefill 512, roofline at the issue's 4.8 TB/s, beside random bf16 in
# the same call.
#
#   here:   scripts/device/package.sh build tests/keel_test_cuda bench/cuda_bench keel
#   there:  ln -sfn $PWD /work/main; LD_LIBRARY_PATH=.devcarry/lib bash scripts/device/fp8_h200.sh [budget-s]
set -uo pipefail
carry=${KEEL_CARRY:-.devcarry}
out=${OUT:-/tmp/keel-fp8}
budget=${1:-150}
source "$(dirname "$0")/budget_lib.sh"
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader

stamp "FP8 tests"
timeout "$(cap 60)" "$B/keel_test_cuda" --gtest_filter='*Fp8*' >"$out/tests_fp8.log" 2>&1
echo "exit $?"
summary "$out/tests_fp8.log" 14
grep -E -A8 'Failure' "$out/tests_fp8.log" | head -40
sanitize memcheck 'Scales/Fp8Layouts.*' 40

stamp "make-model 8b fp8 (block scales)"
timeout "$(cap 60)" "$B/keel" make-model --shape 8b --dtype fp8 --out /tmp/fp8-8b
du -sh /tmp/fp8-8b

bench() {  # bench NAME ARGS...: 8B decode 1 seq and prefill 512
  local name=$1
  shift
  stamp "cuda_bench $name"
  timeout "$(cap 60)" "$B/cuda_bench" --model 8b --no-long-prefill --seqs 1 --decode-steps 64 \
    --bw 4.8e12 "$@" >"$out/bench_$name.log" 2>&1
  echo "exit $?"
  grep -E '^#|^\|' "$out/bench_$name.log" | head -20
}
bench fp8 --weights /tmp/fp8-8b
bench bf16
stamp done
