#!/usr/bin/env bash
# Verification and the key figures of the CUDA backend in one call on the GPU machine:
# the whole CUDA test suite, compute-sanitizer memcheck and racecheck on the newest
# kernels, two rounds of 512 and 8,192-token prefill, 8B
# decode at 64 / 256 sequences, and the engine with GPU sampling. Every step has its own
# timeout, capped by what is left of --budget seconds (default 470) for the whole
# script, so a slow one cannot eat the others' time; logs go to $OUT.
#
#   here:   cmake --build build --target keel_test_cuda cuda_bench cuda_engine_bench
#           KEEL_DEVCARRY=.devcarry-verify scripts/device/package.sh build \
#             tests/keel_test_cuda bench/cuda_bench bench/cuda_engine_bench
#           (cd .devcarry-verify && tar -cJf pack.tar.xz bin lib && rm -rf bin lib)
#   there:  bash scripts/device/verify_h200.sh [budget-seconds]   (carry .devcarry-verify)
set -uo pipefail
carry=${KEEL_CARRY:-.devcarry-verify}
out=${OUT:-/tmp/keel-verify}
budget=${1:-470}
source "$(dirname "$0")/budget_lib.sh"

stamp "device"
nvidia-smi --query-gpu=name,memory.total,clocks.max.sm,driver_version --format=csv,noheader

stamp "keel_test_cuda (all)"
timeout "$(cap 120)" "$B/keel_test_cuda" >"$out/tests.log" 2>&1
echo "keel_test_cuda exit $?"
summary "$out/tests.log" 30
grep -E 'ms per call|TFLOP' "$out/tests.log" | head -12

sanitize memcheck \
  'CudaSample.*:CudaFusedGemv.*:CudaQkvRopeKv.*:CudaAttention.SlidingWindow*:CudaAttention.FlashKernelMatchesReference' 90
sanitize racecheck \
  'CudaSample.SmallBatchesSmallVocab:SlidingWindowModel.CudaMatchesCpuFlash*:CudaAttention.FlashKernelMatchesReference' 70

prefill_round() {
  stamp "prefill round $1"
  timeout "$(cap 35)" "$B/cuda_bench" --model 8b --seqs 1 --decode-steps 8 \
    >"$out/prefill_r$1.log" 2>&1
  grep -E 'prefill|decode' "$out/prefill_r$1.log" | head -4
}
engine() {
  stamp "engine with GPU sampling, 8B, temperature $1"
  timeout "$(cap 40)" "$B/cuda_engine_bench" --model 8b --seqs 1,64,256 --output 128 \
    --temperature "$1" --sampling device 2>&1 | tee "$out/engine_t$1.log"
}
prefill_round 1
engine 1
stamp "8B decode, 64 and 256 seqs"
timeout "$(cap 45)" "$B/cuda_bench" --model 8b --no-long-prefill --seqs 64,256 \
  --decode-steps 64 >"$out/decode_8b.log" 2>&1
grep -E 'decode' "$out/decode_8b.log" | head -6
prefill_round 2
engine 0
stamp "done"
