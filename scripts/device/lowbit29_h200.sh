#!/usr/bin/env bash
# Issue #29 on the GPU machine: the integer-dot GEMV over GGUF blocks (k_qgemv.h) and the
# fused decode path on quantized weights. Its tests and the quantized-weight tests around
# it, compute-sanitizer memcheck on them, then cuda_bench 8B decode (1, 4, 8 sequences)
# for bf16 and a `keel make-model` Q4_K_M GGUF kept quantized, in one run.
#   here:  scripts/device/package.sh build-cuda tests/keel_test_cuda bench/cuda_bench keel
#   there: (carry .devcarry) bash scripts/device/lowbit29_h200.sh [budget_s]
set -uo pipefail
carry=${KEEL_CARRY:-.devcarry}
out=${OUT:-/tmp/keel-lowbit29}
budget=${1:-420}
here=$(cd "$(dirname "$0")" && pwd)
source "$here/budget_lib.sh"
nvidia-smi --query-gpu=name,memory.total,clocks.sm --format=csv,noheader

stamp "tests: Qgemv, quantized weights, GGUF, fused decode"
timeout "$(cap 120)" "$B/keel_test_cuda" \
  --gtest_filter='*Qgemv*:*QuantWeights*:*QuantLinear*:*GgufQuant*:*Fused*:*Gemv*:*Fp8*:*QuantModel*' \
  >"$out/tests.log" 2>&1
echo "exit $?"
summary "$out/tests.log" 14
grep -E -A8 'Failure' "$out/tests.log" | head -40
sanitize memcheck '*Qgemv*:Formats/QuantWeights.*' 70

stamp "make-model 8b q4_k_m (GGUF)"
timeout "$(cap 90)" "$B/keel" make-model --shape 8b --dtype q4_k_m --format gguf --out /tmp/q4km.gguf
bench() {  # bench NAME ARGS...: 8B decode at 1, 4, 8 sequences
  local name=$1
  shift
  stamp "cuda_bench $name"
  timeout "$(cap 70)" "$B/cuda_bench" --model 8b --no-long-prefill --seqs 1,4,8 --decode-steps 64 \
    --bw 4.24e12 "$@" >"$out/bench_$name.log" 2>&1
  echo "exit $?"
  grep -E '^#|^\|' "$out/bench_$name.log" | head -20
}
bench bf16
bench q4km --weights /tmp/q4km.gguf --keep-quantized on
stamp done
