#!/usr/bin/env bash
# The split-K fused GEMV on the GPU machine: its tests, compute-sanitizer memcheck and
# racecheck on its shared-memory reduction (and on the device sampler and fused decode
# kernels), then 8B / 1B batch-1 decode with --fused-split-k 1, 2, 4 alternated twice and
# the per-shape GEMV bench. Same carry and budget rules as verify_h200.sh.
#
#   there:  bash scripts/device/splitk_h200.sh [budget-seconds]   (carry .devcarry-verify)
set -uo pipefail
carry=${KEEL_CARRY:-.devcarry-verify}
out=${OUT:-/tmp/keel-splitk}
budget=${1:-470}
source "$(dirname "$0")/budget_lib.sh"

stamp "keel_test_cuda (all)"
timeout "$(cap 150)" "$B/keel_test_cuda" >"$out/tests.log" 2>&1
echo "keel_test_cuda exit $?"
summary "$out/tests.log" 12
grep -E '^\[  FAILED|^\[  SKIPPED' "$out/tests.log" | head

sanitize memcheck 'CudaFusedGemv.*:CudaQkvRopeKv.*:CudaFused*' 90
sanitize racecheck \
  'CudaSample.MatchesCpuSamplerSmallVocab:CudaSample.MatchesCpuSamplerWithTiedLogits*:CudaFusedGemv.*:CudaQkvRopeKv.*' 150

for round in 1 2; do
  for model in 8b 1b; do
    for s in 1 2 4; do
      stamp "decode batch 1, $model, split-k $s, round $round"
      timeout "$(cap 30)" "$B/cuda_bench" --model "$model" --no-long-prefill --seqs 1 \
        --decode-steps 64 --fused-split-k "$s" >"$out/d_${model}_s${s}_r$round.log" 2>&1
      grep -E 'decode' "$out/d_${model}_s${s}_r$round.log" | head -3
    done
  done
done
stamp "gemv bench 8b"
timeout "$(cap 40)" "$B/cuda_bench" --gemv-bench --model 8b 2>&1 | tee "$out/gemv_8b.log" | tail -20
stamp "done"
