#!/usr/bin/env bash
# Session 16, second device call: the fused GEMV's tensor-core kernel reworked (two 16-row
# tiles a warp sharing each input fragment, a bf16 input read from L2 instead of staged,
# one wave of blocks): its tests and the MLA fixture tests (router near-ties counted), the
# GEMV bench at M 1-5, 8 (default grid and 2 waves), then 8B decode at 1-8 seqs and the
# verify step with the fused path up to 2 (today's default), 4 and 8 rows.
#   here:  KEEL_DEVCARRY=.devcarry-s16 scripts/device/package.sh build-cuda \
#            tests/keel_test_cuda bench/cuda_bench
#   there: (carry .devcarry-s16) bash scripts/device/s16b_h200.sh
set -uo pipefail
carry=.devcarry-s16; out=${OUT:-/tmp/o}; budget=${BUDGET:-420}
source scripts/device/budget_lib.sh
nvidia-smi --query-gpu=name --format=csv,noheader
stamp "tests: mla, fused gemv, fused decode, graphs, speculative, qgemv"
timeout "$(cap 150)" "$B/keel_test_cuda" --gtest_filter='*Mla*:*FusedGemv*:*Fused*:*Qgemv*:CudaGraphs*:*Speculative*' >"$out/t.log" 2>&1; echo "exit $?"
summary "$out/t.log" 12
grep -E 'rows over the top-20|^cuda deepseek' "$out/t.log" | head -20
for w in 0 2; do
  stamp "gemv bench, waves $w"
  timeout "$(cap 60)" "$B/cuda_bench" --gemv-bench --model 8b --gemv-waves $w >"$out/gemv$w.log" 2>&1; echo "exit $?"
  grep -E '^\|' "$out/gemv$w.log"
done
for f in 2 4 8; do
  stamp "decode 1-8 seqs and verify 1+3, fused max m $f"
  timeout "$(cap 70)" "$B/cuda_bench" --model 8b --no-long-prefill --decode-steps 64 --seqs 1,2,4,8 --verify 3 --fused-max-m $f >"$out/v$f.log" 2>&1; echo "exit $?"
  grep -E '^# 8b' "$out/v$f.log" | head -1 | grep -oE 'fused decode for M <= [0-9]+'
  grep -E 'decode [0-9]+ seq|verify' "$out/v$f.log" | grep -E '^\|' | head -12
done
stamp done
