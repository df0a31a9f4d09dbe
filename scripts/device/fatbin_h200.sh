#!/usr/bin/env bash
# Issue #18 on the GPU machine: the fat binary and its run-time feature choice, and Q5_K.
#  1. cuobjdump: the binaries carry SASS for sm_80/86/89/90/100/120 and PTX for the newest.
#  2. `keel --version` (architectures, device, features) with and without
#     KEEL_CUDA_FEATURES=baseline.
#  3. keel_test_cuda on the key tests (features, model-vs-reference and CPU-vs-CUDA, both
#     parametrized over auto|baseline; one-stage flash; fused GEMV; quantized formats with
#     Q5_K), then the same filter with KEEL_CUDA_FEATURES=baseline in the environment (the
#     tests that build a default context then take the fallback too).
#  4. cuda_bench 8B bf16 batch-1 (and 64-seq) decode, device features vs forced baseline,
#     alternated, so the cost of the fallback (no PDL; 99 KB shared memory) is measured.
#  5. If time is left: make-model 1b q5_k_m, cuda_bench on it kept quantized.
#
#   here:   cmake -S . -B build-fat -G Ninja -DCMAKE_BUILD_TYPE=Release -DKEEL_NATIVE=OFF &&
#           cmake --build build-fat -j2 --target keel keel_test_cuda cuda_bench &&
#           scripts/device/package.sh build-fat tests/keel_test_cuda bench/cuda_bench keel
#   there:  bash scripts/device/fatbin_h200.sh [budget-seconds]      (carry .devcarry)
set -uo pipefail
carry=${KEEL_CARRY:-.devcarry}
out=${OUT:-/tmp/keel-fatbin}
budget=${1:-100}
source "$(dirname "$0")/budget_lib.sh"
nvidia-smi --query-gpu=name,memory.total,driver_version,compute_cap --format=csv,noheader

stamp "cuobjdump: architectures in the binaries"
command -v cuobjdump >/dev/null || PATH=$PATH:/usr/local/cuda/bin
command -v cuobjdump >/dev/null || echo "cuobjdump not found: the checks below report MISSING"
for b in keel keel_test_cuda; do
  elfs=$(cuobjdump --list-elf "$B/$b" 2>/dev/null | grep -oE 'sm_[0-9]+a?' | sort -uV | tr '\n' ' ')
  ptxs=$(cuobjdump --list-ptx "$B/$b" 2>/dev/null | grep -oE 'sm_[0-9]+a?' | sort -uV | tr '\n' ' ')
  echo "$b: SASS $elfs; PTX $ptxs"
  missing=""
  for a in sm_80 sm_86 sm_89 sm_90 sm_100 sm_120; do
    [[ " $elfs " == *" $a "* ]] || missing="$missing $a"
  done
  [[ " $ptxs " == *" sm_120 "* ]] || missing="$missing ptx:sm_120"
  [ -z "$missing" ] && echo "$b: fat binary OK" || echo "$b: MISSING$missing"
done

stamp "keel --version"
"$B/keel" --version
KEEL_CUDA_FEATURES=baseline "$B/keel" --version | tail -1

filter='CudaFeatures.*:*CudaVsTransformers*:*CudaVsCpu*:SlidingWindowModel.*:CudaAttention.Flash*'
filter+=':CudaFusedGemv.*:CudaRunner.*:*QuantWeights*:*CudaGgufQuant*:QuantLinear.*:CudaInfo.*'
stamp "keel_test_cuda (device features; parametrized tests also baseline)"
timeout "$(cap 45)" "$B/keel_test_cuda" --gtest_filter="$filter" >"$out/tests_auto.log" 2>&1
echo "exit $?"
summary "$out/tests_auto.log" 14
grep -E 'device sm_|max \|logprob|cuda vs cpu|greedy' "$out/tests_auto.log" | head -12
grep -E -A8 'Failure' "$out/tests_auto.log" | head -40

stamp "keel_test_cuda with KEEL_CUDA_FEATURES=baseline"
KEEL_CUDA_FEATURES=baseline timeout "$(cap 35)" "$B/keel_test_cuda" --gtest_filter="$filter" \
  >"$out/tests_baseline.log" 2>&1
echo "exit $?"
summary "$out/tests_baseline.log" 10
grep -E -A8 'Failure' "$out/tests_baseline.log" | head -30

bench() {  # bench NAME ENV-MODE ARGS...
  local name=$1 mode=$2
  shift 2
  stamp "cuda_bench $name (KEEL_CUDA_FEATURES=$mode)"
  KEEL_CUDA_FEATURES=$mode timeout "$(cap 30)" "$B/cuda_bench" "$@" >"$out/bench_$name.log" 2>&1
  echo "exit $?"
  grep -E '^#|^\|' "$out/bench_$name.log" | grep -v '^|---' | head -12
}
flags=(--model 8b --no-long-prefill --seqs 64 --decode-steps 64)
bench 8b_auto auto "${flags[@]}"
bench 8b_baseline baseline "${flags[@]}"
bench 8b_auto2 auto "${flags[@]}"
bench 8b_baseline2 baseline "${flags[@]}"

if [ $((budget - (SECONDS - start))) -gt 40 ]; then
  stamp "make-model 1b q5_k_m; cuda_bench kept quantized"
  timeout "$(cap 30)" "$B/keel" make-model --shape 1b --dtype q5_k_m --format gguf \
    --out /tmp/q5km.gguf >/dev/null 2>&1
  echo "make-model exit $?"
  bench 1b_q5km auto --model 1b --no-long-prefill --seqs 1 --decode-steps 64 \
    --weights /tmp/q5km.gguf
fi
stamp done
