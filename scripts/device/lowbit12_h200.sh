#!/usr/bin/env bash
# Issue #29 on the GPU machine, session 12: GGUF blocks decode on the integer-dot GEMV
# (k_qgemv.h) -- run_linear's few-row path and the fused decode path (fused_linear.h).
# cuda_bench on the Llama 3.1 8B shape at 1 / 8 / 64 sequences: random bf16 weights (what
# `auto` gives a GGUF file today: dequantized to bf16 at load; bf16 speed does not depend
# on the values) against a Q4_K_M GGUF that cuda_bench writes itself (--make-gguf, as keel
# make-model --shape 8b --dtype q4_k_m --format gguf --seed 1) kept quantized, and that
# file's batch-1/2 decode with the fused path off (--fused-max-m 0) for A/B; then the whole
# CUDA suite (the qgemv, quantized-weight, GGUF, fused-runner and runner tests among it)
# and compute-sanitizer memcheck on the new paths. About 8 minutes with budget 470.
#
#   here:  (build-cuda configured with -DCMAKE_CUDA_FLAGS=--compress-mode=none, so the two
#          binaries' identical fatbins compress together: 7.4 MB, not 9.6)
#          KEEL_DEVCARRY=.devcarry-lowbit12 scripts/device/package.sh build-cuda \
#            tests/keel_test_cuda bench/cuda_bench
#          (cd .devcarry-lowbit12 && tar -cf - bin lib | xz --lzma2=preset=9,dict=192MiB \
#            >pack.tar.xz && rm -r bin lib && cp ../scripts/device/{lowbit12_h200,budget_lib}.sh .)
#   there: (carry .devcarry-lowbit12) bash .devcarry-lowbit12/lowbit12_h200.sh [budget_s]
set -uo pipefail
carry=${KEEL_CARRY:-.devcarry-lowbit12}
out=${OUT:-/tmp/keel-lowbit12}
budget=${1:-470}
here=$(cd "$(dirname "$0")" && pwd)
source "$here/budget_lib.sh"
# The test binary was built in the lowbit worktree: its fixtures resolve under that path.
[ -e /work/wt/lowbit ] || { mkdir -p /work/wt && ln -s "$PWD" /work/wt/lowbit; } 2>/dev/null
nvidia-smi --query-gpu=name,memory.total,clocks.sm,driver_version --format=csv,noheader
git log -1 --format='tree here: %h %s' 2>/dev/null | cut -c1-100

bench() {  # bench NAME ARGS...: 8B decode at 1 / 8 / 64 sequences, prefill 512, 64 x 512
  local name=$1
  shift
  stamp "cuda_bench $name"
  timeout "$(cap 80)" "$B/cuda_bench" --model 8b --no-long-prefill --decode-steps 64 \
    --bw 4.8e12 "$@" >"$out/bench_$name.log" 2>&1
  echo "exit $?"
  grep -E '^#|^\|' "$out/bench_$name.log" | head -20
}
bench bf16 --seqs 8,64
bench q4km --seqs 8,64 --make-gguf /tmp/q4km.gguf --keep-quantized on
bench q4km_unfused --seqs 2 --make-gguf /tmp/q4km.gguf --keep-quantized on --fused-max-m 0
stamp "keel_test_cuda (all)"
timeout "$(cap 190)" "$B/keel_test_cuda" >"$out/tests_all.log" 2>&1
echo "keel_test_cuda exit $?"
summary "$out/tests_all.log" 16
grep -E -A8 'Failure' "$out/tests_all.log" | head -40
grep -E 'kept quantized\) vs cpu' "$out/tests_all.log"

sanitize memcheck 'QuantLinear.FewRows*:Formats/Qgemv.EveryRow*/q4_k:CudaFusedRunner.Quantized*' 60

stamp done
