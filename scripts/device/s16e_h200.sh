#!/usr/bin/env bash
# Session 16, fifth device call: the tensor-core fused GEMV under PDL. Three builds of
# cuda_bench: as committed (PDL like every fused kernel), A (the tensor-core kernel
# launched without the PDL attribute), B (PDL, dependents allowed only after its loop);
# 8B decode at 1, 2, 4, 8 seqs and the 1 + 3 verify step.
set -uo pipefail
carry=.devcarry-s16; out=${OUT:-/tmp/o}; budget=${BUDGET:-300}
source scripts/device/budget_lib.sh
nvidia-smi --query-gpu=name --format=csv,noheader
run() {  # binary, name, extra flags
  timeout "$(cap 45)" "$B/$1" --model 8b --no-long-prefill --decode-steps 64 --seqs 1,2,4,8 --verify 3 $3 >"$out/$2.log" 2>&1
  echo "$2 ($3): $(grep -E '^\| 8b +\| decode [0-9]+ seq' "$out/$2.log" | awk -F'|' '{printf "%s %s /", $3, $4}')"
  grep -E 'verify' "$out/$2.log" | sed -n '2p;3p;4p;5p'
}
run cuda_bench asis "--fused-max-m 8"
run cuda_bench_a a "--fused-max-m 8"
run cuda_bench_b b "--fused-max-m 8"
run cuda_bench_a a_nopdl "--fused-max-m 8 --pdl off"
stamp done
