#!/usr/bin/env bash
# Session 18, call C, on the final CUDA tree: the whole CUDA suite (the governor, the draft
# model on CUDA, the tensor-core quantized GEMV from 4 rows by default), 8B Q4_K_M kept
# quantized with today's default against dp4a, and the 8B bf16 verify step.
#   here:  KEEL_DEVCARRY=.devcarry-s18 scripts/device/package.sh build-cuda \
#            tests/keel_test_cuda bench/cuda_bench
set -uo pipefail
carry=.devcarry-s18; out=${OUT:-/tmp/o}; budget=${BUDGET:-500}
source scripts/device/budget_lib.sh
nvidia-smi --query-gpu=name --format=csv,noheader
stamp "all tests"
timeout "$(cap 280)" "$B/keel_test_cuda" >"$out/all.log" 2>&1; echo "exit $?"
summary "$out/all.log" 12
grep -E '^\[ spec \]' "$out/all.log"
dec() {  # name, flags
  stamp "$1"
  timeout "$(cap 90)" "$B/cuda_bench" --model 8b --no-long-prefill --decode-steps 32 $2 >"$out/$1.log" 2>&1; echo "exit $?"
  grep -E '^\| 8b' "$out/$1.log" | grep -E 'decode|verify' | head -8
}
dec q4_default "--make-gguf /tmp/q4km.gguf --gguf-dtype q4_k_m --seqs 1,2,4,8"
dec q4_dp4a "--make-gguf /tmp/q4km.gguf --gguf-dtype q4_k_m --seqs 1,2,4,8 --qgemv-mma-min-m 9"
dec bf16_verify "--seqs 1,8 --verify 3"
stamp done
