#!/usr/bin/env bash
# Issue #18, MXFP4 on the GPU machine (~100 s, of which ~40 s make-model on the CPU): the MXFP4 CUDA tests (dequantization bit
# for bit vs the CPU at every byte alignment, GEMV and stacked-experts GEMV vs a float
# reference, a tiny MXFP4 GGUF model's greedy tokens CUDA vs CPU, the runner kept-MXFP4 vs
# dequantized at load), compute-sanitizer memcheck on them (the GEMV reads aligned words
# around 17-byte blocks), then an 8B-shaped MXFP4 GGUF from `keel make-model`: batch-1
# decode and prefill 512 kept MXFP4 on the device, and dequantized to bf16 at load (the
# bf16 baseline on the same file), each beside cuda_bench's roofline (weight bytes read
# per token at the measured copy bandwidth).
#
#   here:   KEEL_DEVCARRY=.devcarry scripts/device/package.sh build tests/keel_test_cuda \
#             bench/cuda_bench keel   (then pack as the other scripts do)
#   there:  bash scripts/device/mxfp4_h200.sh [budget-seconds]   (carry .devcarry)
set -uo pipefail
carry=${KEEL_CARRY:-.devcarry}
out=${OUT:-/tmp/keel-mxfp4}
budget=${1:-110}
source "$(dirname "$0")/budget_lib.sh"
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader

stamp "MXFP4 tests"
timeout "$(cap 30)" "$B/keel_test_cuda" --gtest_filter='CudaMxfp4.*:*/mxfp4' \
  >"$out/tests_mxfp4.log" 2>&1
echo "exit $?"
summary "$out/tests_mxfp4.log" 14
grep -E -A8 'Failure' "$out/tests_mxfp4.log" | head -40
sanitize memcheck 'CudaMxfp4.Dequantize*:CudaMxfp4.Gemv*:CudaMxfp4.Expert*' 15

stamp "make-model 8b mxfp4 (GGUF)"
timeout "$(cap 45)" "$B/keel" make-model --shape 8b --dtype mxfp4 --format gguf \
  --out /tmp/mxfp4_8b.gguf
ls -l /tmp/mxfp4_8b.gguf

bench() {  # bench NAME SECONDS ARGS...: 8B batch-1 decode and prefill 512
  local name=$1 secs=$2
  shift 2
  stamp "cuda_bench $name"
  timeout "$(cap "$secs")" "$B/cuda_bench" --model 8b --no-long-prefill --seqs 1 --decode-steps 64 \
    --weights /tmp/mxfp4_8b.gguf "$@" >"$out/bench_$name.log" 2>&1
  echo "exit $?"
  grep -E '^#|^\|' "$out/bench_$name.log" | head -20
}
bench mxfp4 25 --keep-quantized on
# Last, so that a short budget drops it: the same file dequantized to bf16 on the host at
# load (RESULTS.md has the bf16 8B figures of earlier runs too).
bench mxfp4_as_bf16 35 --keep-quantized off
stamp done
