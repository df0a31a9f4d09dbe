#!/usr/bin/env bash
# Session 16: MoE models keep the fused decode path with the new 8-row default (its MoE
# kernels take 4 rows: the limit is lowered to 4, not turned off). The MoE CUDA tests, and
# Qwen3-30B-A3B (bf16 experts, the fused MoE decode path) at 1, 2, 4, 8 seqs with today's
# default against --fused-max-m 2 (the old default) and 0 (unfused).
set -uo pipefail
carry=.devcarry-s16; out=${OUT:-/tmp/o}; budget=${BUDGET:-360}
source scripts/device/budget_lib.sh
nvidia-smi --query-gpu=name --format=csv,noheader
stamp "tests: moe, fused"
timeout "$(cap 120)" "$B/keel_test_cuda" --gtest_filter='*Moe*:*Fused*' >"$out/t.log" 2>&1; echo "exit $?"
summary "$out/t.log" 8
for f in default 2 0; do
  flag=""; [ "$f" != default ] && flag="--fused-max-m $f"
  stamp "qwen3-30b-a3b, fused $f"
  timeout "$(cap 80)" "$B/cuda_bench" --model qwen3-30b-a3b --no-long-prefill --decode-steps 64 --seqs 1,2,4,8 $flag >"$out/q$f.log" 2>&1; echo "exit $?"
  grep -oE 'fused decode for M <= [0-9]+' "$out/q$f.log" | head -1
  grep -E '^\| qwen3' "$out/q$f.log" | grep decode | head -6
done
stamp done
