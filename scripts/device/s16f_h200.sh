#!/usr/bin/env bash
# Session 16, validation call on the final CUDA tree: the whole CUDA suite; 8B bf16 decode
# at 1-64 seqs and the 1 + 3 verify step with today's default (fused path to 8 rows, the
# tensor-core GEMV) against the old default (--fused-max-m 2) in the same call; 8B Q4_K_M
# kept quantized the same two ways; the DeepSeek-V3 shape (5 layers) now on CUDA graphs.
#   here:  KEEL_DEVCARRY=.devcarry-s16 scripts/device/package.sh build-cuda \
#            tests/keel_test_cuda bench/cuda_bench
#   there: (carry .devcarry-s16) bash scripts/device/s16f_h200.sh
set -uo pipefail
carry=.devcarry-s16; out=${OUT:-/tmp/o}; budget=${BUDGET:-540}
source scripts/device/budget_lib.sh
nvidia-smi --query-gpu=name --format=csv,noheader
stamp "all tests"
timeout "$(cap 240)" "$B/keel_test_cuda" >"$out/all.log" 2>&1; echo "exit $?"
summary "$out/all.log" 12
grep -E 'rows over the top-20' "$out/all.log"
dec() {  # name, flags
  stamp "$1"
  timeout "$(cap 90)" "$B/cuda_bench" --no-long-prefill --decode-steps 64 $2 >"$out/$1.log" 2>&1; echo "exit $?"
  grep -E '^\| (8b|deepseek)' "$out/$1.log" | grep -E 'decode|verify|prefill' | head -14
}
dec bf16_new "--model 8b --seqs 1,2,4,8,64 --verify 3"
dec bf16_old "--model 8b --seqs 1,2,4,8,64 --verify 3 --fused-max-m 2"
dec q4_new "--model 8b --make-gguf /tmp/q4km.gguf --gguf-dtype q4_k_m --seqs 1,2,4,8"
dec q4_old "--model 8b --make-gguf /tmp/q4km.gguf --gguf-dtype q4_k_m --seqs 1,2,4,8 --fused-max-m 2"
dec dsv3 "--model deepseek-v3 --layers 5 --seqs 1,8,64 --decode-steps 32"
stamp done
