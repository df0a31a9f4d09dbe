#!/usr/bin/env bash
# Issue #18 on the GPU machine: GGUF weights kept quantized on the device. The quantized
# weight tests (and the GGUF / GEMV / runner tests around them), compute-sanitizer
# memcheck on the quantized kernels, then 8B decode (1 and 64 sequences) and prefill 512
# for random bf16 (the baseline, same run) and `keel make-model` Q4_K_M and Q8_0 GGUF
# files, kept quantized and (Q4_K_M) dequantized at load; finally the whole CUDA suite.
#
#   there:  bash scripts/device/lowbit_h200.sh [budget-seconds]
set -uo pipefail
carry=${KEEL_CARRY:-.devcarry}
out=${OUT:-/tmp/keel-lowbit}
budget=${1:-300}
source "$(dirname "$0")/budget_lib.sh"
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader

stamp "quantized-weight tests"
timeout "$(cap 90)" "$B/keel_test_cuda" --gtest_filter='*Quant*:*Gguf*:*Gemv*' >"$out/tests_quant.log" 2>&1
echo "exit $?"
summary "$out/tests_quant.log" 12
grep -E -A8 'Failure' "$out/tests_quant.log" | head -40
sanitize memcheck 'Formats/QuantWeights.*:QuantLinear.*' 60

stamp "make-model 8b q4_k_m, q8_0 (GGUF)"
timeout "$(cap 90)" "$B/keel" make-model --shape 8b --dtype q4_k_m --format gguf --out /tmp/q4km.gguf
timeout "$(cap 90)" "$B/keel" make-model --shape 8b --dtype q8_0 --format gguf --out /tmp/q8.gguf

bench() {  # bench NAME ARGS...: 8B decode 1 / 64 seqs and prefill 512
  local name=$1
  shift
  stamp "cuda_bench $name"
  timeout "$(cap 60)" "$B/cuda_bench" --model 8b --no-long-prefill --seqs 1,64 --decode-steps 64 \
    "$@" >"$out/bench_$name.log" 2>&1
  echo "exit $?"
  grep -E '^#|^\|' "$out/bench_$name.log" | head -30
}
bench bf16
bench q4km --weights /tmp/q4km.gguf
bench q8 --weights /tmp/q8.gguf
bench q4km_dequant --weights /tmp/q4km.gguf --keep-quantized off

stamp "keel_test_cuda (all)"
timeout "$(cap 150)" "$B/keel_test_cuda" >"$out/tests_all.log" 2>&1
echo "keel_test_cuda exit $?"
summary "$out/tests_all.log" 12
grep -E -A8 'Failure' "$out/tests_all.log" | head -30
stamp done
