#!/usr/bin/env bash
# Session 16, first device call: the MLA fixture tests rebuilt on bf16-rounded weights, the
# fused GEMV's tensor-core kernel (tests, then the GEMV bench at M 1-5, 8), and the 8B
# verify step (1 + 3 tokens) with the fused path up to 4 and 8 rows against the default,
# and the first CUDA figures of the DeepSeek-V3 shape (MLA, eager).
#   here:  KEEL_DEVCARRY=.devcarry-s16 scripts/device/package.sh build-cuda \
#            tests/keel_test_cuda bench/cuda_bench
#   there: (carry .devcarry-s16) bash scripts/device/s16a_h200.sh
set -uo pipefail
carry=.devcarry-s16; out=${OUT:-/tmp/o}; budget=${BUDGET:-420}
source scripts/device/budget_lib.sh
nvidia-smi --query-gpu=name --format=csv,noheader
stamp "tests: mla, fused gemv, fused decode, graphs, speculative"
timeout "$(cap 150)" "$B/keel_test_cuda" --gtest_filter='*Mla*:*FusedGemv*:*FusedDecode*:*Fused*:*Qgemv*:CudaGraphs*:*Speculative*' >"$out/t.log" 2>&1; echo "exit $?"
summary "$out/t.log" 30
grep -E '^cuda deepseek|vs cpu' "$out/t.log" | head -20
stamp "gemv bench"
timeout "$(cap 90)" "$B/cuda_bench" --gemv-bench --model 8b >"$out/gemv.log" 2>&1; echo "exit $?"
grep -E '^\|' "$out/gemv.log"
for f in 2 4 8; do
  stamp "verify, fused max m $f"
  timeout "$(cap 60)" "$B/cuda_bench" --model 8b --no-long-prefill --decode-steps 64 --seqs 1,2 --verify 3 --fused-max-m $f >"$out/v$f.log" 2>&1; echo "exit $?"
  grep -E 'decode|verify' "$out/v$f.log" | grep -E '^\|' | head -8
done
stamp "deepseek-v3 shape, 5 layers (3 dense + 2 MoE), MLA eager"
timeout "$(cap 100)" "$B/cuda_bench" --model deepseek-v3 --layers 5 --no-long-prefill --decode-steps 32 --seqs 1,8,64 >"$out/dsv3.log" 2>&1; echo "exit $?"
grep -E '^\||^#|weights' "$out/dsv3.log" | head -20; tail -3 "$out/dsv3.log"
stamp done
