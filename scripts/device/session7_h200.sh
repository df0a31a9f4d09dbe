#!/usr/bin/env bash
# One call that checks a merged tree on the H200 (session 7), most important first, each
# step capped by what is left of the budget: the whole CUDA test suite (FP8, MXFP4, Q5_K,
# MoE, run-time features), the model tests again with KEEL_CUDA_FEATURES=baseline, then
# 8B decode / prefill with FP8, MXFP4 and bf16 weights (bf16 with device features and
# with the baseline), Qwen3-30B-A3B-shaped MoE decode and prefill, and load progress.
# The MoE reference fixtures (transformers on the CPU) and the 8B model files are made in
# the background while the tests run.
#   there: bash scripts/device/session7_h200.sh [budget_s]   (carry .devcarry)
set -uo pipefail
carry=${KEEL_CARRY:-.devcarry}
out=${OUT:-/tmp/keel-s7}
budget=${1:-420}
here=$(cd "$(dirname "$0")" && pwd)
source "$here/budget_lib.sh"
bg=()
trap 'for p in "${bg[@]}"; do kill "$p" 2>/dev/null; done' EXIT

stamp "device"
nvidia-smi --query-gpu=name,memory.total,driver_version,compute_cap --format=csv,noheader
"$B/keel" --version

stamp "background: MoE fixtures (transformers, CPU), 8B fp8 and mxfp4 files"
(OMP_NUM_THREADS=6 OUT="$out/moecpu" bash "$here/moecpu_h200.sh" >"$out/moecpu.log" 2>&1) &
bg+=($!)
(
  timeout 120 "$B/keel" make-model --shape 8b --dtype fp8 --out /tmp/s7-fp8-8b
  echo "fp8 make-model exit $?"
  timeout 120 "$B/keel" make-model --shape 8b --dtype mxfp4 --format gguf --out /tmp/s7-mxfp4-8b.gguf
  echo "mxfp4 make-model exit $?"
) >"$out/make_models.log" 2>&1 &
models_pid=$!
bg+=($models_pid)

stamp "keel_test_cuda (all)"
timeout "$(cap 170)" "$B/keel_test_cuda" >"$out/tests.log" 2>&1
echo "keel_test_cuda exit $?"
summary "$out/tests.log" 40
grep -E -A10 'Failure' "$out/tests.log" | head -80

filter='*CudaVsTransformers*:*CudaVsCpu*:SlidingWindowModel.*:CudaFusedGemv.*:CudaRunner.*'
filter+=':*QuantWeights*:*Fp8*:CudaMxfp4.*:*CudaMoeVsCpu*'
stamp "keel_test_cuda with KEEL_CUDA_FEATURES=baseline"
KEEL_CUDA_FEATURES=baseline timeout "$(cap 60)" "$B/keel_test_cuda" --gtest_filter="$filter" \
  >"$out/tests_baseline.log" 2>&1
echo "baseline exit $?"
summary "$out/tests_baseline.log" 12
grep -E -A8 'Failure' "$out/tests_baseline.log" | head -30

bench() {  # bench NAME SECONDS ARGS...
  local name=$1 secs=$2
  shift 2
  [ "$(cap "$secs")" -lt 10 ] && { echo "skip $name: out of budget"; return; }
  stamp "cuda_bench $name"
  timeout "$(cap "$secs")" "$B/cuda_bench" "$@" >"$out/bench_$name.log" 2>&1
  echo "exit $?"
  grep -E '^#|^\|' "$out/bench_$name.log" | grep -v '^|---' | head -14
}
stamp "waiting for the 8B files"
timeout "$(cap 90)" tail --pid="$models_pid" -f /dev/null
cat "$out/make_models.log" | grep -v '^\s*$' | tail -6
one=(--model 8b --no-long-prefill --seqs 1 --decode-steps 64 --bw 4.8e12)
bench 8b_fp8 35 "${one[@]}" --weights /tmp/s7-fp8-8b
bench 8b_mxfp4 35 "${one[@]}" --weights /tmp/s7-mxfp4-8b.gguf --keep-quantized on
bench 8b_bf16 30 "${one[@]}"
KEEL_CUDA_FEATURES=baseline bench 8b_bf16_baseline 30 "${one[@]}"
bench moe_30b 60 --model qwen3-30b-a3b --bw 4.8e12 --seqs 32 --decode-steps 64

stamp "MoE fixtures (background) result"
timeout "$(cap 60)" tail --pid="${bg[0]}" -f /dev/null
tail -25 "$out/moecpu.log"

if [ "$(cap 70)" -ge 50 ]; then
  stamp "load progress on CUDA"
  OUT="$out/progress" bash "$here/progress_h200.sh" "$(cap 70)" 2>&1 | tail -20
fi
stamp "done"
